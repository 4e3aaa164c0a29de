"""Policy hot-swap (ROS-free): the /policy/update contract, candidate checks, rollback.

An update is a std_msgs/String holding JSON {path, sha256, version, parent_version, signature}:
`signature` is the hex HMAC-SHA256 of the policy file's bytes under a key that is the whole
content of the `update_key_file` (the same file on the sender and on the robot). A candidate is
accepted only when, in this order: a key is configured; the message is well formed; the file's
bytes match both the signature and the sha256; the file loads as a policy whose contract matches
the robot and equals the running policy's (joints, gains, dt, observation layout, action bounds,
command ranges); its actions are finite on recent real observations; its inference time is within
budget; its actions deviate from the running policy's on those observations by less than the
limits; and the file was not rolled back, in this process or by an earlier one (the
signature covers the bytes only, so a replayed announcement could otherwise undo a rollback;
loco_policy.control.rollback_log keeps the record beside the files).
The node validates off the control thread and swaps at a tick boundary; the SwapMonitor decides
when to roll back to the previous policy.
"""

import collections
from dataclasses import dataclass
import hashlib
import hmac
import json
import math
import os
import queue
import stat
import threading
import time

import numpy as np

from loco_policy.control import rollback_log
from loco_policy.policy_file import OnnxPolicy, PolicyFileError
from loco_policy.transition import REWARD_TERMS

UPDATE_FIELDS = {
    'path': str,
    'sha256': str,
    'version': int,
    'parent_version': int,
    'signature': str,
}
"""The /policy/update JSON keys and their types."""

MAX_POLICY_BYTES = 64 * 1024 * 1024
"""Largest policy file read for a signature check (the shipped files are under 1 MB)."""

MAX_VERSION = 2**32 - 1
"""Versions travel in every transition row as two float32 halves (loco_policy.transition)."""


class UpdateRejected(ValueError):
    """A candidate policy refused; the message says why."""


@dataclass(frozen=True)
class Update:
    """One /policy/update announcement."""

    path: str
    sha256: str
    version: int
    parent_version: int
    signature: str


@dataclass
class SwapLimits:
    """What a candidate must satisfy beside its contract."""

    max_action_deviation: float = 1.0
    """Largest |a_new - a_active| (action units) over the observations and joints."""
    max_mean_action_deviation: float = 0.3
    """Largest mean |a_new - a_active| over the observations and joints."""
    inference_budget: float = 0.002
    """Largest 90th percentile of the inference time (s) on the observations (a percentile, so
    that one scheduling hiccup of the validating thread does not reject a candidate)."""

    def __post_init__(self):
        """Refuse limits that would switch a check off (NaN, infinite or not positive)."""
        bad = [
            f'{name}={value!r}'
            for name, value in vars(self).items()
            if not (math.isfinite(float(value)) and float(value) > 0.0)
        ]
        if bad:
            raise ValueError('hot-swap limits refused (finite and > 0 needed): ' + ', '.join(bad))


def sign(data, key):
    """Hex HMAC-SHA256 of data (bytes) under key (bytes)."""
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def read_key(path):
    """The signing key: the whole content of the key file (bytes); UpdateRejected if unusable."""
    if not path:
        raise UpdateRejected('no update_key_file configured: every policy update is refused')
    try:
        with open(path, 'rb') as handle:
            key = handle.read()
    except OSError as error:
        raise UpdateRejected(f'update key file {path} unreadable: {error.strerror}') from None
    if len(key) < 16:
        raise UpdateRejected(f'update key file {path} holds {len(key)} bytes; at least 16 needed')
    return key


MAX_REASON = 400
"""Longest rejection reason kept (characters): reasons quote unverified message content."""


def announced_version(text):
    """The version an unverified update names if an integer in [0, MAX_VERSION], else None.

    It is all a rejection may quote of a message that failed its checks.
    """
    try:
        fields = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None
    version = fields.get('version') if isinstance(fields, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and 0 <= version <= MAX_VERSION:
        return version
    return None


def parse_update(text):
    """Parse the JSON of a /policy/update message into an Update; UpdateRejected if malformed."""
    try:
        fields = json.loads(text)
    except (TypeError, ValueError, RecursionError) as error:
        raise UpdateRejected(f'update is not JSON: {error}') from None
    if not isinstance(fields, dict):
        raise UpdateRejected('update is not a JSON object')
    missing = [k for k in UPDATE_FIELDS if k not in fields]
    if missing:
        raise UpdateRejected(f'update lacks {missing}')
    for key, kind in UPDATE_FIELDS.items():
        value = fields[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UpdateRejected(f'update field {key!r} must be a {kind.__name__}')
    for key in ('version', 'parent_version'):
        if not 0 <= fields[key] <= MAX_VERSION:
            raise UpdateRejected(f'update field {key!r} must be in [0, {MAX_VERSION}]')
    return Update(**{k: fields[k] for k in UPDATE_FIELDS})


def verified_bytes(update, key):
    """Read the announced file once; return its bytes if signature and sha256 match.

    Only a regular file of at most MAX_POLICY_BYTES is read: the path comes from an unverified
    message, and a FIFO, a device or a huge file must not block or exhaust the validator.
    """
    try:
        fd = os.open(update.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as error:
        raise UpdateRejected(f'policy file {update.path} unreadable: {error.strerror}') from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UpdateRejected(f'policy file {update.path} is not a regular file')
        if info.st_size > MAX_POLICY_BYTES:
            raise UpdateRejected(
                f'policy file {update.path} holds {info.st_size} bytes; at most '
                f'{MAX_POLICY_BYTES} are read'
            )
        with os.fdopen(fd, 'rb', closefd=False) as handle:
            blob = handle.read(MAX_POLICY_BYTES + 1)
    except OSError as error:
        raise UpdateRejected(f'policy file {update.path} unreadable: {error.strerror}') from None
    finally:
        os.close(fd)
    if len(blob) > MAX_POLICY_BYTES:
        raise UpdateRejected(f'policy file {update.path} grew past {MAX_POLICY_BYTES} bytes')
    if not hmac.compare_digest(sign(blob, key), update.signature.lower()):
        raise UpdateRejected('signature does not match the file under the update key')
    digest = hashlib.sha256(blob).hexdigest()
    if not hmac.compare_digest(digest, update.sha256.lower()):
        raise UpdateRejected(f'file sha256 {digest[:16]}... differs from the announced one')
    return blob


def contract_differences(candidate, active):
    """Every way the candidate's contract differs from the running one, in words."""
    out = []
    if candidate.joint_names != active.joint_names:
        out.append('joint order differs')
    for name in ('default_joint_pos', 'kp', 'kd', 'torque_limit', 'action_low', 'action_high'):
        if not np.array_equal(getattr(candidate, name), getattr(active, name)):
            out.append(f'{name} differs')
    for name in ('action_scale', 'control_dt', 'observation'):
        if getattr(candidate, name) != getattr(active, name):
            out.append(f'{name} differs')
    ranges = {k: tuple(v) for k, v in candidate.command_ranges.items()}
    if ranges != {k: tuple(v) for k, v in active.command_ranges.items()}:
        out.append('command ranges differ')
    return out


def action_check(candidate, reference, observations, limits):
    """Run both policies on observations (N, obs_dim); return the figures or UpdateRejected.

    Figures: inference time p90 (s), action deviation max and mean (action units).
    """
    obs = np.asarray(observations, dtype=np.float64)
    if obs.ndim != 2 or len(obs) == 0:
        raise UpdateRejected('no real observations recorded yet to check the candidate on')
    new, old, times = [], [], []
    for row in obs:
        start = time.perf_counter()
        new.append(candidate.act(row))
        times.append(time.perf_counter() - start)
        old.append(reference.act(row))
    new, old = np.array(new), np.array(old)
    if not np.all(np.isfinite(new)):
        raise UpdateRejected(
            f'non-finite actions on {int(np.sum(~np.isfinite(new).all(1)))} of {len(obs)} '
            'recent observations'
        )
    # the robot clips to the contract's box; compare what it would send
    box = candidate.contract
    deviation = np.abs(
        np.clip(new, box.action_low, box.action_high)
        - np.clip(old, box.action_low, box.action_high)
    )
    figures = {
        'inference_p90_s': float(np.percentile(times, 90)),
        'deviation_max': float(deviation.max()),
        'deviation_mean': float(deviation.mean()),
        'observations': len(obs),
    }
    if figures['inference_p90_s'] > limits.inference_budget:
        raise UpdateRejected(
            f'inference p90 {figures["inference_p90_s"] * 1e3:.2f} ms exceeds the budget '
            f'{limits.inference_budget * 1e3:.2f} ms'
        )
    if figures['deviation_max'] > limits.max_action_deviation:
        raise UpdateRejected(
            f'action deviation max {figures["deviation_max"]:.3f} exceeds '
            f'max_action_deviation {limits.max_action_deviation}'
        )
    if figures['deviation_mean'] > limits.max_mean_action_deviation:
        raise UpdateRejected(
            f'action deviation mean {figures["deviation_mean"]:.3f} exceeds '
            f'max_mean_action_deviation {limits.max_mean_action_deviation}'
        )
    return figures


def validate(update_text, key_path, active, observations, limits=None):
    """Check one /policy/update end to end; return (Update, OnnxPolicy, figures).

    active: the running OnnxPolicy (its bytes are reloaded into a private session, so this can
    run beside the control thread). Raises UpdateRejected naming the first failed check.
    """
    limits = limits or SwapLimits()
    key = read_key(key_path)
    update = parse_update(update_text)
    blob = verified_bytes(update, key)
    try:
        candidate = OnnxPolicy(update.path, blob=blob)
    except PolicyFileError as error:
        raise UpdateRejected(str(error)) from None
    if active is None:
        raise UpdateRejected('no policy is running to compare the candidate with')
    differences = contract_differences(candidate.contract, active.contract)
    if differences:
        raise UpdateRejected('contract differs from the running policy: ' + ', '.join(differences))
    reference = OnnxPolicy(active.contract.path, blob=active.blob, warmup=1)
    return update, candidate, action_check(candidate, reference, observations, limits)


def normal_scheduling():
    """Put the calling thread under SCHED_OTHER (it stays as it is where that is refused)."""
    try:
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except (OSError, AttributeError):
        pass


class SwapMonitor:
    """Decides when a freshly swapped policy goes back to the previous one.

    Within `window` s of a swap: any fault that trips DAMP; or, once the window has passed in
    WALK, a mean tracking reward below the previous policy's by more than `margin`, compared
    command by command: the tracking reward depends on what is commanded (standing tracks
    better than turning), so each tick after the swap is held against the previous policy's
    mean over the last `history` s for the same command (rounded to 0.1 m/s, rad/s). Ticks of
    commands the previous policy did not run in that time are not compared.
    """

    def __init__(self, window=5.0, margin=0.2, history=30.0):
        """window: s after a swap; margin: tracking reward per tick (weighted lin + yaw)."""
        self.window, self.margin, self.history = float(window), float(margin), float(history)
        self.rewards = collections.deque()  # (monotonic s, tracking reward, command key)
        self.swapped_at = None
        self.baseline = None  # command key -> the previous policy's mean tracking reward

    @staticmethod
    def command_key(command):
        """The command (vx, vy, wz) rounded to 0.1, as a hashable key."""
        return tuple(round(float(c), 1) + 0.0 for c in command)

    def record(self, now, reward, command=(0.0, 0.0, 0.0)):
        """Add a WALK tick's tracking reward under its command; keep `history` s of them."""
        self.rewards.append((now, float(reward), self.command_key(command)))
        horizon = max(self.history, 2.0 * self.window)
        while self.rewards and self.rewards[0][0] < now - horizon:
            self.rewards.popleft()

    def swapped(self, now):
        """A new policy became active at now (s): its predecessor's per-command means."""
        groups = collections.defaultdict(list)
        for t, reward, key in self.rewards:
            if t >= now - self.history:
                groups[key].append(reward)
        self.baseline = {key: float(np.mean(v)) for key, v in groups.items()} or None
        self.swapped_at, self.rewards = now, collections.deque()

    def verdict(self, now, faulted):
        """The reason to roll back now, or '' (and the watch ends once the window passed)."""
        if self.swapped_at is None:
            return ''
        if faulted and now - self.swapped_at <= self.window:
            self.swapped_at = None
            return f'fault within {self.window:g} s of the swap'
        if now - self.swapped_at < self.window:
            return ''
        self.swapped_at = None
        pairs = [(r, self.baseline[key]) for _, r, key in self.rewards
                 if self.baseline and key in self.baseline]  # fmt: skip
        if len(pairs) < 10:
            return ''
        mean, before = (float(v) for v in np.mean(pairs, axis=0))
        if mean < before - self.margin:
            return (
                f'tracking reward {mean:.3f} over {self.window:g} s after the swap is below the '
                f"previous policy's {before:.3f} for the same commands by more than {self.margin}"
            )
        return ''


TRACKING_WEIGHTS = {'track_lin_vel_xy': 1.0, 'track_ang_vel_z': 0.5}
"""Weights of the tracking terms in the rollback reward (the task's defaults)."""


class PolicySwitch:
    """Validates updates on a worker thread and swaps policies at tick boundaries.

    The node calls submit() from its /policy/update callback, at_tick() before each control step
    (the only place the controller's policy changes), after_tick() with the step's row, and
    request_rollback() from its ~/rollback service.
    """

    def __init__(self, active, key_path, limits=None, window=5.0, margin=0.2, observations=100):
        """Start the validation worker.

        active: the running OnnxPolicy or None; key_path: the update_key_file ('' refuses every
        update); limits, window, margin: see SwapLimits and SwapMonitor; observations: how many
        recent WALK observations a candidate is checked on.
        """
        if not (math.isfinite(window) and window > 0.0):
            raise ValueError(f'rollback_window {window!r} refused: finite and > 0 needed')
        if not (math.isfinite(margin) and margin >= 0.0):
            raise ValueError(f'rollback_reward_margin {margin!r} refused: finite and >= 0 needed')
        self.key_path, self.limits = key_path, limits or SwapLimits()
        self.monitor = SwapMonitor(window, margin)
        self.recent = collections.deque(maxlen=max(1, int(observations)))  # policy inputs
        self.active_sha = active.contract.file_sha256 if active else None
        self.previous = None  # (policy, version, sha256) or None
        # sha256 -> (version, reason) of every file rolled back in this process: an update may
        # not bring one back (the signature covers the bytes, not the version beside them)
        self.rolled_back = {}
        self._notes = []  # (level, text) from the rollback record's writer: at_tick's events
        self._records = queue.SimpleQueue()  # rollbacks to record: put() never blocks a tick
        self._recorder = threading.Thread(
            target=self._record_rollbacks, name='rollback_record', daemon=True
        )
        self._recorder.start()
        self.counts = {'accepted': 0, 'rejected': 0, 'rollbacks': 0}
        self.last_rejection = None  # {version, reason}
        self.generation = 0  # counts every acceptance, rejection and rollback (status changes)
        self.timing = {}  # ms of the last accepted update: validation, receipt -> active tick
        self._staged = None  # (Update, OnnxPolicy, figures) validated, not yet active
        self._rollback = ''  # reason of a requested rollback, done at the next tick
        self._lock = threading.Lock()
        self._queue = queue.Queue(maxsize=4)
        self._active = active  # the running OnnxPolicy, read by the worker
        self._worker = threading.Thread(target=self._work, name='policy_update', daemon=True)
        self._worker.start()

    def submit(self, text):
        """Queue one /policy/update message for validation (never blocks the caller)."""
        try:
            self._queue.put_nowait((text, time.monotonic()))
        except queue.Full:
            self._reject(None, 'validation queue full: update dropped')

    def _reject(self, version, reason):
        """Count and remember a rejection (the reason cut to MAX_REASON characters)."""
        if len(reason) > MAX_REASON:
            reason = reason[: MAX_REASON - 3] + '...'
        with self._lock:
            self.counts['rejected'] += 1
            self.generation += 1
            self.last_rejection = {'version': version, 'reason': reason}

    def _work(self):
        """Worker thread: validate each queued update; stage the accepted one."""
        normal_scheduling()  # a thread inherits SCHED_FIFO from the control thread that made it
        while True:
            item = self._queue.get()
            if item is None:
                return
            text, received = item
            started = time.monotonic()
            version = announced_version(text)
            reference = self._active  # the policy the candidate is compared with
            try:
                staged = validate(text, self.key_path, reference, list(self.recent), self.limits)
            except UpdateRejected as error:
                self._reject(version, str(error))
                continue
            except Exception as error:  # a validator bug must not take the node down
                self._reject(version, f'validation failed: {error!r}')
                continue
            try:
                refused = self.refusal(staged[0])
            except Exception as error:  # e.g. a record that cannot be parsed: refuse, go on
                refused = f'rollback record check failed: {error!r}'
            if refused:
                self._reject(version, refused)
                continue
            with self._lock:
                self.timing['validation_ms'] = round(1e3 * (time.monotonic() - started), 2)
                superseded, self._staged = self._staged, (*staged, received, reference)
            if superseded is not None:  # never active: counted, not lost silently
                self._reject(
                    superseded[0].version,
                    f'superseded by version {staged[0].version} before it became active',
                )

    def refusal(self, update, record=True):
        """Why a validated update's file may not become active, else ''.

        A rolled-back file is refused: a replayed announcement of it would undo the rollback.
        record: also read the rollback record beside the file (rollbacks before a restart;
        file I/O, so not on the control thread).
        """
        sha = update.sha256.lower()
        with self._lock:
            rolled = self.rolled_back.get(sha)
        when = ''
        if rolled is None and record:
            try:
                entry = rollback_log.find(update.path, sha)
            except OSError as error:
                return f'rollback record {rollback_log.log_path(update.path)} unreadable: {error}'
            if entry is not None:
                rolled = (entry.get('version'), str(entry.get('reason', ''))[: MAX_REASON // 2])
                when = f' at {entry.get("time")}, listed in {rollback_log.LOG_NAME}'
        if rolled is not None:
            version, reason = rolled
            return (
                f'file sha256 {sha[:16]}... was rolled back as version {version}{when} '
                f'({reason}); a rolled-back file does not come back by an update: export a new one'
            )
        return ''

    def close(self):
        """Stop the worker threads (a rollback still being recorded gets 5 s)."""
        self._queue.put(None)
        self._records.put(None)
        self._worker.join(timeout=5.0)
        self._recorder.join(timeout=5.0)

    def request_rollback(self):
        """Ask for the previous policy at the next tick; (accepted, message)."""
        with self._lock:
            if self.previous is None:
                return False, 'rollback refused: no previous policy'
            self._rollback = 'rollback requested'
            return True, f'rolling back to version {self.previous[1]} at the next tick'

    def at_tick(self, controller, now):
        """Before a control step: apply a staged swap or rollback; return log events."""
        self._active = controller.policy
        with self._lock:
            staged, self._staged = self._staged, None
            rollback, self._rollback = self._rollback, ''
            events, self._notes = self._notes, []
        if staged is not None and (rollback or staged[4] is not controller.policy):
            why = (
                'dropped: a rollback was requested at the same tick'
                if rollback
                else 'checked against a policy that is no longer running; announce it again'
            )
            self._reject(staged[0].version, why)
            events.append(('warning', f'policy update {staged[0].version} {why}'))
            staged = None
        if staged is not None and not rollback:
            why = self.refusal(staged[0], record=False)  # a rollback after its validation
            if why:
                self._reject(staged[0].version, why)
                events.append(('warning', f'policy update {staged[0].version} refused: {why}'))
                staged = None
        if rollback and self.previous is not None:
            events.append(self._roll_back(controller, rollback))
        elif staged is not None:
            update, candidate, figures, received, _ = staged
            self.timing['update_to_active_ms'] = round(1e3 * (time.monotonic() - received), 2)
            self.previous = (controller.policy, controller.policy_version, self.active_sha)
            controller.swap_policy(candidate, update.version)
            self.monitor.swapped(now)
            with self._lock:
                self.active_sha, self._active = update.sha256.lower(), candidate
                self.counts['accepted'] += 1
                self.generation += 1
            events.append(
                ('info', f'policy update {update.version} active (parent {update.parent_version}, '
                 f'deviation max {figures["deviation_max"]:.3f}, mean '
                 f'{figures["deviation_mean"]:.3f})')
            )  # fmt: skip
        return events

    def _roll_back(self, controller, reason):
        """Make the previous policy active again; the log event."""
        policy, version, sha = self.previous
        self.previous = None
        gone = (self.active_sha, controller.policy_version)  # the file rolled back
        path = getattr(getattr(controller.policy, 'contract', None), 'path', None)
        controller.swap_policy(policy, version)
        self.monitor.swapped_at = None
        self.monitor.rewards.clear()  # the rolled-back candidate's ticks are no one's baseline
        with self._lock:
            self.active_sha, self._active = sha, policy
            if gone[0] is not None:
                self.rolled_back[gone[0]] = (gone[1], reason[: MAX_REASON // 2])
            self.counts['rollbacks'] += 1
            self.generation += 1
        if gone[0] is not None and path:  # recorded by the writer thread, off this one
            self._records.put((path, gone[0], gone[1], reason[: MAX_REASON // 2]))
        return ('warning', f'rolled back to policy version {version}: {reason}')

    def _record_rollbacks(self):
        """Writer thread: append each rollback to the record beside its file; at_tick logs it."""
        normal_scheduling()
        while True:
            item = self._records.get()
            if item is None:
                return
            path, sha, version, reason = item
            try:
                where = rollback_log.record(path, sha, version, reason)
                note = ('info', f'rollback of version {version} recorded in {where}')
            except Exception as error:  # OSError mostly; the writer must outlive any of them
                note = (
                    'warning',
                    f'rollback of version {version} may not be recorded beside {path} '
                    f'({error!r}): after a restart of this node an announcement of that file '
                    'could be accepted again',
                )
            with self._lock:
                self._notes.append(note)

    def after_tick(self, controller, row, faulted, now):
        """After a control step: record WALK observations and rewards; automatic rollback."""
        if row is not None and row.mode == 'WALK':
            if controller.policy_obs is not None:  # what the policy took (48 or 50 terms)
                self.recent.append(np.array(controller.policy_obs, dtype=np.float64))
            terms = dict(zip(REWARD_TERMS, row.reward_terms))
            reward = sum(w * terms[k] for k, w in TRACKING_WEIGHTS.items())
            self.monitor.record(now, reward, controller.command)
        reason = self.monitor.verdict(now, faulted)
        if reason and self.previous is not None:
            return [self._roll_back(controller, reason)]
        return []

    def status(self):
        """The update fields of /policy/status."""
        with self._lock:
            return {
                'previous_sha256': self.previous[2] if self.previous else None,
                'updates': {**self.counts, 'last_rejection': self.last_rejection, **self.timing},
            }
