"""What SAC.update consumes: transitions with their n-step return and bootstrap formed."""

from dataclasses import dataclass, fields
import math

import torch


@dataclass(frozen=True)
class BatchPart:
    """Where a data-parallel rank's batch sits in the global batch all ranks draw together."""

    rows: torch.Tensor
    """(B,) long: the positions of this rank's transitions among the global batch's."""
    total: int
    """B_total, the global batch size (every rank's transitions together)."""


@dataclass
class Batch:
    """B transitions, each ready for Q_target = reward + discount * (1 - terminated) * V(next_obs).

    The replay buffer builds it with n-step aggregation; the online sidecar can build it from
    single transitions (reward = r_t, discount = gamma, next_obs = s_{t+1} before any reset).
    """

    obs: torch.Tensor
    """s_t (B, obs_dim), raw (the algorithm normalises)."""
    action: torch.Tensor
    """a_t (B, action_dim), inside the action bounds."""
    reward: torch.Tensor
    """sum_k gamma^k S_k r_{t+k} (B,): discounted reward over the window actually used."""
    next_obs: torch.Tensor
    """s~ (B, obs_dim): the state to bootstrap from; after a timeout the pre-reset one."""
    terminated: torch.Tensor
    """(B,) 1.0 where the window ended in a real termination (bootstrap 0), else 0.0."""
    discount: torch.Tensor
    """gamma^n_eff (B,), n_eff the number of steps in the window."""
    part: BatchPart | None = None
    """Set on a data-parallel rank: this batch is part of a global one (None: the whole)."""

    def to(self, device) -> 'Batch':
        """Return the batch on another device."""
        moved = {name: getattr(self, name).to(device) for name in self.tensor_fields()}
        part = self.part and BatchPart(self.part.rows.to(device), self.part.total)
        return Batch(**moved, part=part)

    @classmethod
    def tensor_fields(cls) -> list[str]:
        """Names of the per-transition tensors (every field but part)."""
        return [f.name for f in fields(cls) if f.name != 'part']

    def finite(self) -> torch.Tensor:
        """Return a 0-d bool tensor, true when no entry is NaN or infinite (not read here)."""
        tensors = [getattr(self, name) for name in self.tensor_fields()]
        if all(t.numel() and t.is_floating_point() for t in tensors):
            # The largest |entry| of each field (NaN if any is NaN): one pass, a handful of ops.
            return torch.isfinite(torch.stack(torch._foreach_norm(tensors, math.inf))).all()
        return torch.stack([torch.isfinite(t).all() for t in tensors]).all()

    def is_finite(self) -> bool:
        """Return True when no entry is NaN or infinite (reads the flag on the host)."""
        return bool(self.finite())

    def __len__(self) -> int:
        return self.obs.shape[0]
