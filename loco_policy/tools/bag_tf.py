"""/tf and /tf_static for a bag, computed from its /joint_states, /odom and /robot_description.

A viewer (Foxglove, RViz) shows a robot from its URDF (/robot_description) and its TF tree. Where
tf2_msgs is not installed (the pip-installed deployment has no tf2_msgs wheel), no node can
publish /tf over DDS, so the recorder writes the frames into the bag itself: per /joint_states
message the joints' transforms (what robot_state_publisher publishes), per /odom message the
base pose (odom -> base), and once per split the fixed joints' transforms on /tf_static. The
messages are serialised by rosbags' typestore, which knows tf2_msgs/msg/TFMessage. ROS-free:
the messages fed in are read by attribute (rclpy and rosbags messages alike).
"""

import importlib.util

import numpy as np

from loco_policy.description.kinematics import Frame, Kinematics

TF_TYPE = 'tf2_msgs/msg/TFMessage'
"""Message type of /tf and /tf_static."""

TF_TOPICS = ('/tf', '/tf_static')
"""The topics written from the robot's state."""

SOURCES = ('/joint_states', '/odom', '/robot_description')
"""The topics the frames are computed from."""


def tf_importable():
    """True where the tf2_msgs Python package (a ROS 2 install) can be imported."""
    return importlib.util.find_spec('tf2_msgs') is not None


def derived_topics(topics, importable=None):
    """The TF topics among `topics` to compute rather than subscribe (all, unless tf2_msgs is)."""
    importable = tf_importable() if importable is None else importable
    return () if importable else tuple(t for t in TF_TOPICS if t in topics)


class BagTf:
    """Builds serialised TFMessages from robot-state messages, one source message at a time."""

    def __init__(self, urdf_text, typestore, topics=TF_TOPICS):
        """Kinematics of the URDF; write the TF topics in `topics` only; raise ValueError."""
        self.kinematics = Kinematics.from_urdf(urdf_text)
        self.urdf_text = urdf_text
        self.types = typestore.types
        self.typestore = typestore
        self.topics = tuple(topics)
        self.static_due = '/tf_static' in self.topics
        """True until /tf_static has been built for the current description."""
        self.error = None
        """Why the last /robot_description was not used (None: it was, or none came)."""

    def _transform(self, sec, nanosec, frame):
        """One geometry_msgs/TransformStamped (rosbags class) of a kinematics Frame."""
        t = self.types
        w, x, y, z = (float(v) for v in frame.rotation)
        return t['geometry_msgs/msg/TransformStamped'](
            header=t['std_msgs/msg/Header'](
                stamp=t['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec),
                frame_id=frame.parent,
            ),
            child_frame_id=frame.child,
            transform=t['geometry_msgs/msg/Transform'](
                translation=t['geometry_msgs/msg/Vector3'](*(float(v) for v in frame.translation)),
                rotation=t['geometry_msgs/msg/Quaternion'](x=x, y=y, z=z, w=w),
            ),
        )

    def serialize(self, sec, nanosec, frames):
        """CDR bytes of a TFMessage holding the frames, all stamped sec, nanosec."""
        message = self.types[TF_TYPE](
            transforms=[self._transform(sec, nanosec, frame) for frame in frames]
        )
        return bytes(self.typestore.serialize_cdr(message, TF_TYPE))

    def feed(self, topic, msg):
        """The (topic, CDR bytes) to write after one message of a source topic (maybe none).

        /robot_description replaces the kinematics (when its URDF parses: else `error` says why
        and the previous one stays) and makes /tf_static due again.
        """
        out = []
        if topic == '/robot_description':
            if msg.data != self.urdf_text:
                try:
                    self.kinematics = Kinematics.from_urdf(msg.data)
                except ValueError as error:
                    self.error = str(error)
                    return out
                self.urdf_text, self.error = msg.data, None
                self.static_due = '/tf_static' in self.topics
            return out
        if topic not in ('/joint_states', '/odom'):
            return out
        sec, nanosec = msg.header.stamp.sec, msg.header.stamp.nanosec
        if self.static_due:
            out.append(('/tf_static', self.static_message(sec, nanosec)))
        if '/tf' not in self.topics:
            return out
        if topic == '/joint_states':
            n = min(len(msg.name), len(msg.position))
            frames = self.kinematics.joint_frames(dict(zip(msg.name[:n], msg.position[:n])))
        else:
            frames = [self.odom_frame(msg)]
        if frames:
            out.append(('/tf', self.serialize(sec, nanosec, frames)))
        return out

    def static_message(self, sec, nanosec):
        """CDR bytes of the /tf_static TFMessage (fixed joints); no longer due afterwards."""
        self.static_due = False
        return self.serialize(sec, nanosec, self.kinematics.static_frames())

    def odom_frame(self, msg):
        """The odom -> base Frame of a nav_msgs/Odometry (frames from its header and child)."""
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        return Frame(
            msg.header.frame_id or 'odom',
            msg.child_frame_id or self.kinematics.root,
            np.array([p.x, p.y, p.z]),
            np.array([q.w, q.x, q.y, q.z]),
        )
