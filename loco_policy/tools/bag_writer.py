"""Split rosbag2 MCAP writing through the `rosbags` library (ROS-free).

Each split is a complete rosbag2 bag directory ``<root>/<root name>_<index:04d>/`` holding one
MCAP file and its metadata.yaml, closed when it reaches ``split_size`` bytes or ``split_duration``
seconds. A split is readable (rosbags' Reader, ``ros2 bag info``) as soon as it is closed, so a
recorder killed mid-run loses only the split it was writing.
"""

import os

from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import get_typestore, Stores

TYPESTORE = Stores.ROS2_KILTED
"""Message definitions stored in the bags (the ROS distribution of the rclpy wheels)."""


class SplitBagWriter:
    """Writes serialized (CDR) messages into size- or duration-limited MCAP bag splits."""

    def __init__(self, root, split_size=64 * 2**20, split_duration=60.0):
        """Write splits under root (created); limits in bytes and seconds (<= 0: unlimited)."""
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.split_size = split_size
        self.split_duration = split_duration
        self.typestore = get_typestore(TYPESTORE)
        self.topics = {}  # topic -> msgtype ('sensor_msgs/msg/JointState')
        self.writer = None
        self.connections = {}
        self.index = 0
        self.closed_splits = []
        """Paths of the splits closed so far (each a readable bag)."""
        self._bytes = 0
        self._first_ns = None

    def add_topic(self, topic, msgtype):
        """Declare a topic and its message type before writing it."""
        if msgtype not in self.typestore.types:
            raise ValueError(f'message type {msgtype} unknown to the rosbags typestore')
        self.topics[topic] = msgtype
        if self.writer is not None:
            self.connections[topic] = self.writer.add_connection(
                topic, msgtype, typestore=self.typestore
            )

    def _open(self):
        """Start the next split."""
        name = f'{os.path.basename(self.root)}_{self.index:04d}'
        self.path = os.path.join(self.root, name)
        self.writer = Writer(self.path, version=9, storage_plugin=StoragePlugin.MCAP)
        self.writer.open()
        self.connections = {
            topic: self.writer.add_connection(topic, msgtype, typestore=self.typestore)
            for topic, msgtype in self.topics.items()
        }
        self._bytes, self._first_ns = 0, None

    def close_split(self):
        """Close the current split (writing its metadata.yaml), if one is open."""
        if self.writer is not None:
            self.writer.close()
            self.closed_splits.append(self.path)
            self.writer = None
            self.index += 1

    def write(self, topic, timestamp_ns, data):
        """Write one serialized message at a time stamp (ns), rotating splits at the limits."""
        if self.writer is not None and self._full(timestamp_ns):
            self.close_split()
        if self.writer is None:
            self._open()
        if self._first_ns is None:
            self._first_ns = timestamp_ns
        self.writer.write(self.connections[topic], timestamp_ns, data)
        self._bytes += len(data)

    def _full(self, timestamp_ns):
        """True when the open split reached its size or duration limit."""
        too_big = self.split_size > 0 and self._bytes >= self.split_size
        elapsed = (timestamp_ns - self._first_ns) * 1e-9 if self._first_ns is not None else 0.0
        too_long = self.split_duration > 0 and elapsed >= self.split_duration
        return too_big or too_long

    def close(self):
        """Close the open split; the writer stays usable (a later write opens a new split)."""
        self.close_split()


def read_counts(split):
    """Return {topic: message count} of one bag split, read with rosbags' Reader."""
    from rosbags.rosbag2 import Reader

    counts = {}
    with Reader(split) as reader:
        for connection, _, _ in reader.messages():
            counts[connection.topic] = counts.get(connection.topic, 0) + 1
    return counts


def list_splits(root):
    """Return the split directories under root that hold a metadata.yaml (closed ones), sorted."""
    if not os.path.isdir(root):
        return []
    entries = (os.path.join(root, name) for name in sorted(os.listdir(root)))
    return [p for p in entries if os.path.isfile(os.path.join(p, 'metadata.yaml'))]
