"""Hand-written reverse passes (CRBA, solves, PGS) against Warp's generated adjoints.

Both differentiate the same forward kernels (float64), so their gradients must agree to rounding,
over a batch that holds sticking, sliding and airborne feet, with joint damping, friction and
command delays (none, fractional, longer than a control step) on the drives.
"""

import numpy as np
import pytest
import torch

from loco_policy import spec
from loco_policy.description import default_qpos
from loco_train.sim import SimConfig, Simulator
from loco_train.sim.reference import robot
from loco_train.sim.torch_bridge import TorchSim

STEPS = 4
HEIGHT = np.array([0.54, 0.54, 0.80, 0.56])  # base (m): standing, sliding, airborne, landing
MU = np.array([1.0, 0.1, 1.0, 0.6])
TAU_SCALE = np.array([1.0, 1.0, 1.0, 0.05])  # torque limits: the landing env's saturate
DELAY = np.array([0.0, 0.0113, 0.025, 0.004])  # s: none, fractional, past one control step


def _initial_state():
    rng = np.random.default_rng(3)
    qpos = np.tile(default_qpos(), (len(HEIGHT), 1))
    qpos[:, 2] = HEIGHT
    qvel = np.zeros((len(HEIGHT), 18))
    qvel[1, 0] = 2.0  # pushed at 2 m/s on ice: the feet slide
    qvel[3] = 0.3 * rng.normal(size=18)
    targets = spec.DEFAULT_JOINT_POS + 0.1 * rng.normal(size=(STEPS + 2, len(HEIGHT), 12))
    return qpos, qvel, targets


def _simulator(contact, adjoint):
    sim = Simulator(robot(), len(HEIGHT), dtype='float64', contact=contact, adjoint=adjoint)
    sim.set_params(kp=spec.KP, kd=spec.KD, tau_max=spec.TORQUE_LIMIT, mu=MU)
    return sim


def _gradients(contact, adjoint):
    qpos, qvel, targets = _initial_state()
    ts = TorchSim(_simulator(contact, adjoint))
    qpos = torch.tensor(qpos, requires_grad=True)
    qvel = torch.tensor(qvel, requires_grad=True)
    targets = torch.tensor(targets, requires_grad=True)
    params = {
        'mu': torch.tensor(MU, requires_grad=True),
        'kp': torch.tensor(np.tile(spec.KP, (len(HEIGHT), 1)), requires_grad=True),
        'mass_offset': torch.zeros(len(HEIGHT), dtype=torch.float64, requires_grad=True),
        'armature': torch.full((len(HEIGHT), 12), 0.01, dtype=torch.float64, requires_grad=True),
        'kd': torch.tensor(np.tile(spec.KD, (len(HEIGHT), 1)), requires_grad=True),
        # the landing robot's drives saturate (clamped torque: the gradient goes to the limit)
        'tau_max': torch.tensor(
            np.tile(spec.TORQUE_LIMIT, (len(HEIGHT), 1)) * TAU_SCALE[:, None], requires_grad=True
        ),
    }
    tau_ff = torch.full((len(HEIGHT), 12), 0.5, dtype=torch.float64, requires_grad=True)
    params['damping'] = torch.full((len(HEIGHT), 12), 0.7, dtype=torch.float64).requires_grad_()
    params['friction'] = torch.full((len(HEIGHT), 12), 0.3, dtype=torch.float64).requires_grad_()
    params['delay'] = torch.tensor(DELAY, requires_grad=True)
    ts.reset(qpos, qvel, previous=targets[:2].transpose(0, 1).flip(1))  # the 2 before t = 0
    loss = 0.0
    for t in range(STEPS):
        out = ts.step(targets[t + 2], params=params, tau_ff=tau_ff)
        loss = loss + out.qpos[:, :3].sum() + 0.01 * out.qvel.square().sum()
        loss = loss + out.foot_pos.sum() + 1e-3 * out.contact_force.square().sum()
        loss = loss + 0.1 * out.foot_vel.square().sum()
    loss.backward()
    grads = {'qpos': qpos.grad, 'qvel': qvel.grad, 'targets': targets.grad, 'tau_ff': tau_ff.grad}
    return {**grads, **{k: v.grad for k, v in params.items()}}


def test_the_batch_holds_sticking_sliding_and_airborne_feet():
    qpos, qvel, targets = _initial_state()
    sim = _simulator('smooth', 'hand')
    sim.set_state(qpos, qvel)
    sim.step(targets[0])
    force = sim._forces[-1].numpy()[:, : sim.spec.ncontact]  # last substep, contact frame = world
    normal, tangent = force[..., 2], np.linalg.norm(force[..., :2], axis=-1)
    loaded = normal > 1.0  # N
    ratio = tangent / np.where(loaded, MU[:, None] * normal, 1.0)
    assert np.any(loaded & (ratio < 0.9))  # sticking: inside the friction disc
    assert loaded[1].sum() >= 2 and np.all(ratio[1][loaded[1]] > 0.99)  # sliding: on its edge
    assert np.all(force[2] == 0.0)  # airborne: the skipped updates give exactly zero


@pytest.mark.parametrize('contact', ['smooth', 'hard', 'soft'])
def test_hand_written_adjoints_equal_warps_generated_ones(contact):
    hand, auto = _gradients(contact, 'hand'), _gradients(contact, 'auto')
    for name, g in auto.items():
        assert torch.isfinite(g).all(), name
        assert g.abs().max() > 0.0, name
        np.testing.assert_allclose(hand[name], g, rtol=1e-9, atol=1e-9 * float(g.abs().max()))


def test_unknown_adjoint_is_refused():
    with pytest.raises(ValueError, match='adjoint'):
        SimConfig(adjoint='numeric').validate()
