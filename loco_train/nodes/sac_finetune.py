"""sac_finetune: online SAC fine-tuning from /replay/transitions, new policies on /policy/update.

Subscribes /replay/transitions (reliable; loco_policy.transition rows), rebuilds transitions
(loco_train.finetune.ingest), keeps them in a crash-safe store (loco_train.finetune.store) and
learns from them with SAC (loco_train.finetune.learner) on a worker thread, so the robot never
waits for it. Every export_every updates (or export_every_s seconds) it writes a candidate ONNX
into policy_dir, checkpoints, and announces it on /policy/update signed with the key of
update_key_file. /diagnostics (DiagnosticStatus 'sac_finetune') once per diagnostics_period.

The only node that imports both rclpy and torch: it may run on the robot PC (cpu_affinity away
from policy_node's core) or on any machine of the DDS network (device: cpu, cuda).
"""

import hashlib
import json
import os
import queue
import re
import sys
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Float32MultiArray, String

import loco_policy
from loco_policy.control import hot_swap
from loco_policy.control.realtime import set_cpu_affinity
from loco_policy.nodes import any_type, run_node, steady_clock

SHIPPED_POLICY = os.path.join(
    os.path.dirname(loco_policy.__file__), 'policies', 'anymal_c_walk.onnx'
)

LEARNER_PARAMETERS = (
    'utd_ratio', 'actor_update_interval', 'actor_lr', 'critic_lr', 'alpha_lr', 'init_alpha',
    'batch_size', 'n_step', 'gamma', 'warmup_updates', 'checkpoint_warmup_updates',
    'prior_share', 'prior_decay_updates', 'sim_share', 'learning_starts', 'replay_capacity',
    'guard_rows', 'guard_margin', 'anchor', 'actor_trainable',
)  # fmt: skip
"""FinetuneConfig fields exposed as parameters of the same name."""


CANDIDATE_PREFIX = 'sac_finetune_v'
"""Candidate files are CANDIDATE_PREFIX + the version in 5 digits + .onnx (.gated.onnx when the
nominal gate refused them)."""


class SacFinetune(Node):
    """Thin node: topics, timers and parameters around the ROS-free learner and store."""

    def __init__(self):
        """Declare parameters, warm-start (or resume from the store), start the learner."""
        super().__init__('sac_finetune')
        import torch

        from loco_train.finetune import learner, reward
        from loco_train.finetune.ingest import TransitionAssembler
        from loco_train.finetune.regression import RegressionGuard
        from loco_train.finetune.store import TransitionStore

        defaults = learner.FinetuneConfig()
        for name in LEARNER_PARAMETERS:
            self.declare_parameter(name, getattr(defaults, name), any_type())
        declare = self.declare_parameter
        declare('device', 'cpu')  # torch device of the learner: cpu, cuda, cuda:1
        declare('torch_threads', 1)  # torch CPU threads (0: torch's default)
        declare('cpu_affinity', '', any_type())  # CPU ids, e.g. '1' ('' = unchanged)
        declare('warm_start', SHIPPED_POLICY)  # policy .onnx, or a loco-train sac checkpoint.pt
        declare('prior_replay', '')  # replay.pt of the checkpoint's simulation run ('' none)
        declare('store', 'finetune_store')  # directory of the crash-safe transition store
        declare('policy_dir', 'finetune_policies')  # candidate ONNX files are written here
        declare('update_key_file', '')  # HMAC key file shared with policy_node
        declare('export_every', 2000, any_type())  # updates between candidates
        declare('export_every_s', 0.0, any_type())  # s between candidates (0: by updates only)
        declare('checkpoint_every_s', 30.0, any_type())  # s between learner checkpoints
        declare('follow_robot', True)  # after a refused candidate, learn on from the running one
        declare('gate_seeds', 0)  # nominal MuJoCo episodes a candidate must walk (0: no gate)
        declare('gate_margin', 0.25, any_type())  # tracking error above the reference's allowed
        declare('gate_reference', '')  # the policy file compared against ('' = the warm start)
        declare('gate_sensor_noise', True)  # noise on the gate's velocities (false: as sim_robot)
        declare('gate_phase_jitter', 0.0, any_type())  # s: gate seeds' shift of command changes
        # co-training (sim_share above: its share of each batch): an unperturbed MuJoCo robot
        # in this process walks the robot's commands on the robot's policy, tick for tick
        declare('sim_exploration', 0.1, any_type())  # its behaviour noise std (action units)
        declare('sim_sensor_noise', True)  # noise on its measured velocities (false: exact)
        declare('diagnostics_period', 1.0, any_type())  # s
        declare('queue_depth', 500)  # /replay/transitions messages buffered (10 s at 50 Hz)
        declare('reorder_window', 20)  # rows a message may arrive out of order
        declare('max_updates_per_s', 0.0, any_type())  # 0: as fast as owed
        # the task reward weights the warm-start policy was trained with (RewardConfig names)
        declare('reward_overrides', [''])
        value = self.get_parameter
        affinity = str(value('cpu_affinity').value)  # -p cpu_affinity:=1 arrives as 1
        if affinity:
            set_cpu_affinity(affinity)
        threads = int(value('torch_threads').value)
        if threads > 0:
            torch.set_num_threads(threads)
        config = learner.FinetuneConfig(
            **{n: type(getattr(defaults, n))(value(n).value) for n in LEARNER_PARAMETERS}
        )
        if config.sim_share > 0.0:  # the walker's controller refuses it later, in the learner
            from loco_policy.control.controller import ControllerConfig

            try:
                ControllerConfig(exploration_std=float(value('sim_exploration').value))
            except ValueError as error:
                raise ValueError(f'sim_exploration: {error}') from None
        overrides = [o for o in value('reward_overrides').value if o]
        self.weights = reward.weights_from_overrides(overrides)
        self.policy_dir = os.path.abspath(value('policy_dir').value)
        os.makedirs(self.policy_dir, exist_ok=True)
        self.key_path = value('update_key_file').value
        self.key = None
        try:
            self.key = hot_swap.read_key(self.key_path)
        except hot_swap.UpdateRejected as error:
            self.get_logger().warning(f'{error}; candidates are written but not announced')
        self.export_every = int(value('export_every').value)
        self.export_every_s = float(value('export_every_s').value)
        self.checkpoint_every_s = float(value('checkpoint_every_s').value)
        self.max_rate = float(value('max_updates_per_s').value)

        start = value('warm_start').value or SHIPPED_POLICY
        self.gate_seeds = int(value('gate_seeds').value)
        self.gate_margin = float(value('gate_margin').value)
        self.gate_sensor_noise = bool(value('gate_sensor_noise').value)
        self.gate_phase_jitter = float(value('gate_phase_jitter').value)
        self.gate_reference = value('gate_reference').value or (
            start if str(start).endswith('.onnx') else ''
        )
        for name, needs in (('gate_seeds', self.gate_seeds > 0), ('sim_share', config.sim_share)):
            if needs and not self.gate_reference:
                raise ValueError(
                    f'{name} {value(name).value} with a checkpoint warm start needs '
                    'gate_reference: the policy file the robot ran before fine-tuning'
                )
        if (self.gate_seeds > 0 or config.sim_share) and not os.path.isfile(self.gate_reference):
            raise ValueError(f'gate_reference {self.gate_reference}: no such file')
        if self.gate_seeds > 0:
            from loco_train.experiments.evaluate import EvalConfig

            try:
                EvalConfig(phase_jitter=self.gate_phase_jitter)
            except ValueError as error:
                raise ValueError(f'gate_phase_jitter: {error}') from None
        self.gate, self.gated, self.last_gate = None, 0, ''
        self._gate_closed = ''  # why the gate could not open (then every candidate is held back)
        device = value('device').value
        if str(start).endswith('.onnx'):
            self.tuner = learner.FineTuner.from_onnx(start, config, device)
        else:
            prior = value('prior_replay').value or None
            self.tuner = learner.FineTuner.from_checkpoint(start, config, device, prior)
        self.store = TransitionStore(value('store').value)
        # the replay keeps the newest rows only: read no more of a long store than that
        stored, checkpoint = self.store.load(last=self.tuner.robot.capacity)
        resumed = 'warm start'
        if checkpoint is not None:
            self.tuner.load_bytes(checkpoint)
            resumed = f'resumed at update {self.tuner.updates}, version {self.tuner.version}'
        elif self.store.checkpoint_error:
            self.get_logger().error(f'{self.store.checkpoint_error}; learning starts afresh')
        # never overwrite a candidate of an earlier run, whatever the checkpoint says
        self.tuner.version_floor = highest_version(self.policy_dir)
        self.tuner.refill(stored)
        # policy_node names a file it was started with by its sha256's first 8 hex digits
        self._start_ids = {}
        # with a checkpoint warm start the robot starts on gate_reference, its exported policy
        uses_reference = self.gate_seeds > 0 or config.sim_share > 0
        started = (start, self.gate_reference) if uses_reference else (start,)
        for path in {p for p in started if str(p).endswith('.onnx')}:
            with open(path, 'rb') as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()
            self._start_ids[int(digest[:8], 16)] = int(self.tuner.parent.get('version', 0))
        # the version a refused candidate goes back to when the robot's status is unknown
        self._last_passed = int(self.tuner.parent.get('version', 0))
        self.assembler = TransitionAssembler(
            self.weights, window=int(value('reorder_window').value)
        )
        self.walker = None  # co-training's unperturbed robot (sim_share), made by the learner
        self._walker_args = (
            float(value('sim_exploration').value),
            bool(value('sim_sensor_noise').value),
        )
        self.sim_assembler = TransitionAssembler(self.weights)
        self._sim_pending, self._sim_version, self.sim_rows = [], None, 0
        self.sim_error, self.sim_note = '', ''  # why co-training stopped; a version not walked
        # the on-robot regression guard; its reference is the policy the robot runs first
        self.guard = None
        if config.guard_rows > 0:
            self.guard = RegressionGuard(config.guard_rows, config.guard_margin)
        self._guard_version, self._judged, self.guard_note = None, self.guard is None, ''
        self.get_logger().info(
            f'sac_finetune: {resumed} from {start} on {device}; {len(stored["seq"])} of '
            f'{self.store.rows_stored} stored transitions replayed from {self.store.path}; '
            f'policies to {self.policy_dir}'
            + (f'; reward terms the robot cannot measure, left out: {self.weights.ignored}'
               if self.weights.ignored else '')
        )  # fmt: skip

        self._inbox, self._inbox_lock = [], threading.Lock()
        self._stop = threading.Event()
        self.last_export = {}
        self.rate = 0.0  # updates/s over the last diagnostics period
        self._rate_mark = (time.monotonic(), self.tuner.updates)
        self._exported_at = (time.monotonic(), self.tuner.updates)
        self._checkpointed = time.monotonic()
        reliable = QoSProfile(
            depth=int(value('queue_depth').value), reliability=ReliabilityPolicy.RELIABLE
        )
        self.create_subscription(
            Float32MultiArray, '/replay/transitions', self.on_transitions, reliable
        )
        self.follow_robot = bool(value('follow_robot').value)
        self._robot_refusals, self._follow = None, None  # rejections + rollbacks seen; version
        self._follow_lock = threading.Lock()  # _follow: set by callbacks and exporter, taken once
        self._running = None  # the version policy_node runs, from /policy/status
        self.follow_note = ''
        self.create_subscription(
            String,
            '/policy/status',
            self.on_policy_status,
            QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL),
        )
        self.update_pub = self.create_publisher(
            String,
            '/policy/update',
            QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL),
        )
        self.diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        period = float(value('diagnostics_period').value)
        self.create_timer(period, self.on_timer, clock=steady_clock())
        # rows wait at most flush_interval for the disk, however long the diagnostics period
        self.create_timer(self.store.flush_interval, self.store.flush, clock=steady_clock())
        self._exports, self._writing, self.export_error = queue.Queue(maxsize=1), False, ''
        self._torch_lock, self.learner_error = threading.Lock(), ''
        self._worker = threading.Thread(target=self._learn, name='sac_finetune', daemon=True)
        self._exporter = threading.Thread(target=self._export_loop, name='export', daemon=True)
        self._worker.start()
        self._exporter.start()

    # -- robot data (executor thread) -----------------------------------------------------------

    def on_transitions(self, msg):
        """Validate and pair one batch of rows; store and queue the finished transitions."""
        dims = [(d.label, d.size, d.stride) for d in msg.layout.dim]
        self.assembler.feed(dims, msg.data, msg.layout.data_offset)
        done = self.assembler.drain()
        if len(done['seq']):
            self.store.append(done)
            if self.learner_error:  # the learner thread has stopped: the store keeps the rows
                return
            with self._inbox_lock:
                self._inbox.append(done)

    def on_policy_status(self, msg):
        """policy_node refused (rejected, rolled back) a candidate: follow its running policy."""
        try:
            status = json.loads(msg.data)
            updates = status.get('updates') or {}
            refusals = int(updates.get('rejected', 0)) + int(updates.get('rollbacks', 0))
            running = status.get('policy_version')
            running = None if running is None else int(running)
            running = self._start_ids.get(running, running)  # the file it started with: v0
        except (ValueError, TypeError, AttributeError):
            return  # policy_node's own status; nothing to learn from a malformed one
        self._running = running
        seen, self._robot_refusals = self._robot_refusals, refusals
        if self.follow_robot and seen is not None and refusals > seen and running is not None:
            self._request_follow(running)  # applied by the learner thread at its next step

    def on_timer(self):
        """Publish /diagnostics (the store flushes on its own timer)."""
        now = time.monotonic()
        mark_t, mark_u = self._rate_mark
        if now > mark_t:
            self.rate = (self.tuner.updates - mark_u) / (now - mark_t)
        self._rate_mark = (now, self.tuner.updates)
        self.diag_pub.publish(self.diagnostics())

    def diagnostics(self):
        """The DiagnosticArray of the learner, the stream and the store."""
        counts, store = self.assembler.stats(), self.store.stats()
        values = {
            'transitions_received': counts['transitions_received'],
            'sequence_gaps': counts['sequence_gaps'],
            'duplicates': counts['duplicates'],
            'malformed': counts['malformed'],
            'late': counts['late'],
            'restarts': counts['restarts'],
            'transitions_learned': self.tuner.robot_transitions,
            'replay_size': len(self.tuner.robot),
            'updates': self.tuner.updates,
            'updates_per_s': round(self.rate, 2),
            'actor_frozen': self.tuner.actor_frozen,
            'actor_follows': self.tuner.follows,
            'anchor_distance': round(self.tuner.anchor_distance(), 6),
            'last_follow': self.follow_note,
            'gated': self.gated,
            'last_gate': self.last_gate,
            'guard_resets': self.guard.resets if self.guard else 0,
            'guard_best': ''
            if not self.guard or not self.guard.last
            else json.dumps(
                {
                    'version': self.guard.last.best_version,
                    'change': round(self.guard.last.best_change, 4),
                }
            ),
            'last_guard': self.guard_note,
            'prior_share': round(self.tuner.prior_share(), 4),
            'sim_rows': self.sim_rows,  # co-training's transitions of the unperturbed robot
            'sim_falls': self.walker.falls if self.walker is not None else 0,
            'sim_version': self._sim_version,
            'sim_share': self.tuner.sim_share(),
            'sim_error': self.sim_error,  # why co-training stopped ('' while it runs)
            'sim_note': self.sim_note,  # a version the walker could not load
            'policy_version': self.tuner.version,
            'last_export': json.dumps(self.last_export),
            'store_healthy': store['healthy'],
            'store_rows': store['rows_stored'],
            'store_pending': store['pending_rows'],
            'store_error': store['last_error'],
            'store_dropped': store['dropped'],
            'checkpoint_error': store['checkpoint_error'],
            'last_malformed': self.assembler.last_error,
            'export_error': self.export_error,
            'learner_error': self.learner_error,
        }
        status = DiagnosticStatus(name='sac_finetune', hardware_id='learner')
        if self.learner_error:
            status.level = DiagnosticStatus.ERROR
            status.message = f'learner stopped: {self.learner_error}'
        elif not store['healthy']:
            status.level = DiagnosticStatus.WARN
            status.message = f'store not writable, learning in memory: {store["last_error"]}'
        elif store['checkpoint_error'] or store['dropped']:
            status.level = DiagnosticStatus.WARN
            status.message = store['checkpoint_error'] or (
                f'{store["dropped"]} transitions dropped while the store could not write'
            )
        elif self.export_error:
            status.level = DiagnosticStatus.WARN
            status.message = f'candidate not written: {self.export_error}'
        else:
            status.level = DiagnosticStatus.OK
            status.message = 'learning' if self.tuner.updates else 'collecting'
        status.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status = [status]
        return array

    # -- learning (worker thread) ---------------------------------------------------------------

    def _learn(self):
        """Worker thread: learn until stopped; a crash is reported on /diagnostics, not lost."""
        try:
            self._learn_loop()
        except Exception as error:  # the node keeps streaming and storing; say why it stopped
            self.learner_error = f'{type(error).__name__}: {error}'
            self.get_logger().error(f'learner stopped: {self.learner_error}')
            raise

    def _learn_loop(self):
        """Take queued transitions, run the owed updates, export and checkpoint on schedule."""
        with self._torch_lock:  # trace the candidates' graph once, before data arrives
            self.tuner.prepare_export()
        while not self._stop.is_set():
            with self._inbox_lock:
                inbox, self._inbox = self._inbox, []
            for transitions in inbox:
                self.tuner.add(transitions)
                self._guard(transitions)
                if self.tuner.cfg.sim_share:
                    self._co_train(transitions)
            with self._torch_lock:  # torch.onnx's tracer is not thread-safe beside autograd
                with self._follow_lock:
                    follow, self._follow = self._follow, None
                if follow is not None:
                    version, which = follow
                    followed = self.tuner.follow(version, self._version_path(version))
                    self.follow_note = (
                        f'actor reset to {which} version {version}'
                        if followed
                        else f'{which} version {version} not found; actor not reset'
                    )
                    self.get_logger().info(self.follow_note)
                    if which == 'best' and followed:  # the guard's restore goes out at once
                        self._exported_at = (float('-inf'), float('-inf'))
                    elif followed:  # the next candidate learns export_every updates from here:
                        # one due while a gate ran would be the running policy again, passing
                        # any gate at margin 0 and taking a version without a change
                        self._exported_at = (time.monotonic(), self.tuner.updates)
                self._maybe_export()  # before updating: a reset actor goes out as it is
                ran = self.tuner.update(limit=50)
                if time.monotonic() - self._checkpointed > self.checkpoint_every_s:
                    self._checkpoint()
            if self.max_rate > 0 and ran:
                self._stop.wait(ran / self.max_rate)
            if not ran:
                self._stop.wait(0.01)

    def _co_train(self, transitions):
        """Learner thread: co-training, stopped with the reason on /diagnostics if it fails."""
        try:
            self._walk_sim(transitions)
        except Exception as error:  # MuJoCo, onnxruntime, a policy file: learning goes on
            self.sim_error = f'{type(error).__name__}: {error}'
            self.tuner.cfg.sim_share = 0.0  # no batch from a replay that stopped growing
            self.get_logger().error(f'co-training stopped: {self.sim_error}')

    def _walk_sim(self, transitions):
        """One tick of the unperturbed robot per robot transition, on its command and policy.

        The policy is the one that chose the batch's last row (its transition's version); the
        walker's transitions go to the co-training replay, sim_share of every batch.
        """
        from loco_policy.policy_file import OnnxPolicy
        from loco_policy.transition import pack_rows
        from loco_train.experiments.evaluate import NO_NOISE
        from loco_train.finetune.regression import tracking_errors
        from loco_train.finetune.walker import Walker

        if not len(transitions['seq']):
            return
        version = int(transitions['policy_version'][-1])
        version = self._start_ids.get(version, version)  # the file it started with: v0
        if self.walker is None or version != self._sim_version:
            parent = self.tuner.parent
            started = version == int(parent.get('version', 0))
            onnx_start = str(parent.get('path', '')).endswith('.onnx')
            path = self.gate_reference if started and not onnx_start else None
            path = path or self._version_path(version)
            if os.path.isfile(path):
                policy = OnnxPolicy(path)
                if self.walker is None:
                    exploration, noise = self._walker_args
                    self.walker = Walker(policy, {} if noise else NO_NOISE, exploration, 0)
                else:
                    self.walker.ctrl.swap_policy(policy, version)
                self._sim_version, self.sim_note = version, ''
            elif not self.sim_note.startswith(f'version {version}:'):
                self.sim_note = f'version {version}: no policy file {path}'
                self.get_logger().warning(f'co-training: {self.sim_note}')
        if self.walker is None:
            return
        commands, _ = tracking_errors(transitions['obs'])  # (K, 3) m/s, rad/s
        for command in commands:
            if self._stop.is_set():
                return
            self._sim_pending.extend(self.walker.step(command))
        if len(self._sim_pending) >= 10:
            self.sim_assembler.feed(*pack_rows(self._sim_pending), 0)
            self._sim_pending = []
            self.sim_rows += self.tuner.add_sim(self.sim_assembler.drain())

    def _maybe_export(self):
        """When a candidate is due and none is being written: snapshot, checkpoint, queue it."""
        at, updates = self._exported_at
        due = self.tuner.updates - updates >= self.export_every > 0
        due |= 0 < self.export_every_s <= time.monotonic() - at and self.tuner.updates > updates
        if not due or self.tuner.actor_frozen or not self._exports.empty() or self._writing:
            return
        if self._follow is not None:  # a refusal came in since this step began: reset first
            return
        if not self._judged:  # the guard has not judged the running version yet
            return
        snapshot = self.tuner.snapshot()
        self._exported_at = (time.monotonic(), self.tuner.updates)
        if not self._checkpoint():  # the version counter is on disk before anyone hears of it
            self.export_error = f'version {snapshot[0]} held back: checkpoint not on disk'
            return
        self._exports.put(snapshot)

    def _guard(self, transitions):
        """Score robot transitions by version; go back to the best version after a regression."""
        if self.guard is None or not len(transitions['seq']):
            return
        versions = [self._start_ids.get(int(v), int(v)) for v in transitions['policy_version']]
        self.guard.add(versions, transitions['next_obs'], transitions['terminated'])
        running = versions[-1]
        if running != self._guard_version:  # a new policy on the robot: judge it first
            self._guard_version, self._judged = running, False
        if self._judged:
            return
        verdict = self.guard.judge(running)
        if verdict is None:
            if self.guard.settled(running):  # no verdict will come: stop holding candidates
                self._judged = True
                self.guard_note = f'version {running} not judged: too few comparable rows'
            return
        self._judged = True
        if verdict.regressed:
            self.guard_note = f'version {running} regressed ({verdict.reason})'
            self.get_logger().warning(f'regression guard: {self.guard_note}')
            self._request_follow(verdict.best_version, 'best')  # the learner thread resets it

    def _version_path(self, version):
        """The policy file of an exported version (the warm start's for its own version)."""
        parent = self.tuner.parent
        if version == int(parent.get('version', 0)) and str(parent.get('path')).endswith('.onnx'):
            return parent['path']
        return self._candidate_path(version)

    def _candidate_path(self, version):
        """Where an exported version's policy file is written in policy_dir."""
        return os.path.join(self.policy_dir, f'{CANDIDATE_PREFIX}{version:05d}.onnx')

    def _request_follow(self, version, which='running'):
        """Ask the learner thread to reset its actor to `version` at its next step."""
        with self._follow_lock:
            self._follow = (version, which)

    def _open_gate(self):
        """Exporter thread, first: score the gate's reference (a few seconds of MuJoCo)."""
        from loco_train.finetune.gate import NominalGate

        try:
            self.gate = NominalGate(
                self.gate_seeds, self.gate_margin, self.gate_reference, stop=self._stop.is_set,
                sensor_noise=self.gate_sensor_noise, phase_jitter=self.gate_phase_jitter,
            )  # fmt: skip
        except Exception as error:  # any failure (MuJoCo, onnxruntime, a file) closes the gate
            self._gate_closed = f'gate closed: {type(error).__name__}: {error}'
            self.last_gate = self._gate_closed  # every candidate is held back
            self.get_logger().error(f'nominal gate: {self.last_gate}')
            return
        self.last_gate = f'reference error {self.gate.reference:.3f}'
        self.get_logger().info(
            f'nominal gate: {self.gate_seeds} episodes, reference {self.gate_reference} '
            f'tracking error {self.gate.reference:.3f}, margin {self.gate_margin:.0%}'
        )

    def _export_loop(self):
        """Exporter thread: write each queued candidate (the first one is traced), announce it."""
        if self.gate_seeds > 0:
            self._open_gate()
        while not self._stop.is_set():
            try:
                snapshot = self._exports.get(timeout=0.1)
            except queue.Empty:
                continue
            self._writing = True
            try:
                self._write_and_announce(snapshot)
            except Exception as error:  # reported, and the next candidate is tried
                self.export_error = f'version {snapshot[0]}: {type(error).__name__}: {error}'
                self.get_logger().error(f'candidate not exported, {self.export_error}')
            finally:
                self._writing = False

    def _write_and_announce(self, snapshot):
        """Write one candidate into policy_dir and publish its signed /policy/update."""
        version, parent, _, extra = snapshot
        path = self._candidate_path(version)
        start = time.monotonic()
        try:
            with self._torch_lock:  # learning waits while the exporter traces or checks
                self.tuner.write_candidate(snapshot, path)
            with open(path, 'rb') as handle:
                blob = handle.read()
        except OSError as error:  # full or unwritable policy_dir: say so, keep learning
            self.export_error = f'version {version}: {error}'
            self.get_logger().error(f'candidate not written, {self.export_error}')
            return
        self.export_error = ''
        self.last_export = {
            'version': version,
            'path': path,
            'updates': extra['updates'],
            'robot_transitions': extra['robot_transitions'],
            'seconds': round(time.monotonic() - start, 3),
            'announced': False,  # set once /policy/update is published
        }
        if self.gate_seeds > 0 and not self._passes_gate(version, path):
            return
        if self.key is None:
            return
        update = {
            'path': path,
            'sha256': hashlib.sha256(blob).hexdigest(),
            'version': version,
            'parent_version': parent,
            'signature': hot_swap.sign(blob, self.key),
        }
        try:
            self.update_pub.publish(String(data=json.dumps(update)))
        except Exception:  # rclpy's RCLError: Ctrl-C shut the context down during the export
            if self.context.ok():
                raise
            self.last_export['announced'] = False
            return
        self.last_export['announced'] = True
        self._last_passed = version
        self.get_logger().info(f'announced policy version {version} ({path})')

    def _passes_gate(self, version, path):
        """Run the nominal gate; a refused candidate is renamed *.gated.onnx, never announced."""
        from loco_train.finetune.gate import GateRefused

        if self.gate is None:
            reason = self._gate_closed or 'gate not open'
        else:
            try:
                error = self.gate.check(path)
                self.last_export['gate_error'] = round(error, 4)
                return True
            except GateRefused as refused:
                reason = str(refused)
            except Exception as error:  # a candidate the gate cannot run is not announced either
                reason = f'gate failed: {type(error).__name__}: {error}'
        self.gated += 1
        self.last_gate = f'version {version}: {reason}'
        gated = path[: -len('.onnx')] + '.gated.onnx'
        os.replace(path, gated)
        self.last_export.update(path=gated, announced=False, gated=reason)
        self.get_logger().warning(f'candidate {self.last_gate}; not announced')
        if self.follow_robot:  # learn on from what the robot runs (before any status: the last
            # candidate announced, else the warm start)
            self._request_follow(self._running if self._running is not None else self._last_passed)
        return False

    def _checkpoint(self):
        """Save the learner's state into the store's checkpoint slot; True when on disk."""
        self._checkpointed = time.monotonic()
        return self.store.save_checkpoint(self.tuner.to_bytes())

    def close(self):
        """Stop the learner, checkpoint, close the store (everything received is flushed)."""
        self._stop.set()
        self._worker.join(timeout=1.5)  # all of close() within loco-launch's 5 s before SIGTERM
        self._exporter.join(timeout=1.0)  # a candidate being written may be cut off (skipped)
        try:
            self.assembler.finish()
            rest = self.assembler.drain()
            if len(rest['seq']):
                self.store.append(rest)
            if self._torch_lock.acquire(timeout=1.0):  # never beside a live trace or update
                try:
                    self._checkpoint()
                finally:
                    self._torch_lock.release()
        finally:
            self.store.close()


def highest_version(policy_dir):
    """The highest version of a candidate file in policy_dir (gated ones too); 0 if none."""
    found = [
        re.fullmatch(re.escape(CANDIDATE_PREFIX) + r'(\d+)(\.gated)?\.onnx', name)
        for name in os.listdir(policy_dir)
    ]
    return max((int(m.group(1)) for m in found if m), default=0)


def main(args=None):
    """Run sac_finetune until Ctrl-C or SIGTERM; exit 2 naming a refused warm start."""
    from loco_train.finetune.learner import WarmStartError

    return run_node(
        'sac_finetune',
        SacFinetune,
        refused=(WarmStartError, ValueError, FileNotFoundError),
        on_exit=lambda node: node.close(),
        args=args,
    )


if __name__ == '__main__':
    sys.exit(main())
