import os

import numpy as np
from rosbags.rosbag2 import Reader
from rosbags.typesys import get_typestore

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
