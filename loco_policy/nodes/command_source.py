"""command_source: publishes /cmd_vel from a schedule or a constant command (thin rclpy node).

Parameters: schedule ('name:seconds:vx,vy,wz;...', see loco_policy.tools.command_schedule; '' holds
the constant vx, vy, wz), rate (Hz), loop (repeat the schedule). Publishes zero after the end.
"""

import sys
import time

from geometry_msgs.msg import Twist
from rclpy.node import Node

from loco_policy.nodes import run_node
from loco_policy.tools import command_schedule


class CommandSource(Node):
    """Publishes the scheduled command at a fixed rate."""

    def __init__(self):
        """Declare parameters, parse the schedule, start the timer."""
        super().__init__('command_source')
        self.declare_parameter('schedule', '')
        self.declare_parameter('vx', 0.0)  # m/s, used when schedule is ''
        self.declare_parameter('vy', 0.0)  # m/s
        self.declare_parameter('wz', 0.0)  # rad/s
        self.declare_parameter('rate', 20.0)  # Hz
        self.declare_parameter('loop', False)
        get = lambda name: self.get_parameter(name).value  # noqa: E731
        text = get('schedule') or f'constant:1e9:{get("vx")},{get("vy")},{get("wz")}'
        self.schedule = command_schedule.parse(text)
        self.loop = bool(get('loop'))
        self.publisher = self.create_publisher(Twist, '/cmd_vel', 10)
        self.start = time.monotonic()
        self.segment = None
        self.create_timer(1.0 / float(get('rate')), self.on_tick)

    def on_tick(self):
        """Publish the command in force now; log segment changes."""
        t = time.monotonic() - self.start
        if self.loop:
            t %= command_schedule.total(self.schedule)
        segment, command = command_schedule.at(self.schedule, t)
        if segment is not self.segment:
            self.segment = segment
            name = segment.name if segment else 'end (zero command)'
            self.get_logger().info(f'segment {name}: {command.tolist()}')
        msg = Twist()
        msg.linear.x, msg.linear.y, msg.angular.z = (float(v) for v in command)
        self.publisher.publish(msg)


def main(args=None):
    """Run command_source until Ctrl-C or SIGTERM."""
    return run_node('command_source', CommandSource, args=args)


if __name__ == '__main__':
    sys.exit(main())
