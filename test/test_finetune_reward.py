"""The robot reward equals training's reward restricted to the terms the robot measures."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from loco_policy import spec, transition
from loco_policy.observation import projected_gravity
from loco_train.envs.rewards import compute_reward, RewardConfig, RewardInputs, TERMS
from loco_train.finetune.reward import (
    DERIVED_TERMS,
    robot_reward,
    ROBOT_TERMS,
    robot_weights,
    UNMEASURED_TERMS,
    weights_from_overrides,
)

PPO_RECIPE = {'foot_height': 0, 'feet_air_time': 2, 'orientation': -5, 'torque': -2.5e-5}


def states(n=16, seed=0):
    """n random robot states: body-frame velocities, tilted quaternions, commands, efforts."""
    rng = np.random.default_rng(seed)
    axis = rng.normal(size=(n, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    angle = rng.uniform(0.0, 0.6, size=(n, 1))
    return dict(
        lin_vel=rng.normal(0.0, 0.6, size=(n, 3)),
        ang_vel=rng.normal(0.0, 0.8, size=(n, 3)),
        quat=np.hstack([np.cos(angle / 2), axis * np.sin(angle / 2)]),
        command=rng.uniform(-1.0, 1.0, size=(n, 3)),
        effort=rng.normal(0.0, 30.0, size=(n, 12)),
        action=rng.normal(0.0, 0.5, size=(n, 12)),
        last_action=rng.normal(0.0, 0.5, size=(n, 12)),
        joint_acc=rng.normal(0.0, 50.0, size=(n, 12)),
    )


def robot_terms(x):
    """(n, 7) float32 terms as policy_node streams them."""
    rows = [
        transition.reward_terms(*(x[k][i] for k in (
            'lin_vel', 'ang_vel', 'quat', 'command', 'effort', 'action', 'last_action')))
        for i in range(len(x['quat']))
    ]  # fmt: skip
    return np.array(rows, dtype=np.float32)


def training_terms(x, config):
    """Training's weighted terms (times dt) on the same quantities, by name."""
    t = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in x.items()}
    n = len(x['quat'])
    inputs = RewardInputs(
        command=t['command'], base_lin_vel=t['lin_vel'], base_ang_vel=t['ang_vel'],
        torque=t['effort'], joint_acc=t['joint_acc'], action=t['action'],
        last_action=t['last_action'], foot_height=torch.full((n, 4), 0.03, dtype=torch.float64),
        undesired_contact=torch.ones(n, dtype=torch.float64),
        phase_time=torch.zeros(n, dtype=torch.float64),
        feet_air_time=torch.full((n,), 0.2, dtype=torch.float64),
        projected_gravity=torch.as_tensor(np.array([projected_gravity(q) for q in x['quat']])),
        foot_vel=torch.ones(n, 4, 3, dtype=torch.float64),
    )  # fmt: skip
    total, terms = compute_reward(inputs, config, spec.CONTROL_DT)
    return total.numpy(), {k: v.numpy() for k, v in terms.items()}


def test_every_training_term_is_mapped_derived_or_listed_unmeasured():
    assert tuple(ROBOT_TERMS) == transition.REWARD_TERMS
    named = set(ROBOT_TERMS.values()) | set(DERIVED_TERMS) | set(UNMEASURED_TERMS)
    assert named == set(TERMS) and len(named) == len(ROBOT_TERMS) + 12
    assert all(reason for reason in UNMEASURED_TERMS.values())


@pytest.mark.parametrize(
    'overrides',
    [
        PPO_RECIPE,
        {'orientation': -5, 'torque': -2.5e-5},
        {'lin_vel_error': -1.0, 'yaw_rate_error': -0.5, 'alive': 0.3, 'tracking_sigma': 0.35},
    ],
)
def test_robot_reward_equals_the_training_reward_of_the_measurable_terms(overrides):
    x = states()
    config = RewardConfig(**overrides)
    total, terms = training_terms(x, config)
    measurable = set(ROBOT_TERMS.values()) | set(DERIVED_TERMS)
    expected = sum(value for name, value in terms.items() if name in measurable)
    weights = weights_from_overrides(overrides)
    got = robot_reward(robot_terms(x), weights)
    assert got.shape == (16,) and got.dtype == np.float32
    assert np.allclose(got, expected, rtol=1e-4, atol=1e-6)
    left_out = sum(value for name, value in terms.items() if name not in measurable)
    assert np.allclose(got, total - left_out, rtol=1e-4, atol=1e-6)
    assert weights.ignored == {
        name: getattr(config, name) for name in UNMEASURED_TERMS if getattr(config, name) != 0
    }
    assert np.abs(left_out).max() > 1e-4  # the test really leaves terms out


def test_ppo_recipe_weights_are_training_weights_times_dt():
    w = weights_from_overrides(['feet_air_time=2', 'orientation=-5', 'torque=-2.5e-5'])
    dt = spec.CONTROL_DT
    expected = [1.0 * dt, 0.5 * dt, -2.0 * dt, -0.05 * dt, -5.0 * dt, -2.5e-5 * dt, -0.01 * dt]
    assert np.allclose(w.terms, expected) and w.alive == 0.0
    assert w.ignored == {'joint_acc': -2.5e-7, 'undesired_contact': -1.0, 'feet_air_time': 2.0}
    assert robot_weights(RewardConfig(), dt=0.01).terms[0] == pytest.approx(0.01)


def test_bad_input_is_refused_clearly():
    w = weights_from_overrides({})
    with pytest.raises(ValueError, match='shape'):
        robot_reward(np.zeros((3, 6)), w)
    with pytest.raises(ValueError, match='NAME=VALUE'):
        weights_from_overrides({'no_such_term': 1.0})
    with pytest.raises(ValueError, match='lacks'):
        robot_weights(object())
    with pytest.raises(ValueError, match='dt'):
        robot_weights(RewardConfig(), dt=0.0)


def test_finetune_modules_import_numpy_only():
    code = (
        'import sys, loco_train.finetune.ingest, loco_train.finetune.reward, '
        'loco_train.finetune.store; '
        "print(sorted(m for m in ('torch', 'rclpy', 'warp', 'mujoco') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == '[]'
