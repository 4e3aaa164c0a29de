"""sim_robot: the simulated ANYmal speaking the robot's topics in real time (thin rclpy node).

Consumes /joint_command (loco_policy.control.joint_command contract), applies the PD actuator at
every physics step of the chosen backend (sim_backends: mujoco or warp) and publishes
/joint_states, /imu and /odom at publish_rate. Before the first command the robot holds the default
pose (as on its hoist); without commands for command_timeout it only damps. actuator_file names
an actuator model YAML (loco-train fit-actuator: realised gains, armature, friction, damping,
delay; actuator_delay overrides its delay); fixed_base welds the base in the air. Service ~/reset
(Trigger). With publish_description it latches the URDF on /robot_description and, where tf2_msgs
is importable, publishes /tf (odom -> base and the joints) with the sensors (robot_tf).

Stamps are on the physics clock, as a drive bridge stamps its samples: a state carries the time
of the physics step it shows, and /joint_command/applied (the /joint_command layout) carries,
once per tick that steps the physics, the command the drives took in for that tick's steps,
stamped at the start of the first of them. An actuator fit reads that topic where a bag has it,
so the command timing it sees is the drives' own, not the sender's stamps blurred by transport
and the tick grid.
"""

from collections import deque
import math
import sys
import time

from nav_msgs.msg import Odometry
import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import Imu, JointState
from std_srvs.srv import Trigger

from loco_policy import description, spec
from loco_policy.control import joint_command
from loco_policy.control.realtime import (
    hold_cpu_dma_latency,
    set_cpu_affinity,
    set_realtime_priority,
)
from loco_policy.control.tick_schedule import grid_publish_time
from loco_policy.nodes import any_type, run_node, steady_clock
from loco_policy.nodes.robot_tf import RobotTf
from loco_policy.sim.backends import make_backend, Perturbation, SimBackendError

MAX_CATCH_UP_STEPS = 20
"""Most physics steps per publish tick; beyond that the simulation drops behind real time."""

APPLIED_TOPIC = '/joint_command/applied'
"""The command the drives took in, on the physics clock (the /joint_command layout)."""


class SimRobot(Node):
    """Steps a backend in real time and publishes its sensors."""

    def __init__(self):
        """Declare parameters, build the backend, create the ROS interfaces."""
        super().__init__('sim_robot')
        self.declare_parameter('backend', 'mujoco')
        self.declare_parameter('publish_rate', 200.0)  # Hz
        self.declare_parameter('payload', 0.0)  # kg on the base
        self.declare_parameter('friction', -1.0)  # sliding coefficient, < 0: description's
        self.declare_parameter('gain_scale', 1.0)  # multiplier on commanded kp, kd
        self.declare_parameter('latency', 0.0)  # s, command arrival -> use
        self.declare_parameter('command_timeout', 0.5)  # s without commands -> damping only
        self.declare_parameter('publishing', True)  # false: sensors silent (watchdog tests)
        self.declare_parameter('realtime_priority', 0)  # SCHED_FIFO 1-99, as a robot's driver
        self.declare_parameter('publish_lead', 0.001, any_type())  # s woken before publishing
        self.declare_parameter('cpu_affinity', '', any_type())  # e.g. '0': pin the node to CPU 0
        self.declare_parameter('cpu_dma_latency', -1)  # us; >= 0 holds CPUs out of deep idle
        self.declare_parameter('publish_description', True)  # /robot_description (+ /tf)
        self.declare_parameter('actuator_file', '')  # actuator model YAML; '': PD in Python
        self.declare_parameter('actuator_delay', -1.0)  # s, >= 0 overrides the file's delay
        self.declare_parameter('fixed_base', False)  # base welded in the air (hanging robot)
        # /joint_command/applied per tick; always on with fixed_base (a robot being identified)
        self.declare_parameter('publish_applied', False)
        # white noise (std) on the published joint positions (rad), velocities (rad/s) and
        # efforts (N m), as encoders and current sensing give; physics sees the true state
        self.declare_parameter('joint_noise', [0.0, 0.0, 0.0])
        self.declare_parameter('noise_seed', 0)
        get = lambda name: self.get_parameter(name).value  # noqa: E731
        self.get_logger().info(set_realtime_priority(int(get('realtime_priority'))))
        self.get_logger().info(hold_cpu_dma_latency(int(get('cpu_dma_latency'))))
        self.perturbation = Perturbation(
            float(get('payload')), float(get('friction')), float(get('gain_scale')),
            float(get('latency')),
        )  # fmt: skip
        actuator = _actuator_params(str(get('actuator_file')), float(get('actuator_delay')))
        self.backend = make_backend(
            get('backend'), self.perturbation, actuator, bool(get('fixed_base'))
        )
        self.joint_noise = np.asarray(get('joint_noise'), dtype=np.float64)
        if self.joint_noise.shape != (3,) or not np.all(self.joint_noise >= 0):
            raise ValueError('joint_noise: three standard deviations >= 0 (q, qd, effort)')
        self.noise_rng = np.random.default_rng(int(get('noise_seed')))
        self.command_timeout = float(get('command_timeout'))
        self.publishing = bool(get('publishing'))
        self.period = 1.0 / float(get('publish_rate'))  # s
        self.lead = min(max(0.0, float(get('publish_lead'))), 0.5 * self.period)  # s
        self.add_on_set_parameters_callback(self._on_parameters)
        self.pending = deque()  # (due monotonic time s, JointCommand)
        self.command, self.command_time = None, None
        self.rejected = 0
        self.joint_pub = self.create_publisher(JointState, '/joint_states', 10)
        self.imu_pub = self.create_publisher(Imu, '/imu', 10)
        self.odom_pub = self.create_publisher(Odometry, '/odom', 10)
        self.applied_pub = None
        if bool(get('publish_applied')) or bool(get('fixed_base')):
            self.applied_pub = self.create_publisher(JointState, APPLIED_TOPIC, 10)
        self.create_subscription(JointState, '/joint_command', self.on_command, 10)
        self.create_service(Trigger, '~/reset', self.on_reset)
        self.robot_tf = None
        if bool(get('publish_description')):
            stamp = self.get_clock().now().to_msg()
            self.robot_tf = RobotTf(self, description.load_urdf(), stamp)
        self.clock_offset = 0  # ns, ROS clock - monotonic clock (see _stamp)
        self._sync_clock()
        self.timer_origin = time.monotonic()
        # monotonic s of physics step 0, on the timer's grid; steps taken since
        self.start_wall, self.steps = self.timer_origin, 0
        self.create_timer(self.period, self.on_tick, clock=steady_clock())  # as timer_origin
        self.get_logger().info(
            f'sim_robot: backend {get("backend")}, physics dt {self.backend.dt} s, '
            f'publishing at {get("publish_rate")} Hz, {self.perturbation}, '
            f'actuator model {get("actuator_file") or "none"}, fixed_base {get("fixed_base")}'
        )
        # last: every middleware thread exists now
        self.get_logger().info(set_cpu_affinity(str(get('cpu_affinity'))))

    def _on_parameters(self, parameters):
        """Allow switching `publishing` at run time (the watchdog test silences the robot)."""
        from rcl_interfaces.msg import SetParametersResult

        for parameter in parameters:
            if parameter.name == 'publishing':
                self.publishing = bool(parameter.value)
        return SetParametersResult(successful=True)

    def on_command(self, msg):
        """Queue a validated /joint_command for use after the configured latency."""
        try:
            command = joint_command.unpack(
                msg.name, msg.position, msg.velocity, msg.effort, msg.header.frame_id
            )
        except ValueError as error:
            self.rejected += 1
            self.get_logger().error(str(error), throttle_duration_sec=1.0)
            return
        self.pending.append((time.monotonic() + self.perturbation.latency, command))

    def on_reset(self, request, response):
        """Put the robot back at the default pose, holding it until the next command."""
        self.backend.reset()
        self.pending.clear()
        self.command = self.command_time = None
        # the physics clock restarts on the timer's grid, as at start-up
        cycles = math.floor((time.monotonic() - self.timer_origin) / self.period)
        self.start_wall, self.steps = self.timer_origin + cycles * self.period, 0
        self._sync_clock()
        response.success, response.message = True, 'robot reset to the default pose'
        return response

    def _active_command(self, now):
        """The command in force at monotonic time now (None: hold the default pose)."""
        while self.pending and self.pending[0][0] <= now:
            _, self.command = self.pending.popleft()
            self.command_time = now
        if self.command is not None and now - self.command_time > self.command_timeout:
            return joint_command.damping(self.command.position, spec.KD, 'TIMEOUT')
        return self.command

    def on_tick(self):
        """Step physics up to this cycle's publish time, then publish the sensors on it.

        The timer wakes publish_lead before the publish time (one period grid, as a robot's
        driver clock); stepping and building the messages happen in the lead and the messages
        leave at the publish time (a short busy wait), so the stream's period does not carry the
        wake-up delay and the physics cost. A late wake-up publishes at once.
        """
        now = grid_publish_time(time.monotonic(), self.timer_origin, self.period, self.lead)
        # Steps up to the publish time. The physics clock starts on the timer's grid, so a tick
        # is publish_lead past a step boundary; a second callback for the same grid point (a
        # late timer) finds nothing due and publishes nothing (each state its own time).
        due = int((now - self.start_wall) / self.backend.dt) - self.steps
        if due > MAX_CATCH_UP_STEPS:  # fell behind: drop the backlog, stay real time
            self.start_wall += (due - MAX_CATCH_UP_STEPS) * self.backend.dt
            due = MAX_CATCH_UP_STEPS
        command = self._active_command(now)
        first_step = self.start_wall + self.steps * self.backend.dt  # monotonic s
        for _ in range(max(0, due)):
            self.backend.step(command)
            self.steps += 1
        physics_time = self.start_wall + self.steps * self.backend.dt  # of the state, s
        if self.publishing and due > 0:  # no new physics, no new sample (stamps stay unique)
            if command is not None and self.applied_pub is not None:
                self._publish_applied(command, first_step)
            state = self.backend.state()
            if all(np.all(np.isfinite(v)) for v in vars(state).values()):
                self.publish(state, now, physics_time)
            else:  # say so and stay silent: the policy node's watchdog takes over
                self.get_logger().error(
                    'simulation state is not finite', throttle_duration_sec=1.0
                )

    def _sync_clock(self):
        """Measure the ROS clock's offset from the monotonic one (ns).

        The tightest of a few readings bracketed by monotonic ones: a preemption between the
        two reads would otherwise shift every stamp after it.
        """
        best = None
        for _ in range(20):
            before = time.monotonic_ns()
            ros = self.get_clock().now().nanoseconds
            after = time.monotonic_ns()
            if best is None or after - before < best[0]:
                best = (after - before, ros - (before + after) // 2)
        self.clock_offset = best[1]

    def _stamp(self, monotonic_time):
        """The ROS time (builtin Time) of a monotonic time s, by the offset _sync_clock took.

        One offset for the node's life keeps stamps on the physics grid exactly; a step of the
        ROS clock afterwards (an NTP correction) is not followed until ~/reset.
        """
        from rclpy.time import Time

        nanoseconds = int(round(monotonic_time * 1e9)) + self.clock_offset
        return Time(nanoseconds=nanoseconds, clock_type=self.get_clock().clock_type).to_msg()

    def _publish_applied(self, command, monotonic_time):
        """Publish the command the drives took in at monotonic_time (s) on APPLIED_TOPIC."""
        msg = JointState()
        msg.name, msg.position, msg.velocity, msg.effort = joint_command.pack(command)
        msg.header.frame_id = command.mode
        msg.header.stamp = self._stamp(monotonic_time)
        self.applied_pub.publish(msg)

    def publish(self, state, publish_at=0.0, physics_time=None):
        """Publish /joint_states, /imu and /odom for one RobotState, not before publish_at (s).

        physics_time: monotonic s of the physics the state shows (its stamp); None: now.
        """
        joints = JointState()
        joints.name = list(spec.JOINT_NAMES)
        q, qd, tau = state.q, state.qd, state.tau
        if np.any(self.joint_noise > 0):  # (3, 12) draws: q, qd, tau
            noise = self.noise_rng.standard_normal((3, q.size)) * self.joint_noise[:, None]
            q, qd, tau = q + noise[0], qd + noise[1], tau + noise[2]
        joints.position, joints.velocity, joints.effort = q.tolist(), qd.tolist(), tau.tolist()
        w, x, y, z = state.base_quat.tolist()
        imu = Imu()
        imu.header.frame_id = 'base'
        imu.orientation.w, imu.orientation.x, imu.orientation.y, imu.orientation.z = w, x, y, z
        av, la = state.base_ang_vel.tolist(), state.base_lin_acc.tolist()
        imu.angular_velocity.x, imu.angular_velocity.y, imu.angular_velocity.z = av
        imu.linear_acceleration.x, imu.linear_acceleration.y, imu.linear_acceleration.z = la
        odom = Odometry()
        odom.header.frame_id, odom.child_frame_id = 'odom', 'base'
        pose = odom.pose.pose
        pose.position.x, pose.position.y, pose.position.z = state.base_pos.tolist()
        pose.orientation.w, pose.orientation.x = w, x
        pose.orientation.y, pose.orientation.z = y, z
        twist = odom.twist.twist  # in child_frame_id (base): body frame
        twist.linear.x, twist.linear.y, twist.linear.z = state.base_lin_vel.tolist()
        twist.angular.x, twist.angular.y, twist.angular.z = av
        while time.monotonic() < publish_at:  # at most publish_lead
            pass
        stamp = self._stamp(time.monotonic() if physics_time is None else physics_time)
        joints.header.stamp = imu.header.stamp = odom.header.stamp = stamp
        self.joint_pub.publish(joints)
        self.imu_pub.publish(imu)
        self.odom_pub.publish(odom)
        if self.robot_tf is not None and self.robot_tf.live:  # after the sensors: off their clock
            positions = dict(zip(spec.JOINT_NAMES, state.q.tolist()))
            self.robot_tf.publish(stamp, positions, (state.base_pos, state.base_quat))


def _actuator_params(path, delay):
    """ActuatorParams from the YAML at path (None for ''), the delay overridden when >= 0."""
    if not path:
        if delay >= 0.0:
            raise ValueError('actuator_delay needs actuator_file (the actuator model)')
        return None
    from loco_train.actuator import model  # numpy + yaml only

    params = model.read(path)
    return params.with_values(delay=delay) if delay >= 0.0 else params


def main(args=None):
    """Run sim_robot until Ctrl-C or SIGTERM; exit 2 with the reason when the backend fails."""
    refused = (SimBackendError, ValueError, OSError)  # OSError: the URDF is not installed
    return run_node('sim_robot', SimRobot, refused=refused, args=args)


if __name__ == '__main__':
    sys.exit(main())
