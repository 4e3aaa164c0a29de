"""excitation: drives the joints through an identification schedule on /joint_command (thin node).

Publishes chirps, step trains and slow ramps around the default pose
(loco_train.actuator.excitation: inside the joint-limit margins and the torque limits) in the
/joint_command layout with the gains, at ``rate`` Hz for ``duration`` s, then holds the default
pose for ``hold_after`` s and exits. It starts once ``wait_for_subscribers`` subscribers listen
on /joint_command, with ``lead_in`` s at the default pose (the fit's first command history).
Only for a robot hanging in the air (sim_robot ``fixed_base:=true``, or the real robot on its
hoist): it refuses to start unless
``identification_mode:=true``. Record /joint_command and /joint_states with the recorder and fit
them with ``loco-train fit-actuator``.
"""

import sys
import time

import rclpy
from rclpy.node import Node
from sensor_msgs.msg import JointState

from loco_policy.control import joint_command
from loco_policy.nodes import run_node

MODE = 'IDENTIFY'
"""header.frame_id of the excitation's commands."""


class ExcitationRefused(ValueError):
    """The node's parameters do not allow exciting the drives."""


class ExcitationNode(Node):
    """Publishes the schedule's command at a fixed rate."""

    def __init__(self):
        """Declare parameters, refuse without identification mode, plan the schedule."""
        super().__init__('excitation')
        self.declare_parameter('identification_mode', False)
        self.declare_parameter('duration', 20.0)  # s
        self.declare_parameter('rate', 400.0)  # Hz
        self.declare_parameter('kind', 'mixed')  # chirp | steps | ramps | mixed
        self.declare_parameter('amplitude', 0.15)  # rad, cut by limit margins and torque
        self.declare_parameter('f_start', 0.1)  # Hz
        self.declare_parameter('f_end', 10.0)  # Hz
        self.declare_parameter('margin', 0.1)  # rad from the joint range
        self.declare_parameter('seed', 0)
        self.declare_parameter('hold_after', 1.0)  # s at the default pose before exiting
        self.declare_parameter('lead_in', 0.5)  # s at the default pose before the schedule
        self.declare_parameter('wait_for_subscribers', 1)  # start once this many listen
        get = lambda name: self.get_parameter(name).value  # noqa: E731
        if not bool(get('identification_mode')):
            raise ExcitationRefused(
                'refusing to excite the drives: identification_mode is false. The excitation '
                'moves every joint through chirps, steps and ramps and is only for a robot '
                'hanging in the air (sim_robot fixed_base:=true, or on its hoist); start it '
                'with identification_mode:=true.'
            )
        from loco_train.actuator.excitation import Excitation, ExcitationConfig  # numpy only

        config = ExcitationConfig(
            duration=float(get('duration')), kind=str(get('kind')),
            amplitude=float(get('amplitude')), f_start=float(get('f_start')),
            f_end=float(get('f_end')), margin=float(get('margin')), seed=int(get('seed')),
        )  # fmt: skip
        self.schedule = Excitation(config)
        self.hold_after = float(get('hold_after'))
        self.lead_in = max(0.0, float(get('lead_in')))
        self.subscribers = int(get('wait_for_subscribers'))
        self.publisher = self.create_publisher(JointState, '/joint_command', 10)
        self.start = None  # monotonic s of the schedule's t = 0, once the subscribers are there
        self.done = False
        self.create_timer(1.0 / float(get('rate')), self.on_tick)
        self.get_logger().info(
            f'excitation: {config.kind} for {config.duration} s at {get("rate")} Hz, amplitudes '
            f'{self.schedule.amplitude.round(3).tolist()} rad'
        )

    def on_tick(self):
        """Publish the command in force now; exit hold_after s after the schedule's end."""
        if self.start is None:
            if self.publisher.get_subscription_count() < self.subscribers:
                return
            self.start = time.monotonic() + self.lead_in
            self.get_logger().info('excitation: subscribers present, starting')
        t = time.monotonic() - self.start
        duration = self.schedule.config.duration
        command = self.schedule.command(min(t, duration + 1.0), MODE)  # t < 0: default pose
        if t >= duration and not self.done:
            self.done = True
            self.get_logger().info('excitation done: holding the default pose')
        msg = JointState()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = MODE
        msg.name, msg.position, msg.velocity, msg.effort = joint_command.pack(command)
        self.publisher.publish(msg)
        if t >= duration + self.hold_after:
            self.get_logger().info('excitation finished')
            rclpy.try_shutdown()


def main(args=None):
    """Run the excitation; exit 2 with the reason when it refuses."""
    return run_node('excitation', ExcitationNode, refused=(ExcitationRefused, ValueError),
                    args=args)  # fmt: skip


if __name__ == '__main__':
    sys.exit(main())
