"""ros2_control position array: controller joint order, damping modes produce no array."""

import numpy as np
import pytest

from loco_policy import spec
from loco_policy.control import joint_command
from loco_policy.control.position_group import group_order, group_positions


def walking_command(position):
    return joint_command.JointCommand(
        np.asarray(position, dtype=np.float64), np.zeros(12), np.zeros(12),
        spec.KP.copy(), spec.KD.copy(), spec.TORQUE_LIMIT.copy(), 'WALK',
    )  # fmt: skip


def test_positions_follow_the_controllers_joint_order():
    names = list(reversed(spec.JOINT_NAMES))
    order = group_order(names)
    q = np.arange(12) * 0.1
    out = group_positions(walking_command(q), order)
    assert out == pytest.approx([q[spec.JOINT_NAMES.index(n)] for n in names])
    assert group_positions(walking_command(q), group_order(spec.JOINT_NAMES)) == pytest.approx(q)


@pytest.mark.parametrize(
    'names, named',
    [
        (list(spec.JOINT_NAMES[:11]), 'missing'),
        (list(spec.JOINT_NAMES[:11]) + ['LF_HAA'], 'duplicated'),
        (list(spec.JOINT_NAMES[:11]) + ['LF_WHEEL'], 'unknown'),
    ],
)
def test_wrong_joint_sets_are_refused_naming_what_is_wrong(names, named):
    with pytest.raises(ValueError, match='position group joints') as info:
        group_order(names)
    message = str(info.value)
    assert named in message
    if named == 'unknown':
        assert 'LF_WHEEL' in message and spec.JOINT_NAMES[11] in message


def test_damping_and_non_finite_commands_produce_no_array():
    order = group_order(spec.JOINT_NAMES)
    damp = joint_command.damping(spec.DEFAULT_JOINT_POS, 2.0)
    assert group_positions(damp, order) is None
    bad = walking_command(np.full(12, np.nan))
    assert group_positions(bad, order) is None
