"""recorder: the robot and command topics to rosbag2 MCAP splits via rosbags (thin rclpy node).

Subscribes each topic of the `topics` parameter with raw (serialized CDR) delivery and hands the
bytes to a writer thread, which writes them unchanged through loco_policy.tools.bag_writer,
splitting by size or duration. Every `flush_period` seconds (on message arrival, and on the
thread's quarter-period wake-up when none arrive) the open split is flushed: on disk it is then
the bag that closing it would leave. The writer runs off the main thread because Python raises
Ctrl-C's KeyboardInterrupt there, between any two bytecodes: inside a flush it would leave the
writer's chunk index pointing at bytes never written. On Ctrl-C or SIGTERM the thread writes what
is queued and closes the open split; on SIGKILL or a power cut every split stays readable and
loses only what arrived after the last flush. At start the recorder repairs
(loco_policy.tools.bag_recover) the last split of its output if a killed run left it torn.
"""

import importlib
import os
import queue
import sys
import threading
import time

import rclpy
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message

from loco_policy.description import load_urdf
from loco_policy.nodes import any_type, run_node
from loco_policy.tools.bag_tf import BagTf, derived_topics, SOURCES
from loco_policy.tools.drop_log import DROP_TOPIC, DROP_TYPE, DropLog

DEFAULT_TYPES = {
    '/joint_states': 'sensor_msgs/msg/JointState',
    '/imu': 'sensor_msgs/msg/Imu',
    '/odom': 'nav_msgs/msg/Odometry',
    '/cmd_vel': 'geometry_msgs/msg/Twist',
    '/joint_command': 'sensor_msgs/msg/JointState',
    '/joint_command/applied': 'sensor_msgs/msg/JointState',
    '/policy/status': 'std_msgs/msg/String',
    '/diagnostics': 'diagnostic_msgs/msg/DiagnosticArray',
    '/replay/transitions': 'std_msgs/msg/Float32MultiArray',
    '/robot_description': 'std_msgs/msg/String',
    '/tf': 'tf2_msgs/msg/TFMessage',
    '/tf_static': 'tf2_msgs/msg/TFMessage',
}
"""Message type of each topic the recorder knows; others are given as 'topic:pkg/msg/Type'."""

DEFAULT_TOPICS = [
    '/joint_states', '/imu', '/odom', '/cmd_vel', '/joint_command', '/joint_command/applied',
    '/robot_description', '/tf', '/tf_static',
]  # fmt: skip

LATCHED_TOPICS = ('/robot_description', '/tf_static')
"""Topics published transient local: subscribed so, and repeated at the start of every split.

Where tf2_msgs is not importable, /tf and /tf_static are computed (loco_policy.tools.bag_tf) from
/joint_states, /odom and /robot_description instead of subscribed."""

MAX_QUEUED = 20_000
"""Messages waiting for the writer thread beyond which new ones (latched topics aside) are
dropped, counted and marked in the bag on /recorder/dropped (tools/drop_log.py): a disk that
stalls costs recent messages, not the recorder's memory (about half a minute of the default
topics). The `max_queued` parameter's default."""


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
        # rosbags (tools group) imported here: run_node names the group when it is missing
        from loco_policy.tools.bag_recover import describe, recover_tree
        from loco_policy.tools.bag_writer import SplitBagWriter

        super().__init__('recorder')
        self.declare_parameter('topics', DEFAULT_TOPICS)
        self.declare_parameter('output', '')  # bag root directory; '' = bags/<date-time>
        self.declare_parameter('split_size_mb', 64.0)  # MiB per split (<= 0: unlimited)
        self.declare_parameter('split_duration', 60.0)  # s per split (<= 0: unlimited)
        # s between flushes to disk, the most a crash loses (<= 0: only when a split closes)
        self.declare_parameter('flush_period', 1.0, any_type())
        # messages waiting for the disk beyond which new ones are dropped (and marked)
        self.declare_parameter('max_queued', MAX_QUEUED)
        get = lambda name: self.get_parameter(name).value  # noqa: E731
        output = get('output') or os.path.join('bags', time.strftime('anymal_%Y%m%d_%H%M%S'))
        if os.path.isdir(output):
            for report in recover_tree(output, last_only=True):  # what a killed run left open
                if report['action'] != 'complete':
                    self.get_logger().warn(f'bag-recover {describe(report)}')
        flush_period = float(get('flush_period'))
        self.writer = SplitBagWriter(
            output, int(float(get('split_size_mb')) * 2**20), float(get('split_duration')),
            flush_period,
        )  # fmt: skip
        # (topic, stamp ns, CDR bytes), None to close; put() is safe at any interruption point
        self.queue = queue.SimpleQueue()
        self.error = None  # the writer thread's exception, re-raised by close()
        self.drops = DropLog()  # messages dropped because max_queued waited for the disk
        self.max_queued = max(0, int(get('max_queued')))
        # a quarter period: with no message arriving, data waits at most 1.25 periods; the
        # thread also looks this often whether the main thread is gone
        self._wake = flush_period / 4 if flush_period > 0 else 0.25  # s
        self.counts = {}
        entries = [parse_topic(entry) for entry in get('topics')]
        derived = derived_topics([topic for topic, _ in entries])
        self.tf = BagTf(load_urdf(), self.writer.typestore, derived) if derived else None
        qos = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )  # fmt: skip
        for topic, msgtype in entries:
            self.writer.add_topic(topic, msgtype)
            if topic in derived:
                continue  # tf2_msgs is not importable: computed from the robot's state
            self.create_subscription(
                message_class(msgtype), topic, self._callback(topic, msgtype),
                latched if topic in LATCHED_TOPICS else qos, raw=True,
            )  # fmt: skip
        if DROP_TOPIC not in self.writer.topics:  # where dropped messages are marked
            self.writer.add_topic(DROP_TOPIC, DROP_TYPE)
        if derived:
            self.get_logger().info(f'{derived} computed from {SOURCES} (tf2_msgs not importable)')
        self.get_logger().info(f'recording {list(self.writer.topics)} to {self.writer.root}')
        # not a daemon: the interpreter waits for the last split to be closed before it exits
        self.thread = threading.Thread(target=self._drain, name='bag-writer')
        try:
            self.thread.start()
        except BaseException:  # Ctrl-C inside start(): run_node gets no node to close
            self.queue.put(None)
            raise

    def _callback(self, topic, msgtype):
        """Return the raw-message callback of one topic."""
        decode = message_class(msgtype) if self.tf is not None and topic in SOURCES else None

        def write(data):
            stamp = self.get_clock().now().nanoseconds
            self._enqueue(topic, stamp, data)
            if decode is not None:
                for derived, payload in self.tf.feed(topic, deserialize_message(data, decode)):
                    self._enqueue(derived, stamp, payload)
                if self.tf.error:
                    self.get_logger().error(self.tf.error, throttle_duration_sec=5.0)

        return write

    @property
    def dropped(self):
        """Messages dropped since the start because max_queued waited for the disk."""
        return self.drops.total

    def _enqueue(self, topic, stamp, data):
        """Hand one message to the writer thread, or drop it when max_queued are waiting.

        The first message queued after drops is preceded by their marker (tools/drop_log.py).
        """
        if topic not in LATCHED_TOPICS and self.queue.qsize() >= self.max_queued:
            self.drops.drop(topic, stamp)
            self.get_logger().error(
                f'the disk is behind: {self.dropped} messages dropped', throttle_duration_sec=5.0
            )
            return
        self._mark_drops()
        self.queue.put((topic, stamp, data))

    def _mark_drops(self):
        """Queue the marker of the drops since the last queued message, if any."""
        marker = self.drops.close()
        if marker is not None:
            stamp, text = marker
            message = self.writer.typestore.types[DROP_TYPE](data=text)
            self.queue.put(
                (DROP_TOPIC, stamp, self.writer.typestore.serialize_cdr(message, DROP_TYPE))
            )

    def _drain(self):
        """The writer thread: write queued messages, flush when due, close on None.

        Also closes when the main thread has ended without close() (a second Ctrl-C inside
        run_node's clean-up), so that the interpreter's wait for this thread ends.
        """
        try:
            while True:
                try:
                    item = self.queue.get(timeout=self._wake)
                except queue.Empty:
                    if not threading.main_thread().is_alive():
                        break
                    self.writer.flush_if_due()
                    continue
                if item is None:
                    break
                self._write(*item)
        except BaseException as error:  # a disk error: stop the node, close() re-raises it
            self.error = error
            rclpy.try_shutdown()
        finally:
            try:
                self.writer.close()  # the open split's last flush
            except BaseException as error:
                self.error = self.error or error

    def _write(self, topic, stamp, data):
        """Write one message; every split starts with the latched topics' last ones."""
        if topic in LATCHED_TOPICS:
            self.writer.preamble[topic] = data  # before the write: it may open a split
        self.writer.write(topic, stamp, data)
        self.counts[topic] = self.counts.get(topic, 0) + 1

    def close(self):
        """Write what is queued, close the open split and log what was written."""
        # what is queued goes to disk in one go: no flush per flush_period while draining, the
        # close is the one flush (a backlog drains within the launcher's grace period)
        self.writer.flush_period = 0.0
        self._mark_drops()  # drops the stop cut short are marked too
        self.queue.put(None)
        while self.thread.is_alive():  # a second Ctrl-C does not cut the last flush short
            try:
                self.thread.join()
            except KeyboardInterrupt:
                pass
        if self.error is not None:
            raise self.error
        # print, not the ROS logger: this runs after the context has shut down
        splits = len(self.writer.closed_splits)
        dropped = f', {self.dropped} dropped (disk behind)' if self.dropped else ''
        print(
            f'recorder: {self.counts} in {splits} splits under {self.writer.root}{dropped}',
            flush=True,
        )  # fmt: skip


def main(args=None):
    """Run the recorder until Ctrl-C or SIGTERM, then close the open split."""
    return run_node('recorder', Recorder, on_exit=lambda node: node.close(), args=args)


if __name__ == '__main__':
    sys.exit(main())
