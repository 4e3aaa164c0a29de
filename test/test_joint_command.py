import numpy as np
import pytest

from loco_policy import spec
from loco_policy.control import joint_command


def make():
    return joint_command.JointCommand(
        spec.DEFAULT_JOINT_POS + 0.1, np.zeros(12), np.ones(12), spec.KP, spec.KD,
        spec.TORQUE_LIMIT, 'WALK',
    )  # fmt: skip


def test_pack_unpack_round_trip_in_any_order():
    names, pos, vel, eff = joint_command.pack(make())
    assert len(names) == len(pos) == len(vel) == len(eff) == 24
    assert names[12] == 'LF_HAA/gains'
    order = np.random.default_rng(1).permutation(24)
    shuffled = [[seq[i] for i in order] for seq in (names, pos, vel, eff)]
    back = joint_command.unpack(*shuffled, mode='WALK')
    assert np.allclose(back.position, spec.DEFAULT_JOINT_POS + 0.1)
    assert np.allclose(back.kp, spec.KP) and np.allclose(back.kd, spec.KD)
    assert np.allclose(back.effort, 1.0) and back.mode == 'WALK'


def test_non_finite_or_incomplete_commands_are_refused():
    bad = make()
    bad.position[2] = np.inf
    with pytest.raises(ValueError, match='non-finite'):
        joint_command.pack(bad)
    names, pos, vel, eff = joint_command.pack(make())
    pos[0] = float('nan')
    with pytest.raises(ValueError, match='non-finite'):
        joint_command.unpack(names, pos, vel, eff)
    with pytest.raises(ValueError, match="missing \\['LF_HAA'"):
        joint_command.unpack(names[1:], pos[1:], vel[1:], eff[1:])


def test_damping_and_pd_torque_are_clipped():
    damp = joint_command.damping(spec.DEFAULT_JOINT_POS, 2.0)
    assert np.all(damp.kp == 0) and np.all(damp.kd == 2.0)
    tau = joint_command.pd_torque(damp, spec.DEFAULT_JOINT_POS, np.full(12, 1.0))
    assert np.allclose(tau, -2.0)
    far = joint_command.pd_torque(make(), spec.DEFAULT_JOINT_POS - 10.0, np.zeros(12))
    assert np.allclose(far, spec.TORQUE_LIMIT)
