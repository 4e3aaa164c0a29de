"""Split rosbag2 MCAP writing through the `rosbags` library, complete on disk at every flush.

Each split is a rosbag2 bag directory ``<root>/<root name>_<index:04d>/`` holding one MCAP file
and its metadata.yaml, closed when it reaches ``split_size`` bytes or ``split_duration`` seconds.

The open split is a complete bag on disk from its first message on, brought up to date at
every flush (every ``flush_period`` seconds, or when asked). A flush lays down, in one write
at the end of the data, what closing the split at that moment would: the messages gathered
since the last flush as one MCAP chunk with its message indexes, rosbags' metadata record,
then the summary (schemas, channels, chunk indexes, statistics) and the footer. The file is
fsynced and metadata.yaml replaced atomically (temp file, fsync, rename) with the counts of
what is on disk. The next chunk overwrites that summary; closing the split is a last flush.
So after a SIGKILL or a power cut, every split, including the one being written, reads in
rosbags and ``ros2 bag`` (indexed, in time order) as if closed at the last flush: the loss is
what arrived after it, at most ``flush_period`` seconds.

Only a kill inside a flush's write tears the tail (and a kill between the MCAP's fsync and the
rename leaves metadata.yaml one flush behind); `loco_policy.tools.bag_recover`
(``loco-bag-recover DIR``, also run by the recorder on its output at start) cuts such a tail
and rewrites the split with true counts. While a split is open its MCAP file holds an
exclusive flock, so recovery never touches the split of a running writer; the kernel drops the
lock when the writer dies.
"""

from collections import defaultdict
import fcntl
from io import BytesIO, StringIO
import os
import re
import struct
import time
import zlib

from rosbags.interfaces import ConnectionExtRosbag2
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.rosbag2.metadata import dump_qos_v9
from rosbags.typesys import get_typestore, Stores
from ruamel.yaml import YAML

from loco_policy.tools.durable import write_all

TYPESTORE = Stores.ROS2_KILTED
"""Message definitions stored in the bags (the ROS distribution of the rclpy wheels)."""

BAG_VERSION = 9
"""rosbag2 metadata version written (rosbags' latest; what rosbags writes for closed splits)."""

MAGIC = b'\x89MCAP0\r\n'
"""First and last 8 bytes of an MCAP file."""

CHUNK_SIZE = 2**20
"""Bytes of records at which rosbags' McapWriter closes a chunk; flushes come before."""


class _OffsetBuffer(BytesIO):
    """In-memory stand-in for the MCAP file: tell() counts from file offset base; never closes."""

    def __init__(self, base):
        """Start empty at file offset base (bytes)."""
        super().__init__()
        self.base = base

    def tell(self):
        """File offset this buffer's end will have once written (bytes)."""
        return self.base + super().tell()

    def close(self):
        """Keep the content: rosbags' McapWriter.close() closes its file last."""


class SplitBagWriter:
    """Writes serialized (CDR) messages into size- or duration-limited MCAP bag splits."""

    def __init__(
        self, root, split_size=64 * 2**20, split_duration=60.0, flush_period=1.0, fsync=True
    ):
        """Write splits under root (created).

        Limits in bytes and seconds (<= 0: unlimited); flush_period (s, <= 0: only when a split
        closes) bounds what a crash loses; fsync makes each flush survive a power cut too.
        Numbering continues after the splits already in root.
        """
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.split_size = split_size
        self.split_duration = split_duration
        self.flush_period = flush_period
        self.fsync = fsync
        self.typestore = get_typestore(TYPESTORE)
        self.topics = {}  # topic -> msgtype ('sensor_msgs/msg/JointState')
        self.writer = None
        self.path = None
        self.connections = {}
        self.index = next_split_index(self.root)
        self.closed_splits = []
        """Paths of the splits closed so far (each a complete bag)."""
        self.flushes = 0
        """Flushes that wrote data to disk so far."""
        self.flush_seconds = 0.0
        """Time spent in those flushes (s): their cost on the writing thread."""
        self._bytes = 0
        self._first_ns = None
        self._pending = 0  # messages written since the last flush
        self._new_topic = False  # a topic declared since the last flush
        self._on_disk = False  # whether the open split has been flushed once
        self._last_flush = time.monotonic()  # s
        self.preamble = {}
        """topic -> serialized message written into every split before anything else (latched
        topics: a split then opens on its own in a viewer)."""
        self._split_topics = set()  # topics written into the open split

    def add_topic(self, topic, msgtype):
        """Declare a topic and its message type before writing it."""
        if msgtype not in self.typestore.types:
            raise ValueError(f'message type {msgtype} unknown to the rosbags typestore')
        self.topics[topic] = msgtype
        if self.writer is not None:
            self.connections[topic] = self.writer.add_connection(
                topic, msgtype, typestore=self.typestore
            )
            self._new_topic = True

    def _open(self):
        """Start the next split (on disk with its first message), its MCAP file locked."""
        name = f'{os.path.basename(self.root)}_{self.index:04d}'
        self.path = os.path.join(self.root, name)
        self.writer = Writer(self.path, version=BAG_VERSION, storage_plugin=StoragePlugin.MCAP)
        self.writer.open()
        fcntl.flock(self.writer.storage.bio.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.connections = {
            topic: self.writer.add_connection(topic, msgtype, typestore=self.typestore)
            for topic, msgtype in self.topics.items()
        }
        self._bytes, self._first_ns, self._on_disk = 0, None, False
        self._tail = None  # bytes from the last flush's summary to the end: what a failed
        # flush writes back, so that the file stays the bag of that flush

    def write(self, topic, timestamp_ns, data):
        """Write one serialized message at a time stamp (ns), rotating splits at the limits.

        A split's first message is flushed at once; later ones when the last flush is
        flush_period old.
        """
        if self.writer is not None and self._full(timestamp_ns):
            self.close_split()
        if self.writer is None:
            self._open()
            for other, payload in self.preamble.items():
                if other != topic:  # a latched message that opens a split is its own copy
                    self._write_one(other, timestamp_ns, payload)
        self._write_one(topic, timestamp_ns, data)

    def _write_one(self, topic, timestamp_ns, data):
        """Write one message into the open split; flush as write() says."""
        if self._first_ns is None:
            self._first_ns = timestamp_ns
        storage = self.writer.storage
        if storage.chunk.msgs and storage.chunk.bio.tell() + len(data) + 64 > CHUNK_SIZE:
            self.flush()  # before rosbags would close the chunk itself
        chunks = len(storage.chunks)
        self.writer.write(self.connections[topic], timestamp_ns, data)
        self._split_topics.add(topic)
        self._bytes += len(data)
        self._pending += 1
        if len(storage.chunks) != chunks or not self._on_disk:
            # one message over CHUNK_SIZE, chunked by rosbags over the summary; or a new split
            self.flush()
        elif self.flush_period > 0 and time.monotonic() - self._last_flush >= self.flush_period:
            self.flush()

    def flush(self, last=False):
        """Put every message written so far on disk as a complete bag; return True if any.

        Cost: one write() of the new chunk and the summary, fsync of the MCAP file, and
        metadata.yaml rewritten (YAML dump, temp file, fsync, rename, fsync of the directory).
        last: the split's closing flush, which writes a topic declared but never written as
        rosbags' close does (into a chunk of its own).
        """
        self._last_flush = time.monotonic()
        if self.writer is None or not (self._pending or self._new_topic):
            return False
        started = time.perf_counter()
        info = bag_metadata(self.writer)['rosbag2_bagfile_information']
        inner = _yaml(info)
        storage = self.writer.storage  # rosbags' McapWriter: its pending chunk, lists, file
        file, pending = storage.bio, storage.chunk
        records = _OffsetBuffer(file.tell())
        hide = not pending.msgs and not last
        storage.bio = records
        try:
            if pending.msgs:
                chunk_at = records.tell() - records.base
                storage.close_chunk()  # the chunk record and its message indexes
                with pending.bio.getbuffer() as raw:  # CRC-32 of the records: readers check it
                    crc = zlib.crc32(raw)
                with records.getbuffer() as view:  # rosbags writes 0 (none)
                    struct.pack_into('<I', view, chunk_at + 33, crc)  # op, length, 3 x u64
            elif hide:  # only schemas and channels of a new topic: wait for its first message
                storage.chunk = type(pending)(2**63 - 1, 0, BytesIO(), defaultdict(list))
            summary = records.tell()
            storage.close(self.writer.version, inner.strip())  # metadata record, summary, footer
        finally:
            storage.bio = file
            if hide:
                storage.chunk = pending
        data, at = records.getvalue(), file.tell()  # at: where the last flush's summary starts
        file.flush()  # nothing buffered: the bytes go out through the descriptor below
        fd = file.fileno()
        try:
            write_all(fd, data, at)  # one write: a kill tears at most its tail
            os.ftruncate(fd, at + len(data))
            if self.fsync:
                os.fsync(fd)
        except OSError:  # a full disk mid-write: put the last flush's summary back in place
            self._restore_tail(fd, at)
            raise
        self._tail = data[summary - at :]
        file.seek(summary)  # the next chunk overwrites the metadata record and the summary
        text = 'rosbag2_bagfile_information:\n' + ''.join(
            f'  {line}' if line.strip() else line for line in inner.splitlines(keepends=True)
        )  # what YAML dumps for the enclosing mapping; spares a second dump
        write_text_atomic(self.writer.metapath, text, self.fsync)
        if self.fsync and not self._on_disk:
            fsync_path(self.root)  # the split directory's name
        self._pending, self._new_topic, self._on_disk = 0, False, True
        self.flushes += 1
        self.flush_seconds += time.perf_counter() - started
        return True

    def _restore_tail(self, fd, at):
        """Write the last flush's summary and footer back at `at` and cut the file there.

        The file already holds those bytes' blocks, so a full disk takes them; the file then
        reads as the last flush's bag.
        """
        if self._tail is None:
            return
        try:
            write_all(fd, self._tail, at)
            os.ftruncate(fd, at + len(self._tail))
            os.fsync(fd)
        except OSError:
            pass  # the file is torn: loco-bag-recover cuts it back to its last whole chunk

    def flush_if_due(self):
        """Flush when the last flush is flush_period old (a timer's callback); True if flushed."""
        if self.flush_period > 0 and time.monotonic() - self._last_flush >= self.flush_period:
            return self.flush()
        return False

    def close_split(self):
        """Close the current split, if one is open: a last flush, then the file is closed."""
        if self.writer is not None:
            missing = [t for t in self.preamble if t not in self._split_topics]
            if missing:  # the split's opening was cut short (a stop between two writes)
                stamp = self.writer.max_timestamp
                for topic in missing:
                    self._write_one(topic, stamp, self.preamble[topic])
            self.flush(last=True)
            self._split_topics = set()
            self.writer.storage.bio.close()  # releases the lock
            self.writer.storage = None
            self.closed_splits.append(self.path)
            self.writer = None
            self.index += 1

    def _full(self, timestamp_ns):
        """True when the open split reached its size or duration limit."""
        too_big = self.split_size > 0 and self._bytes >= self.split_size
        elapsed = (timestamp_ns - self._first_ns) * 1e-9 if self._first_ns is not None else 0.0
        too_long = self.split_duration > 0 and elapsed >= self.split_duration
        return too_big or too_long

    def close(self):
        """Close the open split; the writer stays usable (a later write opens a new split)."""
        self.close_split()


def bag_metadata(writer):
    """The metadata.yaml mapping rosbags' Writer.close writes, for an open (uncompressed) Writer.

    Built from the writer's own state (connections, counts, first and last stamps), field by
    field as rosbags writes it.
    """
    start = writer.min_timestamp
    duration = max(0, writer.max_timestamp - writer.min_timestamp)
    count = sum(writer.counts.values())
    name = writer.storage.path.name
    topics = [
        {
            'topic_metadata': {
                'name': c.topic,
                'type': c.msgtype,
                'serialization_format': c.ext.serialization_format,
                'offered_qos_profiles': dump_qos_v9(c.ext.offered_qos_profiles),
                'type_description_hash': c.digest,
            },
            'message_count': writer.counts[c.id],
        }
        for c in writer.connections
        if isinstance(c.ext, ConnectionExtRosbag2)
    ]
    return {
        'rosbag2_bagfile_information': {
            'version': writer.version,
            'storage_identifier': 'mcap',
            'relative_file_paths': [name],
            'duration': {'nanoseconds': duration},
            'starting_time': {'nanoseconds_since_epoch': start},
            'message_count': count,
            'topics_with_message_count': topics,
            'compression_format': '',
            'compression_mode': '',
            'files': [
                {
                    'path': name,
                    'starting_time': {'nanoseconds_since_epoch': start},
                    'duration': {'nanoseconds': duration},
                    'message_count': count,
                }
            ],
            'custom_data': writer.custom_data or None,
            'ros_distro': 'rosbags',
        }
    }


def _yaml(data):
    """Block-style YAML text of data, dumped as rosbags dumps bag metadata."""
    yaml = YAML(typ='safe')
    yaml.default_flow_style = False
    text = StringIO()
    yaml.dump(data, text)
    return text.getvalue()


def write_text_atomic(path, text, fsync=True):
    """Replace the file at path with text: temp file, fsync, rename, fsync of the directory."""
    path = os.fspath(path)
    tmp = path + '.tmp'
    with open(tmp, 'w', encoding='utf8') as handle:
        handle.write(text)
        handle.flush()
        if fsync:
            os.fsync(handle.fileno())
    os.replace(tmp, path)
    if fsync:
        fsync_path(os.path.dirname(path))


def fsync_path(path):
    """Flush a file or directory (fsync) by path: a directory's new names survive a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def next_split_index(root):
    """The index after the highest ``<root name>_NNNN`` split directory in root (0 if none)."""
    pattern = re.compile(re.escape(os.path.basename(root)) + r'_(\d{4,})')
    indexes = [
        int(match.group(1))
        for name in (os.listdir(root) if os.path.isdir(root) else [])
        if (match := pattern.fullmatch(name))
    ]
    return max(indexes, default=-1) + 1


def read_counts(split):
    """Return {topic: message count} of one bag split, read with rosbags' Reader."""
    from rosbags.rosbag2 import Reader

    counts = {}
    with Reader(split) as reader:
        for connection, _, _ in reader.messages():
            counts[connection.topic] = counts.get(connection.topic, 0) + 1
    return counts


def list_splits(root):
    """Return the split directories under root that hold a metadata.yaml, sorted.

    The open split of a running (or killed) writer is among them: a bag from its first message.
    """
    if not os.path.isdir(root):
        return []
    entries = (os.path.join(root, name) for name in sorted(os.listdir(root)))
    return [p for p in entries if os.path.isfile(os.path.join(p, 'metadata.yaml'))]
