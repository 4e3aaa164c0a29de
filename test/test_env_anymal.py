import numpy as np
import pytest
import torch

from loco_policy import spec
from loco_train.envs.anymal import AnymalEnvConfig, make_vec_env
from loco_train.envs.randomization import RandomizationConfig

N = 6


@pytest.mark.parametrize('contact', ['smooth', 'hard', 'soft'])
@pytest.mark.parametrize('randomize', [True, False])
def test_every_configuration_steps_with_finite_outputs_of_the_right_shape(contact, randomize):
    env = make_vec_env(
        N, seed=1, contact=contact, randomization=RandomizationConfig(enabled=randomize)
    )
    obs = env.reset()
    assert obs.shape == (N, spec.OBS_DIM) and torch.all(torch.isfinite(obs))
    gen = torch.Generator().manual_seed(0)
    for _ in range(15):
        actions = torch.rand(N, 12, generator=gen) * 0.6 - 0.3
        obs, reward, terminated, truncated, extras = env.step(actions)
        assert obs.shape == (N, 48) and reward.shape == (N,)
        assert terminated.dtype == torch.bool and truncated.shape == (N,)
        assert extras['final_obs'].shape == (N, 48)
        for tensor in (obs, reward, extras['final_obs']):
            assert torch.all(torch.isfinite(tensor))
        assert all(np.isfinite(v) for v in extras['log'].values())
    assert 'reward/lin_vel_tracking' in extras['log']


def test_truncation_resets_and_keeps_the_pre_reset_observation():
    cfg = AnymalEnvConfig(episode_s=0.1, randomization=RandomizationConfig(enabled=False))
    env = make_vec_env(N, seed=2, **cfg.__dict__)
    env.reset()
    for _ in range(5):
        obs, _, terminated, truncated, extras = env.step(torch.zeros(N, 12))
    assert torch.all(truncated) and not torch.any(terminated)
    assert torch.all(extras['time_outs'])
    assert torch.all(env.episode_length_buf == 0)
    # the post-reset observation is a fresh episode: last action 0, new command; the final one
    # carries the last action of the old episode
    slices = spec.observation_slices()
    assert not torch.allclose(obs, extras['final_obs'])
    assert torch.all(obs[:, slices['last_action']] == 0)


def test_a_fallen_robot_terminates():
    env = make_vec_env(2, seed=3, randomization=RandomizationConfig(enabled=False))
    env.reset()
    qpos, qvel = env.sim.get_state()
    qpos[0, 2] = 0.2  # base below the 0.25 m limit
    env.sim.set_state(qpos, qvel)
    _, reward, terminated, truncated, _ = env.step(torch.zeros(2, 12))
    assert terminated[0] and not truncated[0]
    assert not terminated[1]


def test_non_finite_actions_never_reach_the_simulator():
    env = make_vec_env(2, seed=4, randomization=RandomizationConfig(enabled=False))
    env.reset()
    actions = torch.zeros(2, 12)
    actions[0, 3] = float('nan')
    obs, reward, *_ = env.step(actions)
    assert torch.all(torch.isfinite(obs)) and torch.all(torch.isfinite(reward))


def test_zero_action_stands():
    env = make_vec_env(
        2,
        seed=5,
        randomization=RandomizationConfig(enabled=False),
        reset_joint_noise=0.0,
        reset_base_velocity=0.0,
    )
    env.reset()
    for _ in range(100):
        env.step(torch.zeros(2, 12))
    qpos, _ = env.sim.get_state()
    assert np.all((qpos[:, 2] > 0.45) & (qpos[:, 2] < 0.56))  # sim vs MuJoCo: test_sim_*
    assert not env.sim.invalid.any()
