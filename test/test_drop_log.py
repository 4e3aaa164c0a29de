"""The recorder's marker of dropped messages (ROS-free)."""

from loco_policy.tools.drop_log import DropLog, read_marker


def test_a_run_of_drops_becomes_one_marker_when_writing_resumes():
    log = DropLog()
    assert log.close() is None  # nothing dropped: no marker
    log.drop('/joint_states', 100)
    log.drop('/imu', 105)
    log.drop('/joint_states', 110)
    stamp, text = log.close()
    assert stamp == 110  # at the hole's end, where the next written message follows
    assert read_marker(text) == {
        'from_ns': 100, 'to_ns': 110, 'messages': {'/imu': 1, '/joint_states': 2},
    }  # fmt: skip
    assert log.close() is None  # the run ended with its marker
    log.drop('/odom', 200)
    stamp, text = log.close()
    assert read_marker(text)['messages'] == {'/odom': 1} and log.total == 4
