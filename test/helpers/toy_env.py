"""A differentiable toy VecEnv for trainer tests: 2-D point masses tracking a target velocity.

State per env: velocity v (2,) and target u (2,); action a in [-1, 1]^2 is a force.
v' = v + dt (F a - c v); reward = -|v' - u|^2; obs = [v, u]. Episodes are truncated after
`episode_steps` and terminated when |v| > v_max. Everything is torch and differentiable.
"""

import numpy as np
import torch


class PointMassEnv:
    """N point masses; differentiable step(); detach() cuts the gradient history."""

    obs_dim = 4
    action_dim = 2
    action_low = -np.ones(2)
    action_high = np.ones(2)

    def __init__(self, num_envs=32, episode_steps=50, v_max=3.0, seed=0, nan_at_step=None):
        self.num_envs, self.episode_steps, self.v_max = num_envs, episode_steps, v_max
        self.generator = torch.Generator().manual_seed(seed)
        self.dt, self.force, self.drag = 0.1, 2.0, 0.5
        self.nan_at_step = nan_at_step
        self.total_steps = 0
        self.v = torch.zeros(num_envs, 2)
        self.u = torch.zeros(num_envs, 2)
        self.t = torch.zeros(num_envs, dtype=torch.long)

    def _draw(self, mask):
        n = int(mask.sum())
        self.v = torch.where(mask[:, None], torch.zeros_like(self.v), self.v)
        u = self.u.clone()
        u[mask] = torch.rand(n, 2, generator=self.generator) * 2.0 - 1.0
        self.u = u
        self.t = torch.where(mask, torch.zeros_like(self.t), self.t)

    def obs(self):
        return torch.cat([self.v, self.u], dim=1)

    def reset(self, seed=None):
        self._draw(torch.ones(self.num_envs, dtype=torch.bool))
        return self.obs()

    def detach(self):
        self.v = self.v.detach()

    def step(self, action):
        self.v = self.v + self.dt * (self.force * action - self.drag * self.v)
        reward = -torch.sum((self.v - self.u) ** 2, dim=1)
        self.total_steps += 1
        if self.nan_at_step is not None and self.total_steps == self.nan_at_step:
            reward = reward + float('nan')
        self.t = self.t + 1
        terminated = torch.linalg.norm(self.v.detach(), dim=1) > self.v_max
        truncated = (self.t >= self.episode_steps) & ~terminated
        final_obs = self.obs()
        done = terminated | truncated
        if bool(done.any()):
            self._draw(done)
        return self.obs(), reward, terminated, truncated, {'final_obs': final_obs}

    def close(self):
        pass
