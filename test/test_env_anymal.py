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
    qpos = env.qpos.clone()
    qpos[0, 2] = 0.2  # base below the 0.25 m limit
    env.qpos = qpos
    _, reward, terminated, truncated, _ = env.step(torch.zeros(2, 12))
    assert terminated[0] and not truncated[0]
    assert not terminated[1]


def test_the_privileged_state_is_the_base_height_pre_reset_at_a_fall():
    env = make_vec_env(2, seed=3, randomization=RandomizationConfig(enabled=False))
    env.reset()
    qpos = env.qpos.clone()
    qpos[0, 2] = 0.2  # falls this step; env 1 stands
    env.qpos = qpos
    _, _, terminated, _, extras = env.step(torch.zeros(2, 12))
    assert terminated[0] and extras['final_privileged'].shape == (2, env.privileged_dim)
    final_height = extras['final_privileged'][:, 0] * 0.1 + 0.5  # m
    assert float(final_height[0]) < 0.25  # the fallen state, not the fresh episode's
    assert float(env.privileged()[0, 0]) * 0.1 + 0.5 > 0.5  # reset: standing again
    torch.testing.assert_close(final_height[1], env.qpos[1, 2])  # no reset: the same state
    env = make_vec_env(
        2, seed=3, differentiable=True, randomization=RandomizationConfig(enabled=False)
    )
    env.reset()
    actions = torch.full((2, 12), 0.1, requires_grad=True)
    env.step(actions)
    (grad,) = torch.autograd.grad(env.privileged().sum(), actions)  # a critic's slope reaches it
    assert torch.all(torch.isfinite(grad)) and grad.abs().sum() > 0


def test_the_dynamics_privileged_state_is_the_drawn_parameters_of_the_ending_episode():
    ranges = ['gain_scale=0.7:1.3', 'delay=0:0.02', 'mass_offset=-2:15']
    env = make_vec_env(3, seed=5, privileged='dynamics', randomization_overrides=ranges)
    env.reset()
    assert env.privileged_dim == 5 and env.privileged().shape == (3, 5)
    params = {k: env.sim.params[k].numpy() for k in ('kp', 'mass_offset', 'mu', 'delay')}
    gain = np.mean(params['kp'] / np.asarray(spec.KP), axis=1)
    expected = np.stack(
        [(gain - 1) / 0.3, params['mass_offset'] / 10, (params['mu'] - 0.8) / 0.4,
         params['delay'] / 0.02], axis=1,
    )  # fmt: skip
    np.testing.assert_allclose(env.privileged()[:, 1:].numpy(), expected, rtol=1e-5, atol=1e-6)
    assert np.ptp(expected[:, 1]) > 0.1  # drawn per environment, not one value
    before = env.privileged()[:, 1:].clone()
    qpos = env.qpos.clone()
    qpos[0, 2] = 0.2  # env 0 falls: a new episode draws new parameters
    env.qpos = qpos
    _, _, terminated, _, extras = env.step(torch.zeros(3, 12))
    assert terminated[0] and not terminated[1:].any()
    torch.testing.assert_close(extras['final_privileged'][:, 1:], before)  # the ending episode's
    assert not torch.allclose(env.privileged()[0, 1:], before[0])  # the fresh episode's
    torch.testing.assert_close(env.privileged()[1:, 1:], before[1:])
    with pytest.raises(ValueError, match='privileged'):
        make_vec_env(1, privileged='payload')


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
    qpos = env.qpos.numpy()
    assert np.all((qpos[:, 2] > 0.45) & (qpos[:, 2] < 0.56))  # sim vs MuJoCo: test_sim_*
    assert not env.sim.invalid.any()


def test_differentiable_mode_carries_gradients_from_reward_to_actions():
    env = make_vec_env(
        3, seed=6, differentiable=True, randomization=RandomizationConfig(enabled=False)
    )
    env.reset()
    actions = torch.full((3, 12), 0.1, requires_grad=True)
    obs, reward, *_ = env.step(actions)
    obs2, reward2, *_ = env.step(torch.zeros(3, 12))
    (reward.sum() + reward2.sum() + obs2.sum()).backward()
    assert actions.grad is not None and torch.all(torch.isfinite(actions.grad))
    assert actions.grad.abs().sum() > 0
    env.detach()
    assert not env.qpos.requires_grad and env.qpos.grad_fn is None


def test_differentiable_and_plain_stepping_agree():
    kwargs = dict(seed=7, randomization=RandomizationConfig(enabled=False))
    plain, diff = make_vec_env(2, **kwargs), make_vec_env(2, differentiable=True, **kwargs)
    plain.reset(), diff.reset()
    for _ in range(5):
        a = torch.full((2, 12), 0.2)
        _, r_plain, *_ = plain.step(a)
        _, r_diff, *_ = diff.step(a)
    torch.testing.assert_close(diff.qpos.detach(), plain.qpos, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(r_diff.detach(), r_plain, atol=1e-5, rtol=1e-3)
