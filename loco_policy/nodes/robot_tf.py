"""A node's /robot_description (the URDF, transient local) and, with tf2_msgs, its /tf frames.

/robot_description is std_msgs/String, reliable, transient local, depth 1: a viewer that joins
late still gets it. /tf and /tf_static are tf2_msgs/TFMessage; tf2_msgs has no wheel on the
package registries, so they are published only where it is importable (a ROS 2 install); without
it the recorder computes both into its bags (loco_policy.tools.bag_tf).
"""

from geometry_msgs.msg import TransformStamped
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from loco_policy.description.kinematics import Frame, Kinematics

LATCHED = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
"""QoS of /robot_description and /tf_static (as robot_state_publisher offers them)."""


def tf_message_class():
    """tf2_msgs' TFMessage class, or None where tf2_msgs is not installed."""
    try:
        from tf2_msgs.msg import TFMessage
    except ImportError:
        return None
    return TFMessage


def transform_stamped(frame, stamp):
    """geometry_msgs/TransformStamped of a kinematics Frame at stamp (builtin_interfaces/Time)."""
    msg = TransformStamped()
    msg.header.stamp, msg.header.frame_id, msg.child_frame_id = stamp, frame.parent, frame.child
    t, r = msg.transform.translation, msg.transform.rotation
    t.x, t.y, t.z = (float(v) for v in frame.translation)
    r.w, r.x, r.y, r.z = (float(v) for v in frame.rotation)
    return msg


class RobotTf:
    """Publishes the URDF once (latched) and the robot's frames when tf2_msgs is importable."""

    def __init__(self, node, urdf_text, stamp):
        """Create the publishers on node; publish /robot_description and /tf_static at stamp.

        Raise ValueError when the URDF text is not a single-tree URDF.
        """
        self.kinematics = Kinematics.from_urdf(urdf_text)
        self.description_pub = node.create_publisher(String, '/robot_description', LATCHED)
        self.description_pub.publish(String(data=urdf_text))
        self.message = tf_message_class()
        self.tf_pub = None
        if self.message is None:
            node.get_logger().info(
                '/robot_description published; /tf not published (tf2_msgs is not installed): '
                'the recorder computes /tf and /tf_static into its bags'
            )
            return
        self.tf_pub = node.create_publisher(self.message, '/tf', 100)
        self.static_pub = node.create_publisher(self.message, '/tf_static', LATCHED)
        self.static_pub.publish(self._tf(self.kinematics.static_frames(), stamp))

    @property
    def live(self):
        """True when /tf is published (tf2_msgs importable)."""
        return self.tf_pub is not None

    def _tf(self, frames, stamp):
        """A TFMessage of frames at stamp."""
        return self.message(transforms=[transform_stamped(f, stamp) for f in frames])

    def publish(self, stamp, positions, base=None, odom_frame='odom'):
        """Publish /tf: the joints in positions {name: rad} and, given base, odom -> base.

        base: (position (3,) m, quaternion w-x-y-z (4,)) of the base in odom_frame, or None.
        """
        if self.tf_pub is None:
            return
        frames = self.kinematics.joint_frames(positions)
        if base is not None:
            frames.append(Frame(odom_frame, self.kinematics.root, base[0], base[1]))
        self.tf_pub.publish(self._tf(frames, stamp))
