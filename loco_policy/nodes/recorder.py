"""recorder: the robot and command topics to rosbag2 MCAP splits via rosbags (thin rclpy node).

Subscribes each topic of the `topics` parameter with raw (serialized CDR) delivery and writes the
bytes unchanged through loco_policy.tools.bag_writer, splitting by size or duration. On Ctrl-C or
SIGTERM the open split is closed; on SIGKILL only that split is lost.
"""

import importlib
import os
import sys
import time

from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from loco_policy.nodes import run_node
from loco_policy.tools.bag_writer import SplitBagWriter

DEFAULT_TYPES = {
    '/joint_states': 'sensor_msgs/msg/JointState',
    '/imu': 'sensor_msgs/msg/Imu',
    '/odom': 'nav_msgs/msg/Odometry',
    '/cmd_vel': 'geometry_msgs/msg/Twist',
    '/joint_command': 'sensor_msgs/msg/JointState',
    '/policy/status': 'std_msgs/msg/String',
    '/diagnostics': 'diagnostic_msgs/msg/DiagnosticArray',
    '/replay/transitions': 'std_msgs/msg/Float32MultiArray',
}
"""Message type of each topic the recorder knows; others are given as 'topic:pkg/msg/Type'."""

DEFAULT_TOPICS = ['/joint_states', '/imu', '/odom', '/cmd_vel', '/joint_command']


def message_class(msgtype):
    """Import the rclpy message class of 'pkg/msg/Type'."""
    package, _, name = msgtype.split('/')
    return getattr(importlib.import_module(f'{package}.msg'), name)


def parse_topic(entry):
    """Split 'topic' or 'topic:pkg/msg/Type' into (topic, msgtype)."""
    topic, _, msgtype = entry.partition(':')
    msgtype = msgtype or DEFAULT_TYPES.get(topic, '')
    if not msgtype:
        raise ValueError(
            f'recorder: no message type known for {topic}; give it as topic:pkg/msg/T'
        )
    return topic, msgtype


class Recorder(Node):
    """Subscribes raw and writes every message to the split bag writer."""

    def __init__(self):
        """Declare parameters, open the bag root and subscribe."""
        super().__init__('recorder')
        self.declare_parameter('topics', DEFAULT_TOPICS)
        self.declare_parameter('output', '')  # bag root directory; '' = bags/<date-time>
        self.declare_parameter('split_size_mb', 64.0)  # MiB per split (<= 0: unlimited)
        self.declare_parameter('split_duration', 60.0)  # s per split (<= 0: unlimited)
        get = lambda name: self.get_parameter(name).value  # noqa: E731
        output = get('output') or os.path.join('bags', time.strftime('anymal_%Y%m%d_%H%M%S'))
        self.writer = SplitBagWriter(
            output, int(float(get('split_size_mb')) * 2**20), float(get('split_duration'))
        )
        self.counts = {}
        qos = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
        for entry in get('topics'):
            topic, msgtype = parse_topic(entry)
            self.writer.add_topic(topic, msgtype)
            self.create_subscription(
                message_class(msgtype), topic, self._callback(topic), qos, raw=True
            )
        self.get_logger().info(f'recording {list(self.writer.topics)} to {self.writer.root}')

    def _callback(self, topic):
        """Return the raw-message callback of one topic."""

        def write(data):
            self.writer.write(topic, self.get_clock().now().nanoseconds, data)
            self.counts[topic] = self.counts.get(topic, 0) + 1

        return write

    def close(self):
        """Close the open split and log what was written."""
        self.writer.close()
        # print, not the ROS logger: this runs after the context has shut down
        splits = len(self.writer.closed_splits)
        print(f'recorder: {self.counts} in {splits} splits under {self.writer.root}', flush=True)


def main(args=None):
    """Run the recorder until Ctrl-C or SIGTERM, then close the open split."""
    return run_node('recorder', Recorder, on_exit=lambda node: node.close(), args=args)


if __name__ == '__main__':
    sys.exit(main())
