"""The simulator's drive model: joint damping and friction, the command delay, the fitted model.

Its gradients (hand-written reverse) against central differences, and its trajectories on the
hanging robot against MuJoCo's actuator model (loco_policy.sim.backends, the oracle the fit
uses) with the same ActuatorParams.
"""

import numpy as np
import pytest
import torch

from loco_policy import spec
from loco_policy.control import joint_command
from loco_policy.sim.backends import make_backend
from loco_train.actuator import mjcf
from loco_train.actuator.model import ActuatorParams
from loco_train.sim import Simulator
from loco_train.sim.actuator_params import apply_actuator, drive_params
from loco_train.sim.torch_bridge import TorchSim

FIT = ActuatorParams(
    kp_scale=np.linspace(0.85, 1.2, 12),
    kd_scale=np.linspace(1.3, 0.8, 12),
    armature=np.tile([0.03, 0.03, 0.01], 4),  # kg m^2
    friction=np.tile([1.0, 1.0, 0.5], 4),  # N m
    damping=np.tile([0.5, 0.8, 0.3], 4),  # N m s/rad
    delay=0.0113,  # s: 2.26 physics steps
)
STEPS = 50  # control steps of 20 ms


def _hanging(num_envs, dtype='float64'):
    """The Warp simulator on the fixed-base (hanging) description, no ground."""
    model = mjcf.build_spec(None, fixed_base=True).compile()
    return Simulator(model, num_envs, contact='none', dtype=dtype)


def _chirp_and_step():
    """(STEPS, 12) joint targets: a 0.5-5 Hz chirp, a step half way, joint limits kept clear."""
    t = np.arange(STEPS) * spec.CONTROL_DT
    freq = 0.5 + 4.5 * t / t[-1]  # Hz
    phase = 2 * np.pi * np.cumsum(freq) * spec.CONTROL_DT
    amplitude = np.tile([0.15, 0.3, 0.3], 4)  # rad: HAA, HFE, KFE
    chirp = amplitude * np.sin(phase[:, None] + 0.7 * np.arange(12))
    chirp[STEPS // 2 :] += 0.1 * np.sign(np.arange(12) % 2 - 0.5)
    return spec.DEFAULT_JOINT_POS + chirp


def _mujoco(params, targets):
    """(STEPS, 12) joint positions at the end of each control step in MuJoCo's actuator model."""
    backend = make_backend('mujoco', actuator=params, fixed_base=True)
    assert backend.dt == pytest.approx(spec.CONTROL_DT / 4)
    zeros, q = np.zeros(12), []
    for target in targets:
        command = joint_command.JointCommand(
            target, zeros, zeros, spec.KP, spec.KD, spec.TORQUE_LIMIT, 'POLICY'
        )
        for _ in range(4):
            backend.step(command)
        q.append(backend.state().q)
    return np.array(q)


def test_warp_follows_mujoco_actuator_model_and_needs_the_delay():
    targets = _chirp_and_step()
    ref = _mujoco(FIT, targets)
    assert np.abs(ref - spec.DEFAULT_JOINT_POS).max() > 0.4  # it moved
    # one environment per variant: the fit, then the fit with one part left out or mistimed
    variants = {
        'fit': FIT,
        'no delay': FIT.with_values(delay=0.0),
        'delay - 1 step': FIT.with_values(delay=FIT.delay - 0.005),
        'delay + 1 step': FIT.with_values(delay=FIT.delay + 0.005),
        'no friction': FIT.with_values(friction=0.0),
        'no damping': FIT.with_values(damping=0.0),
        'no armature': FIT.with_values(armature=0.0),
        'nominal gains': FIT.with_values(kp_scale=1.0, kd_scale=1.0),
    }
    sim = _hanging(len(variants))
    params = {name: np.stack([drive_params(p, 1)[name][0] for p in variants.values()])
              for name in drive_params(FIT, 1)}  # fmt: skip
    sim.set_params(tau_max=spec.TORQUE_LIMIT, **params)
    sim.set_state(spec.DEFAULT_JOINT_POS, np.zeros(12))
    hold = np.tile(spec.DEFAULT_JOINT_POS, (2, 1))  # MuJoCo's history holds the default pose
    q = []
    for k, target in enumerate(targets):
        sim.step(target, previous=hold if k == 0 else None)
        q.append(sim.get_state()[0][:, :])
    error = np.array(q) - ref[:, None]  # (STEPS, variants, 12) rad
    rms = dict(zip(variants, np.sqrt(np.mean(error**2, axis=(0, 2)))))
    worst = dict(zip(variants, np.abs(error).max(axis=(0, 2))))
    # the fit: within 0.04 rad at every joint and step (both integrate at 5 ms), 0.012 rad RMS
    assert worst['fit'] < 0.04 and rms['fit'] < 0.012, (worst, rms)
    # without the delay, or one physics step off, clearly worse: the delay is modelled
    assert rms['no delay'] > 4.0 * rms['fit'] and worst['no delay'] > 3.0 * worst['fit'], rms
    assert min(rms['delay - 1 step'], rms['delay + 1 step']) > 2.0 * rms['fit'], rms
    for name in ('no friction', 'no damping', 'no armature', 'nominal gains'):
        assert rms[name] > 1.6 * rms['fit'], (name, rms)


def _gradient_problem():
    """A loss after 3 control steps of 2 hanging robots, delays 11.3 ms and 26.3 ms (> 20 ms)."""
    sim = _hanging(2)
    sim.set_params(kp=spec.KP, kd=spec.KD, tau_max=spec.TORQUE_LIMIT, armature=0.02)
    ts = TorchSim(sim)
    rng = np.random.default_rng(5)
    leaves = {
        'qvel': torch.tensor(0.5 * rng.normal(size=(2, 12))),
        'targets': torch.tensor(spec.DEFAULT_JOINT_POS + 0.2 * rng.normal(size=(3, 2, 12))),
        'previous': torch.tensor(spec.DEFAULT_JOINT_POS + 0.2 * rng.normal(size=(2, 2, 12))),
        'damping': torch.tensor(rng.uniform(0.2, 1.0, size=(2, 12))),
        'friction': torch.tensor(rng.uniform(0.2, 0.6, size=(2, 12))),
        'delay': torch.tensor([0.0113, 0.0263], dtype=torch.float64),
    }
    weights = torch.tensor(rng.normal(size=(2, 24)))

    def loss(x):
        ts.reset(torch.tensor(np.tile(spec.DEFAULT_JOINT_POS, (2, 1))), x['qvel'], x['previous'])
        params = {name: x[name] for name in ('damping', 'friction', 'delay')}
        for t in range(3):
            out = ts.step(x['targets'][t], params=params)
        return (torch.cat([out.qpos, 0.1 * out.qvel], dim=1) * weights).sum()

    return loss, leaves


def test_drive_gradients_match_central_differences():
    loss, leaves = _gradient_problem()
    x = {k: v.clone().requires_grad_() for k, v in leaves.items()}
    loss(x).backward()
    checks = [('qvel', (0, 2)), ('qvel', (1, 7)), ('targets', (0, 1, 4)), ('targets', (2, 0, 8))]
    checks += [('previous', (0, 0, 3)), ('previous', (1, 1, 5)), ('previous', (0, 1, 5))]
    checks += [('damping', (0, 2)), ('damping', (1, 9)), ('friction', (0, 4))]
    checks += [('friction', (1, 11)), ('delay', (0,)), ('delay', (1,))]
    eps = 1e-6
    for name, index in checks:

        def shifted(delta, name=name, index=index):
            y = {k: v.clone() for k, v in leaves.items()}
            y[name][index] += delta
            with torch.no_grad():
                return float(loss(y))

        fd = (shifted(eps) - shifted(-eps)) / (2 * eps)
        g = float(x[name].grad[index])
        assert abs(g - fd) <= 1e-5 * max(abs(fd), 1e-3), (name, index, g, fd)
    # a delay under one control step reads the previous step's target only; above, the one before
    assert float(x['previous'].grad[0, 1].abs().max()) == 0.0
    assert float(x['previous'].grad[1, 1].abs().max()) > 0.0


def test_defaults_keep_the_description_damping_and_no_friction_or_delay():
    sim = _hanging(3, 'float32')
    params = {name: sim.params[name].numpy() for name in ('damping', 'friction', 'delay')}
    act_dof = sim.spec.arrays['act_dof']
    np.testing.assert_array_equal(
        params['damping'], np.tile(sim.model.dof_damping[act_dof], (3, 1))
    )
    assert not params['friction'].any() and not params['delay'].any()


def test_apply_actuator_maps_the_fit_onto_the_drives_and_refuses_long_delays():
    sim = _hanging(2, 'float32')
    apply_actuator(sim, FIT, kp=np.full(12, 40.0), kd=np.full(12, 1.0))
    got = {name: sim.params[name].numpy() for name in ('kp', 'kd', 'friction', 'delay')}
    np.testing.assert_allclose(got['kp'][1], 40.0 * FIT.kp_scale, rtol=1e-6)
    np.testing.assert_allclose(got['kd'][0], FIT.kd_scale, rtol=1e-6)
    np.testing.assert_allclose(got['friction'][1], FIT.friction, rtol=1e-6)
    np.testing.assert_allclose(got['delay'], FIT.delay, rtol=1e-6)
    params = apply_actuator({'kp': np.zeros((5, 12))}, FIT)
    assert params['armature'].shape == (5, 12) and params['delay'].shape == (5,)
    with pytest.raises(ValueError, match='control steps of target history'):
        sim.set_params(delay=0.041)  # more than two 20 ms control steps
    with pytest.raises(ValueError, match='non-negative'):
        sim.set_params(friction=-0.1)


def test_large_joint_friction_holds_still_without_chattering():
    # 5 N m on a knee of ~0.025 kg m^2: a fixed v_eps of 0.1 rad/s would make the explicit step
    # overshoot zero velocity every substep (a limit cycle of ~0.8 rad/s); the widened smoothing
    # lets it settle
    sim = _hanging(1, 'float32')
    apply_actuator(sim, ActuatorParams(friction=5.0, armature=0.01, delay=0.0113))
    sim.set_state(spec.DEFAULT_JOINT_POS, np.zeros(12))
    speeds = []
    for _ in range(100):  # 2 s holding the default pose
        sim.step(spec.DEFAULT_JOINT_POS)
        speeds.append(np.abs(sim.get_state()[1]).max())
    assert max(speeds[50:]) < 0.05, max(speeds[50:])
