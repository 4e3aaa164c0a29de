"""Gradients through the simulator against central finite differences (float64).

A loss on the state after 10 control steps (40 substeps, touchdown inside the window) is
differentiated with respect to the initial velocity, the joint targets of several steps and the
per-environment parameters, for the `smooth` and `soft` contact models. For `hard` contact the
gradient across a touchdown is shown to be uninformative (blind to the approaching ground, and
flipping sign from one drop height to the next), which the smoothing fixes.
"""

import mujoco
import numpy as np
import pytest
import torch

from loco_policy import spec
from loco_policy.description import default_qpos
from loco_train.sim import Simulator
from loco_train.sim.reference import robot
from loco_train.sim.torch_bridge import TorchSim

STEPS = 10


def _problem(contact):
    sim = Simulator(robot(), 1, dtype='float64', contact=contact)
    sim.set_params(kp=spec.KP, kd=spec.KD, tau_max=spec.TORQUE_LIMIT)
    ts = TorchSim(sim)
    rng = np.random.default_rng(0)
    qpos = default_qpos()[None]
    qpos[0, 2] = 0.56  # feet 1 cm above the ground: they land during the window
    targets = torch.tensor(spec.DEFAULT_JOINT_POS + 0.1 * rng.normal(size=(STEPS, 12)))
    qvel = torch.tensor(0.1 * rng.normal(size=(1, 18)))
    params = {'kp': torch.tensor(spec.KP[None]), 'mass_offset': torch.zeros(1)}

    def loss(qvel, targets, params):
        ts.reset(torch.tensor(qpos), qvel)
        for t in range(STEPS):
            out = ts.step(targets[t][None], params=params)
        return (
            out.qpos[0, 0] + 2.0 * out.qpos[0, 2] + out.qvel[0, 1] + out.foot_pos[0, :, 2].sum()
        ) + 1e-3 * out.contact_force[0, :, 2].sum()

    return loss, qvel, targets, params


@pytest.mark.slow
@pytest.mark.parametrize('contact', ['smooth', 'soft'])
def test_gradients_match_central_differences(contact):
    loss, qvel, targets, params = _problem(contact)
    leaves = [qvel.clone().requires_grad_(), targets.clone().requires_grad_()]
    leaves.append({k: v.clone().requires_grad_() for k, v in params.items()})
    value = loss(*leaves)
    value.backward()
    grads = [leaves[0].grad, leaves[1].grad, {k: v.grad for k, v in leaves[2].items()}]
    eps = 1e-6
    checks = [(0, (0, 2)), (0, (0, 4)), (0, (0, 9)), (1, (0, 1)), (1, (5, 2)), (1, (9, 7))]
    checks += [(2, ('kp', (0, 2))), (2, ('mass_offset', (0,)))]
    for which, index in checks:
        values = [qvel, targets, params]

        def shifted(delta, which=which, index=index):
            args = [qvel.clone(), targets.clone(), {k: v.clone() for k, v in params.items()}]
            if which == 2:
                args[2][index[0]][index[1]] += delta
            else:
                args[which][index] += delta
            with torch.no_grad():
                return float(loss(*args))

        fd = (shifted(eps) - shifted(-eps)) / (2 * eps)
        g = grads[which][index[0]][index[1]] if which == 2 else grads[which][index]
        rel = abs(float(g) - fd) / max(abs(fd), 1e-6)
        assert rel < 1e-2, (contact, which, index, float(g), fd)
        assert values  # keep the closure's defaults explicit


BALL = """<mujoco><worldbody><geom type="plane" size="0 0 1"/>
<body pos="0 0 1"><freejoint/><inertial mass="1" pos="0 0 0" diaginertia="0.01 0.01 0.01"/>
<geom name="ball" type="sphere" size="0.05"/></body></worldbody></mujoco>"""


def _drop_gradients(contact, heights):
    """d(final height)/d(drop height) after 0.2 s for balls dropped from rest at `heights`."""
    sim = Simulator(mujoco.MjModel.from_xml_string(BALL), 1, dtype='float64', contact=contact)
    ts = TorchSim(sim)
    grads = []
    for h0 in heights:
        z0 = torch.tensor([h0 + 0.05], dtype=torch.float64, requires_grad=True)
        qpos = torch.cat([torch.zeros(2, dtype=torch.float64), z0, torch.tensor([1.0, 0, 0, 0])])
        ts.reset(qpos[None], torch.zeros(1, 6, dtype=torch.float64))
        for _ in range(STEPS):
            out = ts.step(torch.zeros(1, 1))
        out.qpos[0, 2].backward()
        grads.append(float(z0.grad[0]))
    return np.array(grads)


@pytest.mark.slow
def test_hard_contact_gradient_is_uninformative_across_touchdown():
    # free fall covers 0.196 m in 0.2 s: the lower drops land inside the window
    heights = np.linspace(0.17, 0.23, 13)
    hard, smooth = _drop_gradients('hard', heights), _drop_gradients('smooth', heights)
    airborne = heights > 0.2
    # hard: blind to the ground until touching (exactly 1), then sign flips between neighbours
    np.testing.assert_allclose(hard[airborne], 1.0, atol=1e-9)
    hard_jump = np.abs(np.diff(hard[~airborne])).max()
    assert hard_jump > 1.0, hard
    # smooth: already feels the ground 5 mm before touchdown, and varies less across it
    assert smooth[heights.searchsorted(0.2)] < 0.95, smooth
    assert np.abs(np.diff(smooth[~airborne])).max() < 0.6 * hard_jump, (smooth, hard)
