"""The batched environment interface the trainers step, and its gymnasium adapter.

A VecEnv holds N environments as torch tensors and resets finished ones itself (same step):

    obs = env.reset()                                   # (N, obs_dim)
    obs, reward, terminated, truncated, extras = env.step(actions)
    # obs (N, obs_dim) already post-reset where an episode ended; reward (N,);
    # terminated, truncated (N,) bool; extras['final_obs'] (N, obs_dim) is the observation that
    # really followed the action, i.e. the pre-reset one where done and equal to obs elsewhere.

Trainers bootstrap a timeout from extras['final_obs'], never from the post-reset obs. The ANYmal
task provides this interface natively; gymnasium environments get it from GymnasiumVecEnv.
"""

import importlib
from typing import Protocol

import numpy as np
import torch

ANYMAL_MODULE = 'loco_train.envs.anymal'
"""Module expected to provide make_vec_env(num_envs, device, seed) -> VecEnv for --env anymal."""


class VecEnv(Protocol):
    """N environments stepped together on torch tensors; see the module docstring."""

    num_envs: int
    obs_dim: int
    action_dim: int
    action_low: np.ndarray
    """(action_dim,) lower action bound; for ANYmal spec.ACTION_LOW."""
    action_high: np.ndarray
    """(action_dim,) upper action bound; for ANYmal b + c."""

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset all environments; return obs (N, obs_dim)."""
        ...

    def step(self, actions: torch.Tensor) -> tuple:
        """Step all environments: (obs, reward, terminated, truncated, extras)."""
        ...

    def close(self) -> None:
        """Release resources."""
        ...


class GymnasiumVecEnv:
    """Any gymnasium Box-action environment id, vectorised by gymnasium, as a VecEnv.

    Uses gymnasium's SAME_STEP autoreset: the sub-environment that finished is reset inside
    the same step() and its last observation comes back in infos['final_obs'] (gymnasium 1.x;
    the default NEXT_STEP mode would instead return a dummy transition on the following step).
    """

    def __init__(self, env_id: str, num_envs: int = 1, device='cpu', seed: int | None = None):
        import gymnasium as gym  # only gymnasium's tasks need it
        from gymnasium.vector import AutoresetMode

        self.envs = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode='sync',
            vector_kwargs={'autoreset_mode': AutoresetMode.SAME_STEP},
        )
        space = self.envs.single_action_space
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(
                f'{env_id} has a {type(space).__name__} action space; SAC needs a Box'
            )
        obs_space = self.envs.single_observation_space
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            raise ValueError(f'{env_id} needs a flat Box observation space, got {obs_space}')
        self.env_id, self.num_envs, self.device = env_id, num_envs, torch.device(device)
        self.obs_dim, self.action_dim = obs_space.shape[0], space.shape[0]
        self.action_low = space.low.astype(np.float64)
        self.action_high = space.high.astype(np.float64)
        self.seed = seed

    def _tensor(self, array, dtype=torch.float32) -> torch.Tensor:
        return torch.as_tensor(np.asarray(array), dtype=dtype, device=self.device)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset all environments; return obs (N, obs_dim)."""
        seed = self.seed if seed is None else seed
        obs, _ = self.envs.reset(seed=seed)
        if seed is not None:
            self.envs.action_space.seed(seed)
        return self._tensor(obs)

    def step(self, actions: torch.Tensor) -> tuple:
        """Step all environments: (obs, reward, terminated, truncated, {'final_obs': ...})."""
        actions = actions.detach().cpu().numpy().astype(self.envs.action_space.dtype)
        obs, reward, terminated, truncated, infos = self.envs.step(actions)
        final_obs = np.array(obs, dtype=np.float32, copy=True)
        done = np.logical_or(terminated, truncated)
        if done.any():
            # infos['final_obs'] is an object array with the pre-reset observation where done.
            for i in np.flatnonzero(done):
                final_obs[i] = infos['final_obs'][i]
        return (
            self._tensor(obs),
            self._tensor(reward),
            self._tensor(terminated, torch.bool),
            self._tensor(truncated, torch.bool),
            {'final_obs': self._tensor(final_obs)},
        )

    def close(self) -> None:
        """Close the gymnasium environments."""
        self.envs.close()


def make_env(
    name: str, num_envs: int, device='cpu', seed: int | None = None, **env_kwargs
) -> VecEnv:
    """Build 'gymnasium:<ID>' (any Box-action id) or 'anymal' (env_kwargs: its config)."""
    if name.startswith('gymnasium:'):
        if env_kwargs:
            raise ValueError(
                f'{sorted(env_kwargs)} apply to the anymal environment only, not {name}'
            )
        return GymnasiumVecEnv(name.split(':', 1)[1], num_envs, device, seed)
    if name == 'anymal':
        try:
            module = importlib.import_module(ANYMAL_MODULE)
        except ModuleNotFoundError as error:
            if error.name is not None and ANYMAL_MODULE.startswith(error.name):
                raise ValueError(
                    f'the ANYmal environment cannot be loaded: {ANYMAL_MODULE} is missing from '
                    'this install. Reinstall the package, or use --env gymnasium:<ID>.'
                ) from None
            raise
        return module.make_vec_env(num_envs=num_envs, device=device, seed=seed, **env_kwargs)
    raise ValueError(f'unknown environment {name!r}: use anymal or gymnasium:<ID>')
