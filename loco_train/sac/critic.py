"""The SAC critics: an ensemble of N Q-networks evaluated in one batched pass, and Polyak targets.

Sabatini, Li, Hutter, Sec. 3.1:

    J_Q = E_D[ 1/N sum_i (Q_theta_i(s, a) - Q_target)^2 ]
    V_thetabar(s') = E_{a' ~ pi}[ min_i Q_thetabar_i(s', a') - alpha log pi(a'|s') ]
    thetabar <- tau theta + (1 - tau) thetabar
"""

import copy
import math

import torch
from torch import nn
import torch.nn.functional as F

from loco_train.sac.mlp import ACTIVATIONS


class EnsembleLinear(nn.Module):
    """N independent linear layers applied in one batched matmul: (N, B, in) -> (N, B, out)."""

    def __init__(self, num_members: int, in_dim: int, out_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_members, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_dim))
        # Same init as nn.Linear for each member: U(-1/sqrt(in), 1/sqrt(in)).
        bound = 1.0 / math.sqrt(in_dim)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply member i to x[i]: (N, B, in) -> (N, B, out)."""
        if self.weight.shape[-1] == 1:
            # A one-unit head as a multiply-and-sum: a (B, in) x (in, 1) batched matmul runs at a
            # small fraction of the BLAS rate on CPU. (N, B, in) * (N, 1, in) -> (N, B, 1).
            return (x * self.weight.transpose(1, 2)).sum(-1, keepdim=True) + self.bias
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    """Layer normalisation over the features with a gain and bias per member: (N, B, F)."""

    def __init__(self, num_members: int, features: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_members, 1, features))
        self.bias = nn.Parameter(torch.zeros(num_members, 1, features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise each row of x (N, B, F) to zero mean and unit variance, then scale, shift."""
        return torch.addcmul(self.bias, F.layer_norm(x, x.shape[-1:], eps=self.eps), self.weight)


class QEnsemble(nn.Module):
    """Q_theta_i(s, a) for i = 1..N: N MLPs on [s, a] with independent weights."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        num_critics: int = 2,
        hidden: tuple[int, ...] = (256, 256),
        activation: str = 'relu',
        layer_norm: bool = False,
    ):
        """N MLPs of the given hidden sizes on [s, a].

        layer_norm: normalise each hidden layer's pre-activations (as SBX's critics do), which
        keeps Q-values bounded at high update-to-data ratios.
        """
        super().__init__()
        if num_critics < 1:
            raise ValueError('the ensemble needs at least one critic')
        self.num_critics = num_critics
        layers, width = [], obs_dim + action_dim
        for size in hidden:
            layers.append(EnsembleLinear(num_critics, width, size))
            if layer_norm:
                layers.append(EnsembleLayerNorm(num_critics, size))
            layers.append(ACTIVATIONS[activation]())
            width = size
        layers.append(EnsembleLinear(num_critics, width, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Return Q_theta_i(s, a) for every member: obs (B, o), action (B, d) -> (N, B)."""
        x = torch.cat([obs, action], dim=-1)  # (B, o + d)
        x = x.unsqueeze(0).expand(self.num_critics, *x.shape)  # (N, B, o + d)
        return self.net(x).squeeze(-1)

    def min_q(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Return min_i Q_theta_i(s, a) (B,), the pessimistic ensemble value."""
        return self(obs, action).min(dim=0).values


def make_target(critic: QEnsemble) -> QEnsemble:
    """Return a frozen copy thetabar of the critic for the target values."""
    target = copy.deepcopy(critic)
    target.requires_grad_(False)
    return target


@torch.no_grad()
def polyak_update(target: nn.Module, source: nn.Module, tau: float | torch.Tensor) -> None:
    """Move the targets towards the source: thetabar <- tau theta + (1 - tau) thetabar.

    tau: a number, or a 0-d tensor (e.g. 0 where the source's step was skipped; no host read).
    """
    target_params = list(target.parameters())
    source_params = list(source.parameters())
    if isinstance(tau, torch.Tensor):
        weight = tau.to(target_params[0].dtype).expand(1)  # foreach_lerp takes (1,) weights
        torch._foreach_lerp_(target_params, source_params, [weight] * len(target_params))
    else:
        torch._foreach_lerp_(target_params, source_params, tau)
