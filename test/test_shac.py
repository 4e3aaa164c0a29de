import numpy as np
import pytest
import torch

from loco_train.shac import SHAC, SHACConfig
from test.helpers.toy_env import PointMassEnv


def make(env, **overrides):
    torch.manual_seed(0)
    cfg = SHACConfig(horizon=16, actor_hidden=(32, 32), critic_hidden=(32, 32),
                     critic_iterations=4, **overrides)  # fmt: skip
    b = (env.action_high + env.action_low) / 2
    c = (env.action_high - env.action_low) / 2
    return SHAC(env.obs_dim, b, c, cfg)


def test_shac_learns_the_differentiable_toy_task():
    env = PointMassEnv(num_envs=32, seed=1)
    shac = make(env)
    obs = env.reset()
    rewards = []
    for _ in range(40):
        obs, metrics, batch = shac.train_window(env, obs)
        assert metrics['skipped_window'] == 0.0
        rewards.append(metrics['window_reward_mean'])
    assert np.mean(rewards[-5:]) > 0.3 * np.mean(rewards[:3])  # error cut by more than 70 %
    assert np.mean(rewards[-5:]) > -0.15
    assert batch['obs'].shape == (16, 32, 4)


def test_td_lambda_targets_by_hand():
    env = PointMassEnv(num_envs=1)
    shac = make(env, gamma=0.5, lam=0.5)
    # a critic with V(s) = 1 everywhere
    for p in shac.target_critic.parameters():
        torch.nn.init.zeros_(p)
    last = list(shac.target_critic.parameters())[-1]
    last.data.fill_(1.0)
    shac.cfg.normalize_obs = False
    # 4 steps: truncation after step 1, termination after step 3 (the window's last step)
    batch = {
        'reward': torch.tensor([[1.0], [2.0], [3.0], [4.0]]),
        'terminated': torch.tensor([[False], [False], [False], [True]]),
        'truncated': torch.tensor([[False], [True], [False], [False]]),
        'next_obs': torch.zeros(4, 1, 4),
    }
    g = shac.td_lambda_targets(batch).squeeze(1).tolist()
    g3 = 4.0  # terminated: no bootstrap
    g2 = 3.0 + 0.5 * (0.5 * 1.0 + 0.5 * g3)  # 4.25
    g1 = 2.0 + 0.5 * 1.0  # truncated: bootstrap V(final) = 1
    g0 = 1.0 + 0.5 * (0.5 * 1.0 + 0.5 * g1)
    assert g == pytest.approx([g0, g1, g2, g3])


def test_a_nan_window_is_skipped_and_never_reaches_the_weights():
    env = PointMassEnv(num_envs=8, nan_at_step=3)
    shac = make(env)
    before = [p.detach().clone() for p in shac.actor.parameters()]
    obs, metrics, _ = shac.train_window(env, env.reset())
    assert metrics['skipped_window'] == 1.0
    for old, new in zip(before, shac.actor.parameters()):
        assert torch.equal(old, new)
    for p in shac.critic.parameters():
        assert torch.all(torch.isfinite(p))
    obs, metrics, _ = shac.train_window(env, obs)  # the next window trains again
    assert metrics['skipped_window'] == 0.0


def test_gradient_does_not_cross_windows():
    env = PointMassEnv(num_envs=4)
    shac = make(env)
    obs, _, _ = shac.train_window(env, env.reset())
    assert not obs.requires_grad
    assert env.v.grad_fn is not None  # the env still holds the last window's graph ...
    shac.train_window(env, obs)  # ... which train_window cuts (else: backward twice -> error)
    assert shac.iterations == 2


def test_state_dict_round_trip():
    env = PointMassEnv(num_envs=4)
    a, b = make(env), make(env)
    a.train_window(env, env.reset())
    b.load_state_dict(a.state_dict())
    obs = torch.randn(5, 4)
    torch.testing.assert_close(a.actor(a.normalize(obs)), b.actor(b.normalize(obs)))
    assert b.iterations == 1


def test_per_window_normaliser_acts_on_the_window_start_statistics():
    env = PointMassEnv(num_envs=8, seed=2)
    shac = make(env, normalizer_update='window')
    obs = env.reset()
    shac.train_window(env, obs)  # the first window: start states, then the rest of the window
    assert float(shac.normalizer.count) == 8 * 16
    start = (shac.normalizer.mean.clone(), shac.normalizer.var.clone())
    seen = []
    step = env.step

    def watched(action):  # the statistics every action of the window was chosen with
        seen.append((shac.normalizer.mean.clone(), shac.normalizer.var.clone()))
        return step(action)

    env.step = watched
    shac.train_window(env, env.reset())
    assert len(seen) == 16
    assert all(torch.equal(m, start[0]) and torch.equal(v, start[1]) for m, v in seen)
    assert float(shac.normalizer.count) == 8 * 32  # merged once, after the window
    assert not torch.equal(shac.normalizer.mean, start[0])
    with pytest.raises(ValueError, match='normalizer_update'):
        make(env, normalizer_update='episode')


@pytest.mark.parametrize('v_max, falls', [(0.15, True), (100.0, False)])
def test_terminal_gradient_changes_the_step_only_where_an_episode_terminates(v_max, falls):
    runs = []
    for weight in (0.0, 1.0):
        env = PointMassEnv(num_envs=8, v_max=v_max, seed=3)
        shac = make(env, terminal_gradient=weight)
        _, metrics, batch = shac.train_window(env, env.reset())
        runs.append((metrics, batch, [p.detach().clone() for p in shac.actor.parameters()]))
    (m0, b0, p0), (m1, b1, p1) = runs
    assert bool(b0['terminated'].any()) == falls
    assert m1['actor_loss'] == pytest.approx(m0['actor_loss'], rel=1e-6)  # zero in value
    same = all(torch.equal(a, b) for a, b in zip(p0, p1))
    assert same != falls  # the critic's slope at a fall moved the actor differently


def test_a_gradient_spike_is_held_back_until_the_skips_run_out():
    env = PointMassEnv(num_envs=8, seed=2)
    shac = make(env, spike_factor=5.0, spike_max_skips=2)
    shac.spike_norms = [1e-9] * 20  # every real window is a spike against this history
    obs = env.reset()
    for expected in (1.0, 1.0, 0.0):  # two held back, then the third applied
        actor = [p.detach().clone() for p in shac.actor.parameters()]
        critic = [p.detach().clone() for p in shac.critic.parameters()]
        obs, metrics, _ = shac.train_window(env, obs)
        assert metrics['spike_skipped'] == expected
        moved = not all(torch.equal(a, p) for a, p in zip(actor, shac.actor.parameters()))
        assert moved == (expected == 0.0)
        assert not all(torch.equal(a, p) for a, p in zip(critic, shac.critic.parameters()))
    assert shac.spike_skips == 0 and shac.spike_norms[-1] == pytest.approx(
        metrics['actor_grad_norm']
    )
    state = shac.state_dict()
    fresh = make(env, spike_factor=5.0)
    fresh.load_state_dict(state)
    assert fresh.spike_norms == shac.spike_norms


def test_the_spike_test_judges_against_the_median_of_applied_windows():
    env = PointMassEnv(num_envs=2)
    shac = make(env, spike_factor=3.0, spike_history=20)
    assert not any(shac._is_spike(100.0 * (i % 2) + 1.0) for i in range(9))  # too few to judge
    for _ in range(20):
        assert not shac._is_spike(1.0)
    assert len(shac.spike_norms) == 20  # the history is capped
    assert not shac._is_spike(2.9) and shac._is_spike(3.1)
    assert shac.spike_norms[-1] == 2.9  # a held-back norm stays out of the median
    off = make(env)
    off.spike_norms = [1e-9] * 20
    assert not off._is_spike(1e6)


class PrivilegedPointMass(PointMassEnv):
    """The toy task with a privileged state for the critic: the squared speed |v|^2 (N, 1)."""

    privileged_dim = 1

    def privileged(self):
        return torch.sum(self.v**2, dim=1, keepdim=True)

    def step(self, action):
        obs, reward, terminated, truncated, extras = super().step(action)
        final = extras['final_obs'][:, :2]
        extras['final_privileged'] = torch.sum(final**2, dim=1, keepdim=True)
        return obs, reward, terminated, truncated, extras


def make_privileged(env, **overrides):
    torch.manual_seed(0)
    cfg = SHACConfig(horizon=16, actor_hidden=(32, 32), critic_hidden=(32, 32),
                     critic_iterations=4, critic_privileged=True, **overrides)  # fmt: skip
    b = (env.action_high + env.action_low) / 2
    c = (env.action_high - env.action_low) / 2
    return SHAC(env.obs_dim, b, c, cfg, privileged_dim=env.privileged_dim)


def test_a_privileged_critic_sees_the_state_each_step_acted_from():
    env = PrivilegedPointMass(num_envs=8, v_max=0.3, seed=4)  # some episodes terminate
    shac = make_privileged(env)
    assert shac.critic.net[0][0].in_features == env.obs_dim + 1
    _, metrics, batch = shac.train_window(env, env.reset())
    assert batch['privileged'].shape == (16, 8, 1)
    assert bool(batch['terminated'].any())
    speed2 = torch.sum(batch['obs'][..., :2] ** 2, dim=-1, keepdim=True)
    torch.testing.assert_close(batch['privileged'], speed2)
    final2 = torch.sum(batch['next_obs'][..., :2] ** 2, dim=-1, keepdim=True)  # pre-reset
    torch.testing.assert_close(batch['next_privileged'], final2)
    assert np.isfinite(metrics['critic_loss'])


def test_the_actor_gradient_flows_through_the_privileged_value():
    moved = []
    for cut in (False, True):
        env = PrivilegedPointMass(num_envs=8, seed=5)
        shac = make_privileged(env)
        with torch.no_grad():  # a target critic that values only the privileged entry
            first = shac.target_critic.net[0][0]
            first.weight[:, : env.obs_dim] = 0.0
            if cut:
                first.weight[:, env.obs_dim :] = 0.0
        before = [p.detach().clone() for p in shac.actor.parameters()]
        shac.train_window(env, env.reset())
        moved.append([p.detach() - b for p, b in zip(shac.actor.parameters(), before)])
    assert not all(torch.allclose(a, b) for a, b in zip(*moved))


def test_a_privileged_critic_needs_an_env_with_privileged_state():
    with pytest.raises(ValueError, match='privileged'):
        make(PointMassEnv(num_envs=2), critic_privileged=True)


def test_the_trust_region_scales_an_actor_step_back_to_its_limit():
    changes = {}
    for limit in (0.0, 1e-4):
        env = PointMassEnv(num_envs=8, seed=6)
        shac = make(env, max_action_change=limit)
        obs = env.reset()
        seen = []
        step = env.step

        def watched(action, seen=seen, step=step, env=env):  # what the window acted on
            seen.append(env.obs().detach())  # (N, 4)
            return step(action)

        env.step = watched
        before = [p.detach().clone() for p in shac.actor.parameters()]
        _, metrics, _ = shac.train_window(env, obs)
        probe = shac.normalize(torch.cat(seen))
        with torch.no_grad():
            after = torch.tanh(shac.actor.gaussian(probe)[0])
            for p, old in zip(shac.actor.parameters(), before):
                p.copy_(old)
            start = torch.tanh(shac.actor.gaussian(probe)[0])
        changes[limit] = (float(torch.mean(torch.abs(after - start))), metrics)
    free, limited = changes[0.0], changes[1e-4]
    assert 'trust_scale' not in free[1]
    assert free[1]['action_change'] == pytest.approx(free[0], rel=1e-4)
    assert free[0] > 1e-3  # an unlimited step moves the actions further than the limit
    assert limited[1]['trust_scale'] < 0.2
    assert limited[0] == pytest.approx(1e-4, rel=0.2)  # scaled back (to first order) to 1e-4


def test_a_drop_of_the_mean_reward_restores_the_state_of_its_best_and_resumes_with_it():
    env = PointMassEnv(num_envs=8, seed=1)
    shac = make(env, rollback_drop=0.3, rollback_windows=3)
    weight = next(shac.actor.parameters())

    def window(reward, nudge):
        with torch.no_grad():
            weight.add_(nudge)  # stands for the window's actor step
        return shac._rollback(reward)

    assert window(1.0, 0.0)['rollback'] == 0.0  # fewer than 3 windows: no judgement
    window(1.0, 0.0)
    assert window(1.0, 0.0)['reward_mean_recent'] == pytest.approx(1.0)  # best 1.0, kept
    best = weight.detach().clone()
    assert window(0.9, 1.0)['rollback'] == 0.0  # mean 0.97: within 30 %
    assert window(0.5, 1.0)['rollback'] == 0.0  # mean 0.8: within 30 %
    assert not torch.equal(weight, best)
    metrics = window(0.0, 1.0)  # mean 0.47, below 0.7 of the best
    assert metrics['rollback'] == 1.0 and metrics['rollbacks'] == 1.0
    torch.testing.assert_close(weight.detach(), best)
    assert window(0.0, 0.0)['rollback'] == 0.0  # the recent means start again after it
    window(0.0, 0.0)
    metrics = window(0.1, 0.5)  # the restored state falls short as well: no second rollback
    assert metrics['rollback'] == 0.0 and shac.rollback['best'] == pytest.approx(0.1 / 3)
    kept = weight.detach().clone()  # the present state is the new best's
    window(0.0, 0.0), window(0.0, 0.0)
    assert window(0.0, 1.0)['rollback'] == 1.0  # mean 0: a drop from the new best
    torch.testing.assert_close(weight.detach(), kept)

    saved = shac.state_dict()
    fresh = make(env, rollback_drop=0.3, rollback_windows=3)
    fresh.load_state_dict(saved)
    assert fresh.rollback['count'] == 2 and fresh.rollback['best'] == pytest.approx(0.1 / 3)
    torch.testing.assert_close(fresh.rollback['state']['actor'], shac.rollback['state']['actor'])


def test_without_a_positive_best_there_is_no_rollback():
    env = PointMassEnv(num_envs=8, seed=1)
    shac = make(env, rollback_drop=0.3, rollback_windows=2)
    for reward in (-1.0, -1.0, -5.0, -5.0):
        assert shac._rollback(reward)['rollback'] == 0.0
