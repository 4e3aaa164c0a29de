"""SplitBagWriter: splits by duration and size; the open split a complete bag at every flush."""

import os
from pathlib import Path
import time

import numpy as np
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.typesys import get_typestore
from ruamel.yaml import YAML

from loco_policy.tools.bag_recover import recover_tree, scan_mcap
from loco_policy.tools.bag_writer import list_splits, read_counts, SplitBagWriter, TYPESTORE


def joint_state_cdr(typestore, i):
    JointState = typestore.types['sensor_msgs/msg/JointState']
    Header = typestore.types['std_msgs/msg/Header']
    Time = typestore.types['builtin_interfaces/msg/Time']
    msg = JointState(
        header=Header(stamp=Time(sec=i, nanosec=0), frame_id=''),
        name=['LF_HAA'], position=np.array([float(i)]), velocity=np.zeros(1), effort=np.zeros(1),
    )  # fmt: skip
    return typestore.serialize_cdr(msg, 'sensor_msgs/msg/JointState')


def test_splits_by_duration_and_size_and_reads_back(tmp_path):
    typestore = get_typestore(TYPESTORE)
    writer = SplitBagWriter(tmp_path / 'bag', split_size=0, split_duration=1.0)
    writer.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
    for i in range(50):  # 10 Hz for 5 s: 5 splits of 10 messages
        writer.write('/joint_states', i * 100_000_000, joint_state_cdr(typestore, i))
    writer.close()
    splits = list_splits(str(tmp_path / 'bag'))
    assert [os.path.basename(s) for s in splits] == [f'bag_{i:04d}' for i in range(5)]
    assert [read_counts(s) for s in splits] == [{'/joint_states': 10}] * 5
    with Reader(splits[2]) as reader:
        positions = [
            typestore.deserialize_cdr(raw, c.msgtype).position[0]
            for c, _, raw in reader.messages()
        ]
    assert positions == [float(i) for i in range(20, 30)]
    by_size = SplitBagWriter(tmp_path / 'small', split_size=500, split_duration=0)
    by_size.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
    for i in range(20):
        by_size.write('/joint_states', i, joint_state_cdr(typestore, i))
    by_size.close()
    counts = [read_counts(s)['/joint_states'] for s in list_splits(str(tmp_path / 'small'))]
    assert sum(counts) == 20 and len(counts) > 1


def test_unknown_type_is_refused(tmp_path):
    writer = SplitBagWriter(tmp_path / 'bag')
    try:
        writer.add_topic('/x', 'nope_msgs/msg/Nope')
    except ValueError as error:
        assert 'nope_msgs/msg/Nope' in str(error)
    else:
        raise AssertionError('unknown type accepted')


def write_seq(writer, typestore, first, last, period_ns=10_000_000):
    """Write /joint_states messages first..last-1, stamped i * period_ns, position[0] = i."""
    for i in range(first, last):
        writer.write('/joint_states', i * period_ns, joint_state_cdr(typestore, i))


def read_positions(split):
    """position[0] of every /joint_states message of a split, in order."""
    typestore = get_typestore(TYPESTORE)
    with Reader(split) as reader:
        return [
            int(typestore.deserialize_cdr(raw, c.msgtype).position[0])
            for c, _, raw in reader.messages()
        ]


def load_metadata(split):
    return YAML(typ='safe').load((Path(split) / 'metadata.yaml').read_text())


def mcap_of(split):
    return Path(split) / f'{Path(split).name}.mcap'


def all_messages(split):
    with Reader(split) as reader:
        return [(c.topic, t, bytes(raw)) for c, t, raw in reader.messages()]


def test_open_split_is_at_every_flush_the_bag_rosbags_writes_on_closing(tmp_path):
    typestore = get_typestore(TYPESTORE)
    writer = SplitBagWriter(tmp_path / 'bag', split_size=0, split_duration=0, flush_period=0)
    writer.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
    writer.add_topic('/imu', 'sensor_msgs/msg/Imu')  # declared, never written
    write_seq(writer, typestore, 0, 1)
    split = writer.path
    assert read_positions(split) == [0]  # a split's first message is flushed at once
    assert not writer.flush()  # nothing new: nothing to do
    write_seq(writer, typestore, 1, 40)
    assert read_positions(split) == [0]  # written, not flushed: not on disk yet
    assert writer.flush() and writer.flushes == 2
    assert read_positions(split) == list(range(40))  # the files as they are, writer still open
    scan = scan_mcap(mcap_of(split))
    assert scan.summary and not scan.problem  # indexed: summary, statistics, footer
    # rosbags' own Writer, closed on the same messages
    reference = Writer(tmp_path / 'ref' / os.path.basename(split), version=9,
                       storage_plugin=StoragePlugin.MCAP)  # fmt: skip
    reference.open()
    connections = [reference.add_connection(t, m, typestore=typestore) for t, m in [
        ('/joint_states', 'sensor_msgs/msg/JointState'), ('/imu', 'sensor_msgs/msg/Imu'),
    ]]  # fmt: skip
    for i in range(40):
        reference.write(connections[0], i * 10_000_000, joint_state_cdr(typestore, i))
    reference.close()
    metadata = (Path(split) / 'metadata.yaml').read_text()
    assert metadata == (reference.path / 'metadata.yaml').read_text()  # byte for byte
    assert all_messages(split) == all_messages(reference.path)
    with Reader(split) as ours, Reader(reference.path) as theirs:
        assert (ours.start_time, ours.end_time) == (theirs.start_time, theirs.end_time)
    content = mcap_of(split).read_bytes()
    writer.close()  # everything was flushed: closing changes nothing on disk
    assert mcap_of(split).read_bytes() == content
    assert (Path(split) / 'metadata.yaml').read_text() == metadata


def test_flush_period_flushes_on_write_and_when_due(tmp_path):
    typestore = get_typestore(TYPESTORE)
    writer = SplitBagWriter(tmp_path / 'bag', split_size=0, split_duration=0, flush_period=0.2)
    writer.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
    write_seq(writer, typestore, 0, 5)
    assert writer.flushes == 1 and not writer.flush_if_due()  # the split's first message only
    assert read_positions(writer.path) == [0]
    time.sleep(0.25)
    write_seq(writer, typestore, 5, 6)  # the first write after a period flushes
    assert writer.flushes == 2 and read_positions(writer.path) == list(range(6))
    write_seq(writer, typestore, 6, 8)
    time.sleep(0.25)
    assert writer.flush_if_due() and read_positions(writer.path) == list(range(8))
    assert writer.flush_seconds > 0
    writer.close()


def test_chunks_are_flushed_before_rosbags_chunk_limit(tmp_path):
    typestore = get_typestore(TYPESTORE)
    writer = SplitBagWriter(tmp_path / 'bag', split_size=0, split_duration=0, flush_period=0)
    writer.add_topic('/replay', 'std_msgs/msg/Float32MultiArray')
    Array = typestore.types['std_msgs/msg/Float32MultiArray']
    Layout = typestore.types['std_msgs/msg/MultiArrayLayout']

    def array(i, n):  # n float32: 4 n bytes
        msg = Array(layout=Layout(dim=[], data_offset=i), data=np.full(n, i, np.float32))
        return typestore.serialize_cdr(msg, 'std_msgs/msg/Float32MultiArray')

    on_disk = []
    for i in range(6):  # 400 kB each: two fit in a 1 MiB chunk, the third flushes them first
        writer.write('/replay', i, array(i, 100_000))
        on_disk.append(read_counts(writer.path).get('/replay', 0))
    assert on_disk == [1, 1, 1, 3, 3, 5]
    writer.write('/replay', 6, array(6, 300_000))  # 1.2 MB: rosbags chunks it alone
    assert read_counts(writer.path) == {'/replay': 7}
    scan = scan_mcap(mcap_of(writer.path))
    assert scan.summary and not scan.problem and len(scan.messages) == 7
    writer.close()
    assert read_counts(list_splits(str(tmp_path / 'bag'))[0]) == {'/replay': 7}


def test_killed_writer_loses_only_what_it_had_not_flushed(tmp_path):
    """fork, write, os._exit without closing: the files as a SIGKILL leaves them."""
    typestore = get_typestore(TYPESTORE)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            writer = SplitBagWriter(tmp_path / 'bag', split_size=0, split_duration=1.0)
            writer.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
            write_seq(writer, typestore, 0, 130)  # 10 ms apart: split 0 closes at 100
            writer.flush()
            write_seq(writer, typestore, 130, 150)  # never flushed
            code = 0
        finally:
            os._exit(code)  # no close, no atexit, no buffer flush: gone as if killed
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    splits = list_splits(str(tmp_path / 'bag'))
    assert [os.path.basename(s) for s in splits] == ['bag_0000', 'bag_0001']
    assert read_positions(splits[0]) == list(range(100))
    assert read_positions(splits[1]) == list(range(100, 130))  # up to the flush, no recovery
    info = load_metadata(splits[1])['rosbag2_bagfile_information']
    assert info['message_count'] == 30 and info['version'] == 9
    # as if closed at the flush: nothing for recovery to do
    assert [r['action'] for r in recover_tree(tmp_path / 'bag')] == ['complete', 'complete']
    # a writer started on the same root numbers on after the splits already there
    assert SplitBagWriter(tmp_path / 'bag').index == 2


def test_a_full_disk_mid_flush_leaves_the_bag_of_the_last_flush(tmp_path):
    import resource
    import signal

    import pytest

    typestore = get_typestore(TYPESTORE)
    writer = SplitBagWriter(tmp_path / 'bag', split_size=0, split_duration=0, flush_period=0)
    writer.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
    write_seq(writer, typestore, 0, 40)
    assert writer.flush()
    split, size = writer.path, mcap_of(writer.path).stat().st_size
    write_seq(writer, typestore, 40, 400)  # a flush about three times the file's size
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:  # the kernel refuses writes past the limit (EFBIG), as a full disk does (ENOSPC)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 4096, hard))
        with pytest.raises(OSError):
            writer.flush()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    assert mcap_of(split).stat().st_size == size  # the summary put back, the tail cut
    assert read_positions(split) == list(range(40))  # readable as it was after that flush
    assert not scan_mcap(mcap_of(split)).problem
