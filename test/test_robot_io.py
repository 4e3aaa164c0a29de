import numpy as np
import pytest

from loco_policy import spec
from loco_policy.control import robot_io


def test_joint_states_are_matched_by_name_in_any_order():
    order = np.random.default_rng(0).permutation(spec.NUM_JOINTS)
    names = [spec.JOINT_NAMES[i] for i in order]
    q = spec.DEFAULT_JOINT_POS[order]
    matched, qd, tau = robot_io.JointMatcher().match(names, q, np.arange(12.0)[order], [])
    assert np.allclose(matched, spec.DEFAULT_JOINT_POS)
    assert np.allclose(qd, np.arange(12.0)) and np.all(tau == 0)


@pytest.mark.parametrize(
    'names, expected',
    [
        (list(spec.JOINT_NAMES[:11]), "missing ['RH_KFE']"),
        (list(spec.JOINT_NAMES[:11]) + ['RH_KNEE'], "unknown ['RH_KNEE']"),
        (list(spec.JOINT_NAMES) + ['LF_HAA'], "duplicated ['LF_HAA']"),
    ],
)
def test_wrong_joint_sets_are_rejected_naming_the_joints(names, expected):
    with pytest.raises(robot_io.InputError) as info:
        robot_io.JointMatcher().match(names, [0.0] * len(names), [0.0] * len(names))
    assert expected in str(info.value) and not info.value.fault


def test_wrong_lengths_are_rejected_and_bad_values_are_faults():
    matcher = robot_io.JointMatcher()
    with pytest.raises(robot_io.InputError, match='array lengths'):
        matcher.match(spec.JOINT_NAMES, [0.0] * 12, [0.0] * 11)
    q = spec.DEFAULT_JOINT_POS.copy()
    for bad_q, bad_qd, text in (
        (np.where(np.arange(12) == 3, np.nan, q), np.zeros(12), 'non-finite position'),
        (q, np.full(12, 1e6), 'velocity'),
        (q + np.where(np.arange(12) == 0, 2.0, 0.0), np.zeros(12), "['LF_HAA'] out of range"),
    ):
        with pytest.raises(robot_io.InputError) as info:
            robot_io.check_joints(bad_q, bad_qd, np.zeros(12))
        assert text in str(info.value) and info.value.fault


def test_imu_odom_and_command_checks():
    quat, w = robot_io.check_imu((0.0, 0.0, 0.0, 1.0), (0.1, 0.0, 0.0))
    assert np.allclose(quat, [1, 0, 0, 0])
    with pytest.raises(robot_io.InputError, match='norm'):
        robot_io.check_imu((0.0, 0.0, 0.0, 2.0), (0.0, 0.0, 0.0))
    with pytest.raises(robot_io.InputError, match='linear velocity'):
        robot_io.check_odom((1e6, 0.0, 0.0))
    command, clipped = robot_io.clip_command(1e6, -0.5, -1e6)
    assert clipped and command.tolist() == [1.0, -0.5, -1.0]
    with pytest.raises(robot_io.InputError) as info:
        robot_io.clip_command(float('nan'), 0.0, 0.0)
    assert not info.value.fault


def test_roll_pitch_of_a_tilted_base():
    angle = 0.5
    roll, pitch = robot_io.roll_pitch([np.cos(angle / 2), np.sin(angle / 2), 0.0, 0.0])
    assert abs(roll - angle) < 1e-9 and abs(pitch) < 1e-9
