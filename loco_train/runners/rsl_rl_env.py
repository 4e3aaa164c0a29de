"""Adapter: any loco_train VecEnv as rsl-rl-lib's VecEnv, so its PPO trains on it unchanged.

rsl-rl (5.x) wants TensorDict observations, one `dones` flag and extras['time_outs'] for
truncations; it bootstraps a timeout from the post-reset observation (its approximation, kept
as it is: this is the baseline). Episode returns and lengths go to extras['log'].
"""

from rsl_rl.env import VecEnv as RslVecEnv
from tensordict import TensorDict
import torch


class RslRlEnv(RslVecEnv):
    """Wrap a loco_train VecEnv (torch tensors, terminated/truncated split) for rsl-rl."""

    def __init__(self, env, max_episode_length, device='cpu'):
        """env: loco_train VecEnv; max_episode_length: control steps before truncation."""
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = env.action_dim
        self.max_episode_length = int(max_episode_length)
        self.device = torch.device(device)
        self.cfg = {'env': getattr(env, 'name', type(env).__name__)}
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self._obs = env.reset()
        self._return = torch.zeros(self.num_envs, device=self.device)

    def get_observations(self):
        """Current observations as TensorDict({'policy': (N, obs_dim)})."""
        return TensorDict({'policy': self._obs.detach()}, batch_size=[self.num_envs])

    def step(self, actions):
        """Step; return (obs TensorDict, rewards (N,), dones (N,), extras with time_outs)."""
        low = torch.as_tensor(self.env.action_low, dtype=actions.dtype, device=actions.device)
        high = torch.as_tensor(self.env.action_high, dtype=actions.dtype, device=actions.device)
        obs, reward, terminated, truncated, extras = self.env.step(
            torch.clamp(actions, low, high)
        )  # PPO's Gaussian is unbounded; the robot's action box is not
        self._obs = obs.detach()
        self.episode_length_buf += 1
        self._return += reward.detach()
        done = terminated | truncated
        log = {f'/{k}': v for k, v in extras.get('log', {}).items()}
        if bool(done.any()):
            log['/episode_return'] = self._return[done].mean()
            log['/episode_length'] = self.episode_length_buf[done].float().mean()
            self._return[done] = 0.0
            self.episode_length_buf[done] = 0
        out = {'time_outs': truncated.detach(), 'log': log}
        return self.get_observations(), reward.detach(), done.detach(), out
