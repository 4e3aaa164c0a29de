"""The torch bridge: gradients reach the initial state, targets and parameters; cuts stop them."""

import numpy as np
import torch

from loco_policy import spec
from loco_policy.description import default_qpos
from loco_train.sim import Simulator
from loco_train.sim.reference import robot
from loco_train.sim.torch_bridge import TorchSim


def test_gradients_flow_to_inputs_and_stop_at_cut():
    sim = Simulator(robot(), 2, contact='smooth')
    sim.set_params(kp=spec.KP, kd=spec.KD, tau_max=spec.TORQUE_LIMIT)
    ts = TorchSim(sim)
    qvel0 = torch.zeros(2, 18, requires_grad=True)
    ts.reset(np.tile(default_qpos(), (2, 1)), qvel0)
    targets = torch.tensor(np.tile(spec.DEFAULT_JOINT_POS, (3, 2, 1)), requires_grad=True)
    mu = torch.full((2,), 0.8, requires_grad=True)
    for t in range(3):
        out = ts.step(targets[t], params={'mu': mu})
    assert out.qpos.shape == (2, 19) and out.foot_pos.shape == (2, 4, 3)
    assert out.contact_force.shape == (2, 4, 3)
    (out.qpos[:, 2].sum() + out.foot_vel.square().sum()).backward()
    assert qvel0.grad.abs().sum() > 0 and targets.grad[0].abs().sum() > 0
    assert torch.isfinite(mu.grad).all()
    ts.cut_gradients()
    assert ts.qpos.grad_fn is None and ts.qvel.grad_fn is None
    out = ts.step(targets[0].detach())
    assert out.qpos.grad_fn is None or not out.qpos.requires_grad


def test_torch_step_equals_numpy_step():
    sim = Simulator(robot(), 1, contact='hard', dtype='float64')
    sim.set_params(kp=spec.KP, kd=spec.KD, tau_max=spec.TORQUE_LIMIT)
    sim.set_state(default_qpos(), np.zeros(18))
    sim.step(spec.DEFAULT_JOINT_POS)
    ts = TorchSim(sim)
    ts.reset(default_qpos()[None], np.zeros((1, 18)))
    out = ts.step(spec.DEFAULT_JOINT_POS[None])
    np.testing.assert_allclose(out.qpos.detach().numpy(), sim.get_state()[0], atol=1e-12)


def test_a_diverged_environment_gets_zero_gradient_and_the_others_keep_theirs():
    from loco_train.sim.torch_bridge import _finite_rows

    grad = torch.tensor([[1.0, 2.0], [float('nan'), 1.0], [3.0, float('inf')], [4.0, 5.0]])
    clean = _finite_rows(grad)
    torch.testing.assert_close(clean, torch.tensor([[1.0, 2.0], [0, 0], [0, 0], [4.0, 5.0]]))
    assert _finite_rows(torch.ones(3, 2, 3)).equal(torch.ones(3, 2, 3))
