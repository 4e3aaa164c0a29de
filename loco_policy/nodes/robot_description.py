"""robot_description: the URDF and its frames on a robot PC, without sim_robot (thin rclpy node).

Publishes /robot_description (std_msgs/String, transient local) with the package's URDF, or the
file of the `urdf` parameter, and, where tf2_msgs is importable, /tf_static for the fixed joints
and /tf per /joint_states message (what robot_state_publisher does) plus odom -> base per /odom
message (`odom_tf`). Without tf2_msgs only /robot_description goes out; the recorder computes
/tf and /tf_static into its bags from the same topics.
"""

import sys

from nav_msgs.msg import Odometry
import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState

from loco_policy import description
from loco_policy.nodes import run_node
from loco_policy.nodes.robot_tf import RobotTf


class RobotDescription(Node):
    """Latches the URDF; turns /joint_states and /odom into /tf where tf2_msgs is installed."""

    def __init__(self):
        """Declare parameters, read the URDF, publish it, subscribe the robot's state."""
        super().__init__('robot_description')
        self.declare_parameter('urdf', '')  # URDF file; '' = the package's anymal_c.urdf
        self.declare_parameter('odom_tf', True)  # also odom -> base from /odom
        path = self.get_parameter('urdf').value or description.urdf_path()
        text = description.load_urdf(path)
        self.tf = RobotTf(self, text, self.get_clock().now().to_msg())
        self.get_logger().info(
            f'robot_description: {path} ({len(text)} chars, {len(self.tf.kinematics.links)} links)'
        )
        if self.tf.live:
            self.create_subscription(JointState, '/joint_states', self.on_joint_states, 10)
            if self.get_parameter('odom_tf').value:
                self.create_subscription(Odometry, '/odom', self.on_odom, 10)

    def on_joint_states(self, msg):
        """Publish the joints' frames at the message's stamp (names beyond positions ignored)."""
        self.tf.publish(msg.header.stamp, dict(zip(msg.name, msg.position)))

    def on_odom(self, msg):
        """Publish odom -> base at the message's stamp."""
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        base = (np.array([p.x, p.y, p.z]), np.array([q.w, q.x, q.y, q.z]))
        self.tf.publish(msg.header.stamp, {}, base, msg.header.frame_id or 'odom')


def main(args=None):
    """Run until Ctrl-C or SIGTERM; exit 2 when the URDF is missing or malformed."""
    return run_node(
        'robot_description', RobotDescription, refused=(OSError, ValueError), args=args
    )


if __name__ == '__main__':
    sys.exit(main())
