"""Fix 3: a timeout bootstraps from the observation before the reset, never the one after it.

Scripted environments whose pre-reset and post-reset observations differ go through the real
collection path (VecEnv -> SACRunner -> ReplayBuffer -> n-step Batch -> SAC target).
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

from loco_train.envs.vec_env import make_env
from loco_train.runners.sac import RunnerConfig, SACRunner

RESET_OBS = -10.0
HORIZON = 3


class ScriptedTimeoutEnv(gym.Env):
    """obs = steps taken in the episode (1, 2, 3); truncated after 3 steps; reset shows -10."""

    observation_space = gym.spaces.Box(-100.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k = 0
        return np.array([RESET_OBS], np.float32), {}

    def step(self, action):
        self.k += 1
        return np.array([self.k], np.float32), float(self.k), False, self.k == HORIZON, {}


gym.register('ScriptedTimeout-v0', entry_point=ScriptedTimeoutEnv)


class ScriptedTorchVecEnv:
    """The ANYmal-style contract: torch tensors, same-step reset, extras['final_obs'].

    Environment 0 terminates every 2 steps, environment 1 is truncated every 3 steps; obs is
    10 * env + steps in the episode, and -1 right after a reset.
    """

    num_envs, obs_dim, action_dim = 2, 1, 1
    action_low, action_high = np.array([-1.0]), np.array([1.0])

    def reset(self, seed=None):
        self.k = torch.zeros(2)
        return torch.full((2, 1), -1.0)

    def step(self, actions):
        self.k += 1
        final = (10 * torch.arange(2) + self.k)[:, None].float()
        terminated = torch.tensor([self.k[0] == 2, False])
        truncated = torch.tensor([False, self.k[1] == 3])
        done = terminated | truncated
        self.k[done] = 0
        obs = torch.where(done[:, None], torch.tensor(-1.0), final)
        return obs, torch.ones(2), terminated, truncated, {'final_obs': final}

    def close(self):
        pass


def collect(env, steps, tmp_path, learning_starts=10**9):
    cfg = RunnerConfig(
        total_steps=steps,
        learning_starts=learning_starts,
        eval_episodes=0,
        log_dir=str(tmp_path),
        progress=False,
        checkpoint_interval=0,
    )
    cfg.sac.batch_size = 4
    runner = SACRunner(env, cfg)
    runner.learn()
    return runner


def test_gymnasium_adapter_returns_the_pre_reset_observation(tmp_path):
    env = make_env('gymnasium:ScriptedTimeout-v0', num_envs=2, seed=0)
    obs = env.reset()
    assert obs.tolist() == [[RESET_OBS]] * 2
    for _ in range(HORIZON):
        obs, reward, terminated, truncated, extras = env.step(torch.zeros(2, 1))
    assert truncated.tolist() == [True, True] and terminated.tolist() == [False, False]
    assert obs.tolist() == [[RESET_OBS]] * 2  # gymnasium already reset them (same step)
    assert extras['final_obs'].tolist() == [[float(HORIZON)]] * 2  # what really followed
    obs, reward, *_ = env.step(torch.zeros(2, 1))
    assert obs.tolist() == [[1.0]] * 2 and reward.tolist() == [1.0, 1.0]  # no dummy step
    env.close()


def test_timeout_bootstrap_uses_the_pre_reset_observation(tmp_path):
    env = make_env('gymnasium:ScriptedTimeout-v0', num_envs=1, seed=0)
    runner = collect(env, 9, tmp_path)
    buf = runner.buffer
    obs, next_obs = buf.obs[:9, 0, 0].tolist(), buf.next_obs[:9, 0, 0].tolist()
    assert obs == [RESET_OBS, 1, 2, RESET_OBS, 1, 2, RESET_OBS, 1, 2]
    assert next_obs == [1, 2, 3, 1, 2, 3, 1, 2, 3]  # 3, not -10, after each timeout
    assert buf.truncated[:9, 0].tolist() == [False, False, True] * 3
    # n = 3 from the first step of the second episode: the window ends in the timeout.
    batch = buf.n_step(torch.tensor([3]), torch.tensor([0]), 3, 0.9)
    assert float(batch.next_obs) == 3.0 and float(batch.terminated) == 0.0
    assert float(batch.reward) == pytest.approx(1 + 0.9 * 2 + 0.81 * 3)
    # SAC.update forms Q_target = reward + discount * (1 - terminated) * V(batch.next_obs)
    # (test_sac_sac.test_target_is_min_over_ensemble_minus_alpha_log_pi), i.e. V(3), not V(-10).
    assert np.isfinite(float(runner.sac.update(batch)['value/q_target_mean']))


def test_torch_vec_env_contract_terminated_and_truncated_kept_apart(tmp_path):
    runner = collect(ScriptedTorchVecEnv(), 12, tmp_path, learning_starts=8)
    buf = runner.buffer
    assert runner.sac.num_updates > 0  # the update path runs on this env too
    assert buf.next_obs[:6, 0, 0].tolist() == [1, 2, 1, 2, 1, 2]
    assert buf.obs[:6, 0, 0].tolist() == [-1, 1, -1, 1, -1, 1]
    assert buf.terminated[:6, 0].tolist() == [False, True] * 3
    assert buf.next_obs[:6, 1, 0].tolist() == [11, 12, 13, 11, 12, 13]
    assert buf.truncated[:6, 1].tolist() == [False, False, True] * 2
    assert not buf.terminated[:6, 1].any() and not buf.truncated[:6, 0].any()
    # Env 0 ends in a termination: bootstrap 0. Env 1 in a timeout: bootstrap from 13.
    batch = buf.n_step(torch.tensor([0, 0]), torch.tensor([0, 1]), 3, 0.5)
    assert batch.terminated.tolist() == [1.0, 0.0]
    assert batch.next_obs[:, 0].tolist() == [2.0, 13.0]
    assert batch.discount.tolist() == [0.25, 0.125]
    assert runner.episodes == 3 + 2 and list(runner.recent_returns)[:3] == [2.0, 3.0, 2.0]
    assert list(runner.recent_lengths)[:3] == [2, 3, 2]
