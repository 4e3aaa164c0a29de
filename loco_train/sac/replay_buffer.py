"""Replay buffer: a preallocated ring of tensors, N environments per row, n-step sampling.

Storage is time-major, (T, N, ...) with T = ceil(capacity / N) rows, so the n steps that follow
a transition of environment e are rows t+1..t+n-1 of column e. Every transition keeps its
terminated and truncated flags apart and the observation that really followed it (on a reset,
the final observation before the reset), so n-step targets (Sabatini, Li, Hutter, Sec. 3.4-3.5)

    Q_target = sum_{k<n} gamma^k S_k r_{t+k} + gamma^n S_n V(s~_{t+n})
               + sum_{k<n} gamma^(k+1) S_k b_{t+k} V(s~_{t+k+1})

are formed at sampling time, where S_k = prod_{j<k} (1 - done_{t+j}) stops the window at an
episode end, b marks a truncation (timeout) and s~ is the pre-reset observation. Exactly one
bootstrap term survives per window, so each sample carries one (reward, next_obs, discount,
terminated) tuple: see Batch.
"""

import math

import torch

from loco_train.policy.atomic_io import atomic_torch_save, torch_load
from loco_train.sac.batch import Batch, BatchPart

FORMAT = 1
"""Version of the saved file layout."""


class ReplayBuffer:
    """Ring buffer of (s, a, r, s', terminated, truncated) for N parallel environments."""

    FIELDS = ('obs', 'action', 'reward', 'next_obs', 'terminated', 'truncated')

    def __init__(self, capacity: int, num_envs: int, obs_dim: int, action_dim: int, device='cpu'):
        if capacity < num_envs:
            raise ValueError(f'capacity {capacity} is below one row of {num_envs} environments')
        self.num_envs, self.obs_dim, self.action_dim = num_envs, obs_dim, action_dim
        self.rows = math.ceil(capacity / num_envs)  # T
        self.device = torch.device(device)
        T, N, f32 = self.rows, num_envs, dict(dtype=torch.float32, device=self.device)
        self.obs = torch.zeros(T, N, obs_dim, **f32)
        self.action = torch.zeros(T, N, action_dim, **f32)
        self.reward = torch.zeros(T, N, **f32)
        self.next_obs = torch.zeros(T, N, obs_dim, **f32)  # s_{t+1}, pre-reset where done
        self.terminated = torch.zeros(T, N, dtype=torch.bool, device=self.device)
        self.truncated = torch.zeros(T, N, dtype=torch.bool, device=self.device)
        self.ptr = 0  # next row to write
        self.size = 0  # rows filled

    @property
    def capacity(self) -> int:
        """Capacity in transitions (T * N)."""
        return self.rows * self.num_envs

    def __len__(self) -> int:
        """Number of stored transitions."""
        return self.size * self.num_envs

    def add(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        """Append one step of all N environments; next_obs must be the pre-reset one where done."""
        row = self.ptr
        self.obs[row] = obs
        self.action[row] = action
        self.reward[row] = reward
        self.next_obs[row] = next_obs
        self.terminated[row] = terminated
        self.truncated[row] = truncated
        self.ptr = (row + 1) % self.rows
        self.size = min(self.size + 1, self.rows)

    def extend(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        """Append S steps at once: each argument (S, N, ...), as add() takes (N, ...).

        The same result as S calls of add(); beyond T rows the oldest are dropped.
        """
        fields = [torch.as_tensor(f, device=self.device) for f in
                  (obs, action, reward, next_obs, terminated, truncated)]  # fmt: skip
        steps = fields[0].shape[0]
        if steps == 0:
            return
        keep = min(steps, self.rows)
        rows = (self.ptr + steps - keep + torch.arange(keep, device=self.device)) % self.rows
        for name, value in zip(self.FIELDS, fields):
            store = getattr(self, name)
            store[rows] = value[steps - keep :].reshape(keep, *store.shape[1:]).to(store.dtype)
        self.ptr = (self.ptr + steps) % self.rows
        self.size = min(self.size + steps, self.rows)

    def sample(
        self,
        batch_size: int,
        n_step: int,
        gamma: float,
        generator: torch.Generator | None = None,
        shard: tuple[int, int] | None = None,
    ) -> Batch:
        """Draw batch_size transitions uniformly and return their n-step targets' ingredients.

        shard (offset, total): this buffer holds environments [offset, offset + N) of a
        population of total held by data-parallel ranks in step. Every rank then draws the same
        global batch (the generator is seeded alike) and keeps the transitions of its own
        environments, so K ranks together sample exactly what one buffer of all would.
        """
        if self.size == 0:
            raise RuntimeError('cannot sample from an empty replay buffer')
        opts = dict(generator=generator, device=self.device)
        t = torch.randint(0, self.size, (batch_size,), **opts)  # (B,) age index, 0 = oldest row
        if shard is None:
            e = torch.randint(0, self.num_envs, (batch_size,), **opts)  # (B,) environment
            return self.n_step(t, e, n_step, gamma)
        offset, total = shard
        e = torch.randint(0, total, (batch_size,), **opts) - offset  # (B,) local environment
        rows = torch.nonzero((e >= 0) & (e < self.num_envs)).squeeze(1)  # (B_r,) ours
        batch = self.n_step(t[rows], e[rows], n_step, gamma)
        batch.part = BatchPart(rows, batch_size)
        return batch

    def n_step(self, t: torch.Tensor, e: torch.Tensor, n_step: int, gamma: float) -> Batch:
        """Aggregate the n-step window starting at age index t (B,) of environment e (B,)."""
        if n_step < 1:
            raise ValueError('n_step must be at least 1')
        oldest = (self.ptr - self.size) % self.rows
        if n_step == 1:  # the window is step t alone: no aggregation to do
            row = (oldest + t) % self.rows  # (B,)
            return Batch(
                obs=self.obs[row, e],
                action=self.action[row, e],
                reward=self.reward[row, e],
                next_obs=self.next_obs[row, e],
                terminated=self.terminated[row, e].float(),
                discount=torch.full(t.shape, float(gamma), device=self.device),
            )
        k = torch.arange(n_step, device=self.device)  # (n,)
        ages = t[:, None] + k  # (B, n)
        rows = (oldest + ages) % self.rows  # (B, n) physical rows of steps t..t+n-1
        cols = e[:, None].expand_as(rows)
        stored = ages < self.size  # (B, n) the window also stops at the newest stored step
        done = self.terminated[rows, cols] | self.truncated[rows, cols]  # (B, n)
        # S_k = prod_{j<k} (1 - done_{t+j}), and 0 past the newest stored step: (B, n).
        ended_before = torch.cumsum(done.float(), dim=1) - done.float()
        S = (ended_before == 0) & stored
        n_eff = S.sum(dim=1)  # (B,) >= 1: step t itself is always in the window
        gamma_k = gamma ** k.float()  # (n,)
        reward = (gamma_k * S * self.reward[rows, cols]).sum(dim=1)  # sum_k gamma^k S_k r_{t+k}
        last = rows.gather(1, (n_eff - 1)[:, None]).squeeze(1)  # (B,) row of step t + n_eff - 1
        return Batch(
            obs=self.obs[rows[:, 0], e],
            action=self.action[rows[:, 0], e],
            reward=reward,
            # s~: the observation after the window's last step, pre-reset if it ended an episode.
            next_obs=self.next_obs[last, e],
            terminated=self.terminated[last, e].float(),
            discount=gamma ** n_eff.float(),
        )

    def state_dict(self) -> dict:
        """Return the stored transitions, oldest first, and the layout (no unused rows)."""
        order = (torch.arange(self.size, device=self.device) + self.ptr - self.size) % self.rows
        state = {name: getattr(self, name)[order].cpu() for name in self.FIELDS}
        state.update(format=FORMAT, rows=self.rows, num_envs=self.num_envs)
        return state

    def load_state_dict(self, state: dict) -> None:
        """Refill the ring from state_dict() output; keeps the newest rows if capacity shrank."""
        if state.get('format') != FORMAT or state['num_envs'] != self.num_envs:
            raise ValueError('replay file does not match this buffer (format or number of envs)')
        size = state['obs'].shape[0]
        keep = min(size, self.rows)
        for name in self.FIELDS:
            target = getattr(self, name)
            if state[name].shape[1:] != target.shape[1:]:
                raise ValueError(f'replay field {name} has shape {tuple(state[name].shape)}')
            target[:keep] = state[name][size - keep :].to(self.device)
        self.size, self.ptr = keep, keep % self.rows

    def save(self, path: str) -> None:
        """Write the buffer to path atomically: a kill mid-save leaves the previous file intact."""
        atomic_torch_save(self.state_dict(), path)

    def load(self, path: str) -> None:
        """Refill the buffer from a file written by save()."""
        self.load_state_dict(torch_load(path, map_location='cpu'))
