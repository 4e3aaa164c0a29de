"""The policy node's control logic (ROS-free): inputs -> safety state machine -> joint command.

The node feeds validated messages in (``on_*``), forwards service requests (``request``) and
calls ``step`` every control period; ``step`` returns the joint command to publish, the transition
row of the tick and the log events. Whatever happens, the returned command is finite.
"""

from dataclasses import dataclass, field
import time

import numpy as np

from loco_policy import spec
from loco_policy.control import joint_command, robot_io
from loco_policy.control.safety import Mode, SafetyStateMachine, Watchdog
from loco_policy.observation import SingleObservation
from loco_policy.transition import reward_terms, TransitionRow


@dataclass
class ControllerConfig:
    """Tunables of the control loop; ROS parameters of the same names override them."""

    control_dt: float = spec.CONTROL_DT
    """Control period (s)."""
    stale_periods: float = 3.0
    """Watchdog limit in control periods: an input older than this is a fault."""
    stand_duration: float = 2.0
    """Time (s) to interpolate from the measured pose to the default pose in STAND."""
    damping_kd: float = float(spec.KD.max())
    """Joint damping (N m s/rad) in PASSIVE and DAMP (kp is 0 there)."""
    max_roll: float = 0.8
    """Largest |roll| (rad) in STAND and WALK before a fault."""
    max_pitch: float = 0.8
    """Largest |pitch| (rad) in STAND and WALK before a fault."""
    max_target_step: float = 0.2
    """Largest change of a joint target per control period (rad)."""
    command_timeout: float = 0.5
    """A /cmd_vel older than this (s) is replaced by zero (stand still): a lost operator link."""
    exploration_std: float = 0.0
    """Std (action units) of Gaussian noise added to the policy's action in WALK, for online
    fine-tuning's data (the noisy action is the one run and recorded); 0 = off."""
    exploration_tilt: float = 0.3
    """Base tilt (rad, the larger of |roll| and |pitch|) at which the exploration noise has
    faded to nothing: full std up to half of it, then linearly less, so that the noise never
    pushes a robot that is already tipping."""
    limits: robot_io.InputLimits = field(default_factory=robot_io.InputLimits)
    """Plausibility bounds of the inputs."""

    def __post_init__(self):
        """Refuse values that would disable a safety function (ValueError naming them)."""
        bounds = {
            'control_dt': (1e-4, 1.0),
            'stale_periods': (1.0, 50.0),
            'stand_duration': (0.1, 60.0),
            'damping_kd': (1e-3, 100.0),
            'max_roll': (0.05, 1.5),
            'max_pitch': (0.05, 1.5),
            'max_target_step': (1e-3, 1.0),
            'command_timeout': (0.01, 10.0),
            'exploration_std': (0.0, 0.3),
            'exploration_tilt': (0.02, 1.5),
        }
        bad = [
            f'{name}={getattr(self, name)!r} (allowed {low} to {high})'
            for name, (low, high) in bounds.items()
            if not low <= float(getattr(self, name)) <= high
        ]  # NaN fails both comparisons
        if bad:
            raise ValueError('policy_node parameters refused: ' + ', '.join(bad))


def _finite(values):
    """The array with NaN and infinities replaced (np.nan_to_num); itself when finite."""
    return values if np.isfinite(values).all() else np.nan_to_num(values)


@dataclass
class Tick:
    """What one control step produced."""

    command: joint_command.JointCommand
    """The finite joint command to publish."""
    row: TransitionRow = None
    """The tick's transition (None until every input has arrived)."""
    inference_s: float = 0.0
    """onnxruntime time of this tick (s), 0 outside WALK."""
    events: list = field(default_factory=list)
    """(level, message) pairs to log: level 'info', 'warning' or 'error'."""


class Controller:
    """Holds the latest inputs, the state machine and the previous targets."""

    def __init__(self, config=None, policy=None, policy_error=''):
        """Use a loaded OnnxPolicy (or None, then WALK is refused with policy_error)."""
        self.config = config or ControllerConfig()
        self.policy = policy
        self.policy_error = policy_error or ('' if policy else 'no policy file loaded')
        self.fsm = SafetyStateMachine()
        self.watchdog = Watchdog(self.config.stale_periods * self.config.control_dt)
        self.matcher = robot_io.JointMatcher()
        self.q = self.qd = self.tau = None  # (12,) rad, rad/s, N m, robot order
        self.quat = self.ang_vel = None  # (4,) w-x-y-z, (3,) rad/s body frame
        self.lin_vel = None  # (3,) m/s body frame
        self.command = np.zeros(3)  # vx, vy (m/s), wz (rad/s)
        self.command_time = -np.inf  # monotonic s of the last accepted /cmd_vel
        self.ranges = policy.contract.command_ranges if policy else spec.COMMAND_RANGES
        self.last_action = np.zeros(spec.ACTION_DIM)
        self.prev_target = spec.DEFAULT_JOINT_POS.copy()  # (12,) rad, last published q*
        self.stand_from = spec.DEFAULT_JOINT_POS.copy()
        self.seq = 0
        self.episode = 0
        self.ending = None  # 'terminated' or 'truncated' for the next row
        self.last_rejection = ''
        self.rejections = 0
        self._events = []
        self._pending = (None, None, None)  # (obs, action, last action) of the last step
        self._observe = SingleObservation()
        self.walk_ticks = 0  # control periods since WALK began: the gait clock's count
        self.policy_obs = None  # (obs_dim,) float32 the policy got at the last step, or None
        self._walking = False  # whether the previous step ran the policy
        self.noise = np.random.default_rng()  # exploration noise (exploration_std > 0 only)
        version = policy.contract.file_sha256[:8] if policy else '0'
        self.policy_version = int(version, 16)

    # ---- inputs -------------------------------------------------------------------------

    def _reject(self, error, now):
        """Record a rejected message; trip DAMP when it is a fault."""
        self.last_rejection = str(error)
        self.rejections += 1
        self._events.append(('error' if error.fault else 'warning', str(error)))
        if error.fault and self.fsm.trip(now, str(error)):
            self._on_fault()
        return str(error)

    def on_joint_state(self, names, position, velocity, effort, now, stamp=0.0):
        """Take a /joint_states message (stamp: its header's, s); return the rejection or ''."""
        stale = self.watchdog.stamp_error('/joint_states', stamp)
        if stale:
            return self._reject(robot_io.InputError(stale), now)
        try:
            q, qd, tau = self.matcher.match(names, position, velocity, effort)
            robot_io.check_joints(q, qd, tau, self.config.limits)
        except robot_io.InputError as error:
            return self._reject(error, now)
        self.q, self.qd, self.tau = q, qd, tau
        self.watchdog.feed('/joint_states', now)
        return ''

    def on_imu(self, quat_xyzw, ang_vel, now, stamp=0.0):
        """Take an /imu message (stamp: its header's, s); return the rejection message or ''."""
        stale = self.watchdog.stamp_error('/imu', stamp)
        if stale:
            return self._reject(robot_io.InputError(stale), now)
        try:
            self.quat, self.ang_vel = robot_io.check_imu(quat_xyzw, ang_vel, self.config.limits)
        except robot_io.InputError as error:
            return self._reject(error, now)
        self.watchdog.feed('/imu', now)
        return ''

    def on_odom(self, lin_vel, now, stamp=0.0):
        """Take an /odom message (body-frame twist; stamp: its header's, s); rejection or ''."""
        stale = self.watchdog.stamp_error('/odom', stamp)
        if stale:
            return self._reject(robot_io.InputError(stale), now)
        try:
            self.lin_vel = robot_io.check_odom(lin_vel, self.config.limits)
        except robot_io.InputError as error:
            return self._reject(error, now)
        self.watchdog.feed('/odom', now)
        return ''

    def on_cmd_vel(self, vx, vy, wz, now):
        """Take a /cmd_vel command, clipped to the ranges; return a message or ''."""
        try:
            self.command, clipped = robot_io.clip_command(vx, vy, wz, self.ranges)
        except robot_io.InputError as error:
            return self._reject(error, now)
        self.command_time = now
        return f'/cmd_vel clipped to {self.command.tolist()}' if clipped else ''

    def inputs_ok(self, now):
        """True when every input has arrived and none is stale."""
        return self.watchdog.armed and not self.watchdog.stale(now)

    # ---- requests -----------------------------------------------------------------------

    def request(self, name, now):
        """Handle a service request start, stop, estop or reset; return (accepted, message)."""
        before = self.fsm.mode
        if name == 'start':
            ok, message = self.fsm.start(
                now,
                self.stand_progress(now) >= 1.0,
                self.policy is not None,
                self.inputs_ok(now),
                self.policy_error,
            )
        elif name == 'stop':
            ok, message = self.fsm.stop(now)
        elif name == 'estop':
            ok = self.fsm.trip(now, 'estop requested')
            message = 'DAMP: estop latched' if ok else 'already in DAMP'
            if ok:
                self._on_fault()
        elif name == 'reset':
            ok, message = self.fsm.reset(now, self.inputs_ok(now))
        else:
            return False, f'unknown request {name!r}'
        if ok:
            self._on_change(before, self.fsm.mode)
        return ok, message

    def _on_change(self, before, after):
        """Prepare the new mode: stand start pose, episode bookkeeping."""
        if after is Mode.STAND:
            source = self.q if before is Mode.PASSIVE and self.q is not None else self.prev_target
            self.stand_from = np.array(source, dtype=np.float64)
        if after is Mode.WALK:
            self.episode += 1
            self.last_action = np.zeros(spec.ACTION_DIM)
            if self.command_time < self.fsm.entered - self.config.command_timeout:
                self.command = np.zeros(3)  # no command from before the walk was asked for
        elif before is Mode.WALK:
            self.ending = 'truncated'

    def _on_fault(self):
        """Bookkeeping when DAMP is entered: the episode ends terminated."""
        self.ending = 'terminated'

    def swap_policy(self, policy, version):
        """Make `policy` (same contract, checked by the caller) the one the next step runs.

        version: the policy version the transition rows carry from now on. Returns the previous
        policy.
        """
        previous = self.policy
        self.policy, self.policy_version, self.policy_error = policy, int(version), ''
        return previous

    def stand_progress(self, now):
        """Fraction in [0, 1] of the STAND interpolation done (0 outside STAND)."""
        if self.fsm.mode is not Mode.STAND:
            return 0.0
        duration = max(self.config.stand_duration, 1e-6)
        return float(np.clip((now - self.fsm.entered) / duration, 0.0, 1.0))

    # ---- control step -------------------------------------------------------------------

    def trip(self, reason, now):
        """Enter DAMP for a fault found outside the controller (e.g. a failed tick)."""
        if self.fsm.trip(now, reason):
            self._on_fault()
            self._events.append(('error', reason))

    def _expire_command(self, now):
        """Zero a /cmd_vel that is older than command_timeout (the operator link is lost)."""
        if now - self.command_time > self.config.command_timeout and np.any(self.command):
            self.command = np.zeros(3)
            self._events.append(('warning', '/cmd_vel timed out: commanding zero velocity'))

    def _check_faults(self, now):
        """Trip DAMP on a stale input or on roll or pitch beyond the limits."""
        reason = self.watchdog.fault(now)
        if not reason and self.quat is not None and self.fsm.mode in (Mode.STAND, Mode.WALK):
            roll, pitch = robot_io.roll_pitch(self.quat)
            if abs(roll) > self.config.max_roll or abs(pitch) > self.config.max_pitch:
                reason = f'base tilt roll {roll:.2f} rad, pitch {pitch:.2f} rad beyond limits'
        if reason and self.fsm.trip(now, reason):
            self._on_fault()
            self._events.append(('error', reason))

    def observation(self):
        """The (48,) observation of the current inputs, or None until every input arrived."""
        if self.q is None or self.quat is None or self.lin_vel is None:
            return None
        return self._observe(
            self.quat, self.lin_vel, self.ang_vel, self.q, self.qd, self.command, self.last_action
        )

    def policy_observation(self, obs):
        """What the policy takes: obs (48,), and the gait clock when its contract asks for it."""
        if self.policy is None or not self.policy.contract.gait_clock:
            return obs
        clock = np.array(spec.gait_clock(self.walk_ticks), dtype=np.float32)  # sin, cos
        return np.concatenate([obs, clock])

    def warm(self):
        """Run the policy once on the current observation, result unused; whether it ran.

        Called just before a tick is due (WALK only), it brings the weights and code back into
        the caches that an idle CPU loses, so the tick's own inference runs warm. No state
        changes.
        """
        if self.policy is None or self.fsm.mode is not Mode.WALK:
            return False
        obs = self.observation()
        if obs is None:
            return False
        self.policy.act(self.policy_observation(obs))
        return True

    def exploration_scale(self) -> float:
        """The share of exploration_std applied now: 1 on level ground, 0 from exploration_tilt."""
        if self.config.exploration_std <= 0.0 or self.quat is None:
            return 0.0
        tilt = max(abs(a) for a in robot_io.roll_pitch(self.quat))  # rad
        full = 0.5 * self.config.exploration_tilt  # full noise up to here
        return float(np.clip((self.config.exploration_tilt - tilt) / full, 0.0, 1.0))

    def _walk_targets(self, obs, now):
        """Run the policy; return (targets (12,), action (12,), inference s) or trip DAMP."""
        start = time.perf_counter()
        action = self.policy.act(obs)
        elapsed = time.perf_counter() - start
        if not np.isfinite(action).all():
            reason = 'policy produced non-finite actions'
            if self.fsm.trip(now, reason):
                self._on_fault()
                self._events.append(('error', reason))
            return None, None, elapsed
        contract = self.policy.contract
        std = self.exploration_scale() * self.config.exploration_std
        if std > 0.0:  # (12,) behaviour noise for off-policy learning
            action = action + self.noise.normal(0.0, std, action.shape)
        action = np.clip(action, contract.action_low, contract.action_high)  # the trained box
        return contract.default_joint_pos + contract.action_scale * action, action, elapsed

    def step(self, now, defer_row=False):
        """Run one control period at monotonic time now (s); return the Tick.

        With defer_row the transition row is left out of the Tick (off the latency path) and
        take_row() returns it; call it before the next step.
        """
        self._check_faults(now)
        self._expire_command(now)
        obs = self.observation()
        mode, inference, action = self.fsm.mode, 0.0, None
        target = self.prev_target
        measured = self.q if self.q is not None else self.prev_target
        self.policy_obs = None
        if mode is Mode.WALK and obs is not None:
            if not self._walking:
                self.walk_ticks = 0  # the gait clock restarts when the policy takes control
            self.policy_obs = self.policy_observation(obs)
            target, action, inference = self._walk_targets(self.policy_obs, now)
            self.walk_ticks += 1
            mode = self.fsm.mode  # DAMP when the policy failed
        self._walking = self.policy_obs is not None and mode is Mode.WALK
        if mode is Mode.STAND:
            alpha = self.stand_progress(now)
            target = (1.0 - alpha) * self.stand_from + alpha * spec.DEFAULT_JOINT_POS
        if mode in (Mode.STAND, Mode.WALK):
            target = np.clip(target, spec.JOINT_POS_LIMITS[:, 0], spec.JOINT_POS_LIMITS[:, 1])
            step = self.config.max_target_step
            target = np.clip(target, self.prev_target - step, self.prev_target + step)
            contract = self.policy.contract if self.policy else None
            kp = contract.kp if contract else spec.KP  # (12,) N m/rad
            kd = contract.kd if contract else spec.KD  # (12,) N m s/rad
            zeros = np.zeros(spec.NUM_JOINTS)
            command = joint_command.JointCommand(
                target, zeros, zeros, kp.copy(), kd.copy(), spec.TORQUE_LIMIT.copy(), mode.value
            )
        else:
            command = joint_command.damping(measured, self.config.damping_kd, mode.value)
        if not command.is_finite():
            if self.fsm.trip(now, 'internal: non-finite joint target'):
                self._on_fault()
            command = joint_command.damping(spec.DEFAULT_JOINT_POS, self.config.damping_kd)
        self.prev_target = command.position.copy()
        if action is None:
            action = (command.position - spec.DEFAULT_JOINT_POS) / spec.ACTION_SCALE
        self._pending = (obs, action, self.last_action)
        tick = Tick(command, None if defer_row else self.take_row(), inference, self._events)
        self._events = []
        self.last_action = action
        return tick

    def take_row(self):
        """The transition row of the last step, or None before every input arrived."""
        obs, action, last_action = self._pending
        self._pending = (None, None, None)
        if obs is None:
            return None
        rewards = reward_terms(
            self.lin_vel, self.ang_vel, self.quat, self.command, self.tau, action, last_action
        )
        row = TransitionRow(
            seq=self.seq,
            episode=self.episode,
            policy_version=self.policy_version,
            mode=self.fsm.mode.value,
            obs=obs,
            action=_finite(action),
            reward_terms=_finite(rewards),
            terminated=self.ending == 'terminated',
            truncated=self.ending == 'truncated',
        )
        if self.ending == 'terminated':
            self.episode += 1  # the episode after a fault is a new one
        self.seq, self.ending = self.seq + 1, None
        return row

    def status(self, now):
        """A JSON-ready status: mode, hint (the next request), fault, policy, input ages, ..."""
        ages = self.watchdog.ages(now)
        return {
            'mode': self.fsm.mode.value,
            'hint': self.fsm.hint(self.policy is not None, self.policy_error),
            'fault': self.fsm.fault,
            'policy': self.policy.describe() if self.policy else None,
            'policy_error': '' if self.policy else self.policy_error,
            'stand_progress': round(self.stand_progress(now), 3),
            'command': self.command.tolist(),
            'input_age_ms': {
                k: (round(v * 1e3, 1) if np.isfinite(v) else None) for k, v in ages.items()
            },
            'last_rejection': self.last_rejection,
            'rejections': self.rejections,
            'seq': self.seq,
        }
