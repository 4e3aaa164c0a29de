"""policy_node: the 50 Hz ONNX policy loop behind the safety state machine (thin rclpy node).

Subscribes /joint_states, /imu, /odom, /cmd_vel; publishes /joint_command (see
loco_policy.control.joint_command), /replay/transitions (see loco_policy.transition), /diagnostics
and /policy/status (transient local). Services ~/start, ~/stop, ~/estop, ~/reset
(std_srvs/Trigger). The logic lives in loco_policy.control.controller.
"""

import json
import os
import sys
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, qos_profile_sensor_data, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float32MultiArray, Float64MultiArray, String
from std_srvs.srv import Trigger

from loco_policy import spec, transition
from loco_policy.control import cdr, joint_command
from loco_policy.control.controller import Controller, ControllerConfig
from loco_policy.control.hot_swap import PolicySwitch, SwapLimits
from loco_policy.control.loop_stats import LoopStats
from loco_policy.control.position_group import group_order, group_positions
from loco_policy.control.realtime import (
    hold_cpu_dma_latency,
    set_cpu_affinity,
    set_realtime_priority,
)
from loco_policy.control.tick_schedule import TickSchedule
from loco_policy.nodes import any_type, run_node, steady_clock
from loco_policy.nodes.warm_spin import spin_warm
from loco_policy.policy_file import OnnxPolicy, PolicyFileError
from loco_policy.tools.random_policy import ALGORITHM as UNTRAINED

TICK_SOURCES = ('joint_states', 'timer')
"""What starts a control tick: the /joint_states arrival completing a period, or a timer."""

EXECUTORS = ('events', 'single_threaded')
"""rclpy executors: the EventsExecutor (rclpy.experimental: callbacks dispatched from C++, about
half the CPU per message of the default executor, which rebuilds its wait set in Python), or
the SingleThreadedExecutor."""

STOP_ACK_TIMEOUT = 0.5
"""s: at a stop, how long the damping command and the last transitions may wait for every
reliable reader's acknowledgement before the process ends."""

FALLBACK_SLACK = 0.001
"""s: the fallback timer, restarted at each tick, may fire this early against time.monotonic."""

STALL_SLACK = 0.005
"""s: lateness of a timer callback that is scheduling jitter, not a stall of the node."""

SHIPPED_POLICY = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'policies', 'anymal_c_walk.onnx'
)
"""The shipped policy file (policies/README.md says how it was trained)."""


def load_policy(path, allow_untrained=False):
    """Return (OnnxPolicy or None, reason it is None) for the policy parameter."""
    if not path:
        return None, "no policy file given (policy:=''): PASSIVE and STAND only, WALK refused"
    if path == SHIPPED_POLICY and not os.path.isfile(path):
        return None, f'no trained policy is shipped yet ({path} is absent): WALK refused'
    try:
        policy = OnnxPolicy(path)
    except PolicyFileError as error:
        return None, str(error)
    if policy.contract.provenance.get('algorithm') == UNTRAINED and not allow_untrained:
        return None, (
            f'policy file {path} holds random weights for timing and tests, not a '
            'trained policy: WALK refused (allow_untrained:=true to run it anyway)'
        )
    return policy, ''


def actuator_line(provenance):
    """The log line naming the actuator model a policy was trained on, or None if it names none."""
    digest = provenance.get('actuator_sha256')
    if not digest:
        return None
    name = provenance.get('actuator_file', '?')
    return f'policy trained on the fitted actuator model {name}, sha256 {digest}'


class PolicyNode(Node):
    """Wires topics, services and the control timer to a Controller."""

    def __init__(self):
        """Declare parameters, load the policy and create the ROS interfaces."""
        super().__init__('policy_node')
        defaults = ControllerConfig()
        self.declare_parameter('policy', SHIPPED_POLICY)
        self.declare_parameter('allow_untrained', False)  # run random-weight test files
        for name in ('stale_periods', 'stand_duration', 'damping_kd', 'max_roll', 'max_pitch'):
            self.declare_parameter(name, float(getattr(defaults, name)))
        self.declare_parameter('max_target_step', defaults.max_target_step)
        self.declare_parameter('command_timeout', defaults.command_timeout)
        self.declare_parameter('exploration_std', defaults.exploration_std, any_type())
        self.declare_parameter('exploration_tilt', defaults.exploration_tilt, any_type())
        self.declare_parameter('transition_batch', 10)  # rows per /replay/transitions message
        self.declare_parameter('diagnostics_period', 1.0)  # s
        self.declare_parameter('stats_file', '')  # run summary JSON written at shutdown
        self.declare_parameter('realtime_priority', 0)  # SCHED_FIFO 1-99; 0 = normal
        self.declare_parameter('tick_source', TICK_SOURCES[0])
        self.declare_parameter('cpu_affinity', '', any_type())  # e.g. '1': pin the node to CPU 1
        self.declare_parameter('cpu_dma_latency', -1)  # us; >= 0 holds CPUs out of deep idle
        self.declare_parameter('warm_lead', 0.001, any_type())  # s warmed before a tick; 0: off
        self.declare_parameter('warm_poll', False)  # poll without blocking after a warm-up
        self.declare_parameter('executor', EXECUTORS[0])  # rclpy executor spinning the node
        self.declare_parameter('update_key_file', '')  # HMAC key of /policy/update; '' = refuse
        self.declare_parameter('max_action_deviation', 1.0)  # candidate vs active, max |da|
        self.declare_parameter('max_mean_action_deviation', 0.3)  # mean |da|
        self.declare_parameter('inference_budget', 0.002)  # s, a candidate's slowest inference
        self.declare_parameter('validation_observations', 100)  # recent WALK observations
        self.declare_parameter('rollback_window', 5.0)  # s after a swap watched for rollback
        self.declare_parameter('rollback_reward_margin', 0.2)  # tracking reward per tick
        self.declare_parameter('position_group_topic', '')  # ros2_control output; '' = off
        self.declare_parameter('position_group_joints', list(spec.JOINT_NAMES))  # its order
        names = [
            *vars(defaults),
            'policy',
            'transition_batch',
            'diagnostics_period',
            'stats_file',
            'realtime_priority',
            'allow_untrained',
            'tick_source',
            'cpu_affinity',
            'cpu_dma_latency',
            'warm_lead',
            'warm_poll',
            'executor',
            'position_group_topic',
            'position_group_joints',
            'update_key_file',
            'max_action_deviation',
            'max_mean_action_deviation',
            'inference_budget',
            'validation_observations',
            'rollback_window',
            'rollback_reward_margin',
        ]
        p = {n: self.get_parameter(n).value for n in names if self.has_parameter(n)}
        if p['tick_source'] not in TICK_SOURCES:
            raise ValueError(f'tick_source {p["tick_source"]!r} is not one of {TICK_SOURCES}')
        self.tick_on_state = p['tick_source'] == 'joint_states'
        if p['executor'] not in EXECUTORS:
            raise ValueError(f'executor {p["executor"]!r} is not one of {EXECUTORS}')
        self.executor_name = p['executor']
        self.group_topic = str(p['position_group_topic'])
        self.group_order = group_order(p['position_group_joints'])  # ValueError: refused
        self.warm_lead = float(p['warm_lead'])
        self.warm_poll = bool(p['warm_poll']) and int(p['realtime_priority']) <= 0
        if not 0.0 <= self.warm_lead < 0.5 * spec.CONTROL_DT:  # also refuses NaN
            raise ValueError(f'warm_lead {self.warm_lead} s must be in [0, {spec.CONTROL_DT / 2})')
        self.schedule = TickSchedule(spec.CONTROL_DT)
        self.due = None  # monotonic s of the /joint_states that made a tick due, until it runs
        self.due_first = None  # monotonic s of the first of them (a later one replaces due)
        self.arrivals = {}  # input name -> monotonic s of its last message
        self.pending = {}  # input name -> (serialized message, monotonic s of arrival)
        config = ControllerConfig(
            **{k: float(p[k]) for k in vars(defaults) if k in p and k != 'control_dt'}
        )
        self.realtime_priority = int(p['realtime_priority'])
        self.get_logger().info(set_realtime_priority(self.realtime_priority))
        self.get_logger().info(hold_cpu_dma_latency(int(p['cpu_dma_latency'])))
        policy, reason = load_policy(p['policy'], bool(p['allow_untrained']))
        if policy is None:
            self.get_logger().warning(f'policy: {reason}')
        else:
            self.get_logger().info(f'policy loaded: {json.dumps(policy.describe())}')
            line = actuator_line(policy.contract.provenance)
            if line:
                self.get_logger().info(line)
        self.controller = Controller(config, policy, reason)
        # mode at the end of the last tick: a DAMP entered since (an input fault in ingest, an
        # estop, an exception in the tick) counts for the rollback after a swap
        self._mode_seen = self.controller.fsm.mode.value
        limits = SwapLimits(
            float(p['max_action_deviation']),
            float(p['max_mean_action_deviation']),
            float(p['inference_budget']),
        )
        self.switch = PolicySwitch(
            policy,
            str(p['update_key_file']),
            limits,
            float(p['rollback_window']),
            float(p['rollback_reward_margin']),
            int(p['validation_observations']),
        )
        if not p['update_key_file']:
            self.get_logger().info('no update_key_file: /policy/update is refused')
        self.stats = LoopStats(spec.CONTROL_DT)
        self.stats_file = p['stats_file']
        self.batch, self.batch_size = [], max(1, int(p['transition_batch']))
        self.state_received = None  # perf_counter time (s) of the last /joint_states
        self.transitions_published = 0
        self.warm_ups = 0  # pre-tick warm-up inferences run
        self.operating = False  # True from the first accepted start request
        self._create_interfaces(float(p['diagnostics_period']))
        self._last_status = None
        self._swap_generation = 0
        self.publish_status(force=True)
        # last: every middleware thread exists now
        self.get_logger().info(set_cpu_affinity(str(p['cpu_affinity'])))

    def _create_interfaces(self, diagnostics_period):
        """Create the subscriptions, publishers, services and timers."""
        sensor = qos_profile_sensor_data
        # raw: kept serialized until a tick needs them (see _ingest)
        self.create_subscription(
            JointState, '/joint_states', self.on_joint_states, sensor, raw=True
        )
        self.create_subscription(Imu, '/imu', self.on_imu, sensor, raw=True)
        self.create_subscription(Odometry, '/odom', self.on_odom, sensor, raw=True)
        self.create_subscription(Twist, '/cmd_vel', self.on_cmd_vel, 10)
        self.command_pub = self.create_publisher(JointState, '/joint_command', 10)
        self.group_pub = None
        if self.group_topic:  # ros2_control: forward_command_controller's commands topic
            self.group_pub = self.create_publisher(Float64MultiArray, self.group_topic, 10)
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.replay_pub = self.create_publisher(Float32MultiArray, '/replay/transitions', reliable)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.status_pub = self.create_publisher(String, '/policy/status', latched)
        self.diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        for name in ('start', 'stop', 'estop', 'reset'):
            self.create_service(Trigger, f'~/{name}', self._service(name))
        self.create_service(Trigger, '~/rollback', self.on_rollback)
        updates = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.create_subscription(String, '/policy/update', self.on_update, updates)
        self.tick_timer = self.fallback_timer = None
        if self.tick_on_state:  # ticks come with /joint_states; this timer covers their loss
            # restarted at every tick, so it fires only when no tick came for fallback s
            self.fallback_timer = self.create_timer(
                self.schedule.fallback, self.on_fallback_check, clock=steady_clock()
            )
            idle = self.schedule.fallback + FALLBACK_SLACK
        else:
            self.tick_timer = self.create_timer(
                spec.CONTROL_DT, self.on_timer_tick, clock=steady_clock()
            )
            idle = spec.CONTROL_DT
        # s: the longest the node is left without a callback while it runs (its timer's period);
        # a longer silence is the node's own stall (control/safety.Watchdog.awake)
        self.controller.watchdog.idle = idle + STALL_SLACK
        self.create_timer(diagnostics_period, self.publish_diagnostics)

    # ---- callbacks (short: validation and logic live in the controller) -----------------

    def _awake(self, now):
        """Tell the watchdog the node runs a callback at monotonic now; log a stall it ended."""
        stall = self.controller.watchdog.awake(now)
        if stall > 0.0:
            self.get_logger().warning(
                f'control loop stalled {stall * 1e3:.0f} ms beyond its timer period: that time, '
                f'up to {self.controller.watchdog.max_credit * 1e3:.0f} ms, is not counted in '
                'the input ages', throttle_duration_sec=1.0,
            )  # fmt: skip

    def on_joint_states(self, raw):
        """Keep a /joint_states message (serialized) and tick when it completes a period."""
        now = time.monotonic()
        self._awake(now)
        self.pending['joint_states'] = (raw, now)
        self.state_received = time.perf_counter()
        if self.tick_on_state and self.schedule.on_state(now):
            self.due_first = now if self.due is None else self.due_first
            self.due = now
        self._arrived('joint_states', now)

    def on_imu(self, raw):
        """Keep an /imu message (serialized) for the next tick."""
        now = time.monotonic()
        self._awake(now)
        self.pending['imu'] = (raw, now)
        self._arrived('imu', now)

    def on_odom(self, raw):
        """Keep an /odom message (serialized, twist in the base frame) for the next tick."""
        now = time.monotonic()
        self._awake(now)
        self.pending['odom'] = (raw, now)
        self._arrived('odom', now)

    def _arrived(self, name, now):
        """Run a due tick once /imu and /odom of the same robot cycle have arrived too.

        The robot publishes /joint_states, /imu and /odom each cycle in some order; an input
        counts for the cycle when it arrived at most half a state period before the state that
        made the tick due, so the observation never mixes this cycle's joints with the last
        cycle's base state. A lost input leaves the tick to the fallback check.
        """
        self.arrivals[name] = now
        if not self.tick_on_state or self.due is None:
            return
        since = self.due - 0.5 * (self.schedule.state_period or 0.0)
        if all(self.arrivals.get(k, -1.0) >= since for k in ('imu', 'odom')):
            self.on_tick()

    def on_fallback_check(self):
        """Tick when /joint_states stopped arriving, so the watchdog sees them go stale."""
        now = time.monotonic()
        self._awake(now)
        if self.schedule.on_check(now + FALLBACK_SLACK):
            self.on_tick()

    def on_timer_tick(self):
        """A tick of the free 50 Hz timer (tick_source timer)."""
        self._awake(time.monotonic())
        self.on_tick()

    def _ingest(self):
        """Deserialize and validate the newest message of each input (at a tick, not per message).

        The robot's inputs come at 200 Hz or more and the loop uses only the newest of each, so
        they are kept serialized and read here (control/cdr.py: only the fields used, no message
        objects): a rejected input is reported as on arrival and leaves the watchdog fed with its
        last valid arrival time. A message whose header stamp does not advance is rejected so
        (control/safety.Watchdog.stamp_error).
        """
        pending, self.pending = self.pending, {}
        for name, (raw, arrived) in pending.items():
            try:
                stamp = cdr.stamp(raw)
                if name == 'joint_states':
                    error = self.controller.on_joint_state(*cdr.joint_state(raw), arrived, stamp)
                elif name == 'imu':
                    error = self.controller.on_imu(*cdr.imu(raw), arrived, stamp)
                else:
                    lin_vel = cdr.odometry_linear_velocity(raw)
                    error = self.controller.on_odom(lin_vel, arrived, stamp)
            except cdr.CdrError as bad:
                error = f'/{name} rejected: malformed message ({bad})'
            self._log_rejection(error)

    def on_update(self, msg):
        """Hand a /policy/update announcement to the validation thread (see control/hot_swap)."""
        self.switch.submit(msg.data)

    def on_rollback(self, request, response):
        """~/rollback: the previous policy becomes active at the next tick."""
        response.success, response.message = self.switch.request_rollback()
        self._log('info' if response.success else 'warning', f'rollback: {response.message}')
        return response

    def on_cmd_vel(self, msg):
        """Feed a /cmd_vel command to the controller (clipped to the command ranges)."""
        message = self.controller.on_cmd_vel(
            msg.linear.x, msg.linear.y, msg.angular.z, time.monotonic()
        )
        if message:
            self.get_logger().warning(message, throttle_duration_sec=1.0)

    def _log_rejection(self, error):
        """Log a rejected input (throttled) and refresh the status."""
        if error:
            self.get_logger().error(error, throttle_duration_sec=1.0)
            self.publish_status()

    def _log(self, level, text):
        """Log at a level given by name (rclpy needs one call site per severity)."""
        if level == 'error':
            self.get_logger().error(text)
        elif level == 'warning':
            self.get_logger().warning(text)
        else:
            self.get_logger().info(text)

    def _service(self, name):
        """Return the Trigger callback of one state-machine request."""

        def handle(request, response):
            response.success, response.message = self.controller.request(name, time.monotonic())
            if response.success and name == 'start' and not self.operating:
                self.operating = True  # the run summary covers operation, not start-up
                self.stats.restart_totals()
            self._log('info' if response.success else 'warning', f'{name}: {response.message}')
            self.publish_status(force=True)
            return response

        return handle

    def next_tick_expected(self):
        """Monotonic time (s) the next tick is expected, or None before the first."""
        if self.tick_timer is not None:
            return time.monotonic() + 1e-9 * self.tick_timer.time_until_next_call()
        last = self.schedule.last_tick
        return None if last is None else last + self.schedule.period

    def warm(self):
        """Warm the policy's caches just before a tick; whether it ran (see warm_spin)."""
        try:
            ran = self.controller.warm()
        except Exception as error:  # a failing policy is the tick's to handle, not the warm-up's
            self.get_logger().warning(
                f'warm-up inference failed: {error!r}', throttle_duration_sec=5.0
            )
            return False
        self.warm_ups += ran
        return ran

    def on_tick(self):
        """One control period; any exception trips DAMP and publishes damping, never escapes."""
        try:
            self._tick()
        except Exception as error:  # the robot must never keep its last PD target silently
            reason = f'internal error in the control tick: {error!r}'
            self.get_logger().error(reason, throttle_duration_sec=1.0)
            try:
                self.controller.trip(reason, time.monotonic())
                faulted, self._mode_seen = self._mode_seen != 'DAMP', 'DAMP'
                events = self.switch.after_tick(self.controller, None, faulted, time.monotonic())
                for level, text in events:
                    self._log(level, text)
                self.publish_damping()
                self.publish_status(force=True)
            except Exception as inner:  # last resort: keep the node alive and say so
                self.get_logger().fatal(f'could not publish the damping command: {inner!r}')

    def _tick(self):
        """Step the controller, publish command and transitions."""
        start = time.perf_counter()
        self._ingest()
        watchdog = self.controller.watchdog
        if watchdog.behind_stall() and not watchdog.stale(time.monotonic()):
            # right after the node's own stall, before the inputs queued during it were read:
            # no step on an observation from before the stall (the drives hold the last target)
            return
        swap_events = self.switch.at_tick(self.controller, time.monotonic())  # tick boundary
        self.schedule.ticked(time.monotonic(), self.due_first)  # None: a timer or fallback tick
        if self.fallback_timer is not None:
            self.fallback_timer.reset()
        self.due = self.due_first = None
        self.stats.tick(time.monotonic())
        tick = self.controller.step(time.monotonic(), defer_row=True)
        sec, nanosec = divmod(self.get_clock().now().nanoseconds, 1_000_000_000)
        arrays = joint_command.pack_arrays(tick.command)  # names, position, velocity, effort
        # serialized here (control/cdr.py): a tenth of the cost of rclpy's message conversion
        self.command_pub.publish(cdr.joint_state_bytes(sec, nanosec, tick.command.mode, *arrays))
        if self.group_pub is not None:
            positions = group_positions(tick.command, self.group_order)
            if positions is not None:
                self.group_pub.publish(Float64MultiArray(data=positions))
        done = time.perf_counter()
        self.stats.add('compute', done - start)
        if self.state_received is not None:
            self.stats.add('state_age', done - self.state_received)
        if tick.inference_s:
            self.stats.add('inference', tick.inference_s)
        for level, text in tick.events:
            self._log(level, text)
        if tick.events:
            self.publish_status(force=True)
        row = self.controller.take_row()  # after the publish: off the latency path
        mode = self.controller.fsm.mode.value
        faulted, self._mode_seen = mode == 'DAMP' and self._mode_seen != 'DAMP', mode
        swap_events += self.switch.after_tick(self.controller, row, faulted, time.monotonic())
        for level, text in swap_events:
            self._log(level, text)
        if swap_events or self.switch.generation != self._swap_generation:
            self._swap_generation = self.switch.generation  # a rejection from the validator
            self.publish_status(force=True)
        if row is not None:
            self.batch.append(row)
            if len(self.batch) > self.batch_size:  # the newest row waits: the stop may end with it
                self.publish_transitions(self.batch_size)

    def publish_transitions(self, count=None):
        """Publish the oldest `count` batched rows (all if None) on /replay/transitions.

        A batch that does not pack is dropped with a warning.
        """
        rows = self.batch if count is None else self.batch[:count]
        self.batch = self.batch[len(rows) :]
        try:
            dims, data = transition.pack_rows(rows)
        except ValueError as error:
            self.get_logger().warning(f'transition batch dropped: {error}')
            return
        self.replay_pub.publish(cdr.float32_multiarray_bytes(dims, data))
        self.transitions_published += len(rows)

    def publish_status(self, force=False):
        """Publish /policy/status when it changed (or when forced).

        Never raises: telemetry must not trip the control tick or end the node.
        """
        try:
            self._publish_status(force)
        except Exception as error:
            self.get_logger().error(
                f'/policy/status not published: {error!r}', throttle_duration_sec=1.0
            )

    def _publish_status(self, force):
        status = self.controller.status(time.monotonic())
        status['policy_version'] = self.controller.policy_version
        status['policy_sha256'] = self.switch.active_sha
        status.update(self.switch.status())
        updates = status['updates']
        key = (status['mode'], status['fault'], status['last_rejection'], json.dumps(updates))
        if force or key != self._last_status:
            self._last_status = key
            self.status_pub.publish(String(data=json.dumps(status)))

    def publish_diagnostics(self):
        """Publish loop rate, jitter, inference, input staleness, state on /diagnostics.

        Never raises, like publish_status.
        """
        try:
            self._publish_diagnostics()
        except Exception as error:
            self.get_logger().error(
                f'/diagnostics not published: {error!r}', throttle_duration_sec=1.0
            )

    def _publish_diagnostics(self):
        status = self.controller.status(time.monotonic())
        figures = {**self.stats.summary(recent=True), **self.counters()}
        level = DiagnosticStatus.ERROR if status['mode'] == 'DAMP' else DiagnosticStatus.OK
        values = [
            KeyValue(key=k, value=f'{v:.4g}' if isinstance(v, float) else str(v))
            for k, v in figures.items()
        ]
        values += [
            KeyValue(key=f'age_ms {k}', value=str(v)) for k, v in status['input_age_ms'].items()
        ]
        values.append(KeyValue(key='mode', value=status['mode']))
        message = status['mode'] + (f': {status["fault"]}' if status['fault'] else '')
        diag = DiagnosticArray()
        diag.header.stamp = self.get_clock().now().to_msg()
        diag.status = [
            DiagnosticStatus(
                level=level, name='policy_node: control loop', message=message, values=values
            )
        ]
        self.diag_pub.publish(diag)
        self.publish_status(force=True)

    def counters(self):
        """The run's counts: transitions published, warm-ups, the node's own stalls."""
        watchdog = self.controller.watchdog
        return {
            'transitions_published': self.transitions_published,
            'warm_ups': self.warm_ups,
            'stalls': watchdog.stalls,
            'longest_stall_ms': round(watchdog.longest_stall * 1e3, 1),  # beyond the timer period
        }

    def run_summary(self):
        """The run's figures since the first accepted start, and the mode transitions."""
        summary = {**self.stats.summary(recent=False), **self.counters()}
        summary['mode'] = self.controller.fsm.mode.value
        summary['mode_history'] = [
            {'t': h.time, 'from': h.source.value, 'to': h.target.value, 'reason': h.reason}
            for h in self.controller.fsm.history
        ]
        summary['policy'] = self.controller.status(time.monotonic())['policy']
        summary['policy_version'] = self.controller.policy_version
        summary['updates'] = self.switch.status()['updates']  # hot swaps of the run
        return summary

    def publish_damping(self):
        """Publish one damping command (kp 0) holding the last target."""
        command = joint_command.damping(
            self.controller.prev_target, self.controller.config.damping_kd
        )
        msg = JointState()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = command.mode
        msg.name, msg.position, msg.velocity, msg.effort = joint_command.pack(command)
        self.command_pub.publish(msg)

    def on_stop(self):
        """At Ctrl-C or SIGTERM, before the node goes: a last damping command, the run summary.

        The drives would hold the last PD target until their own command timeout otherwise.
        """
        try:
            self.publish_damping()
            self.get_logger().info('stopping: damping command sent')
        except Exception as error:  # the summary below must still be written
            self.get_logger().error(f'stopping: no damping command sent: {error!r}')
        try:  # the rows of the last, partial batch: the episode ends with the last of them
            if self.batch:
                last = self.batch[-1]
                if not (last.terminated or last.truncated):
                    last.truncated = True
                self.publish_transitions()
        except Exception as error:
            self.get_logger().error(f'stopping: last transitions not published: {error!r}')
        # the process ends next: the samples must have left it, not sit in the writer's queue
        for publisher, topic in ((self.command_pub, 'damping'), (self.replay_pub, 'transitions')):
            try:
                if not publisher.wait_for_all_acked(Duration(seconds=STOP_ACK_TIMEOUT)):
                    self.get_logger().warning(
                        f'stopping: {topic} not acknowledged by every reader'
                    )
            except Exception as error:
                self.get_logger().error(f'stopping: {topic} acknowledgement: {error!r}')
        self.write_stats()

    def write_stats(self):
        """Write the run summary JSON to the stats_file parameter's path, if set."""
        if self.stats_file:
            with open(self.stats_file + '.tmp', 'w') as handle:
                json.dump(self.run_summary(), handle)
            os.replace(self.stats_file + '.tmp', self.stats_file)


def make_executor(node):
    """The executor the executor parameter names (None: rclpy's global one)."""
    if node.executor_name == 'events':
        from rclpy.experimental import EventsExecutor

        return EventsExecutor(context=node.context)
    return None


def main(args=None):
    """Run policy_node until Ctrl-C or SIGTERM; exit 2 naming refused parameters."""
    return run_node(
        'policy_node',
        PolicyNode,
        refused=(ValueError,),
        on_exit=lambda node: node.on_stop(),
        args=args,
        own_signals=True,
        spin=lambda node: spin_warm(
            node, node.warm_lead, busy=node.warm_poll, executor=make_executor(node)
        ),
    )


if __name__ == '__main__':
    sys.exit(main())
