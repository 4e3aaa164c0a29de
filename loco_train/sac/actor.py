"""The SAC actor: a state-dependent Gaussian squashed by tanh into the robot's action bounds.

Sabatini, Li, Hutter, Sec. 3.2-3.3. With latent x = mu(s) + sigma(s) * eps, eps ~ N(0, I):

    a = b + c * tanh(x)                                                    (d,)
    log pi(a|s) = sum_j log N(x_j; mu_j, sigma_j^2) - sum_j log(1 - tanh^2 x_j) - sum_j log c_j

b (centre) and c (half-range) are per action dimension and come from the real bounds of the
action space (fix 1: bounded actions), and the last layer is initialised so that sigma = sigma0
for every input and the mean sits at b (fix 2: small initial sigma).
"""

import math

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from loco_policy import spec
from loco_train.sac.mlp import mlp

LOG_2 = math.log(2.0)


def bounds_from_box(low, high) -> tuple[np.ndarray, np.ndarray]:
    """Return (b, c), centre and half-range, of a finite box [low, high] (per dimension)."""
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
        raise ValueError(f'action bounds must be finite with high > low; got {low}, {high}')
    return (high + low) / 2.0, (high - low) / 2.0


def anymal_action_bounds(max_offset: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Return (b, c) in action units for ANYmal: the spec's action box, optionally narrower.

    The policy commands q* = q_default + ACTION_SCALE * a. The spec's box is centred on the
    default pose (b = 0), so that the initial mean action (tanh(0) = 0) is the standing pose, and
    its half-range is the distance from q_default to the nearer joint limit, capped at
    spec.MAX_JOINT_OFFSET, so that no target leaves the joint range. max_offset (rad) caps it
    further.
    """
    b = (spec.ACTION_HIGH + spec.ACTION_LOW) / 2.0
    c = (spec.ACTION_HIGH - spec.ACTION_LOW) / 2.0
    if max_offset is not None:
        c = np.minimum(c, max_offset / spec.ACTION_SCALE)
    return b, c


def log_one_minus_tanh_sq(x: torch.Tensor) -> torch.Tensor:
    """Return log(1 - tanh^2 x) elementwise, stable: 2 (log 2 - x - softplus(-2x))."""
    return 2.0 * (LOG_2 - x - F.softplus(-2.0 * x))


def squashed_log_prob(
    x: torch.Tensor, mu: torch.Tensor, log_sigma: torch.Tensor, c: torch.Tensor
) -> torch.Tensor:
    """Return log pi(a|s) (B,) of a = b + c tanh(x) from the latent x (B, d) and its Gaussian."""
    # log N(x; mu, sigma^2) summed over d, then the tanh and affine Jacobians (paper eq. 3.2).
    log_normal = -0.5 * ((x - mu) / log_sigma.exp()) ** 2 - log_sigma - 0.5 * math.log(2 * math.pi)
    return (log_normal - log_one_minus_tanh_sq(x) - torch.log(c)).sum(-1)


class SquashedGaussianActor(nn.Module):
    """pi_phi(a|s): MLP trunk, one linear layer split into mean and log-std heads."""

    def __init__(
        self,
        obs_dim: int,
        action_bias,
        action_scale,
        hidden: tuple[int, ...] = (256, 256),
        activation: str = 'relu',
        sigma0: float = 0.15,
        log_sigma_bounds: tuple[float, float] = (-5.0, 2.0),
        mean_init_std: float = 1e-4,
        layer_norm: bool = False,
    ):
        super().__init__()
        b = torch.as_tensor(np.asarray(action_bias), dtype=torch.float32).reshape(-1)
        c = torch.as_tensor(np.asarray(action_scale), dtype=torch.float32).reshape(-1)
        if b.shape != c.shape or not torch.all(c > 0):
            raise ValueError('action bias and scale need the same shape and a positive scale')
        l_min, l_max = log_sigma_bounds
        if not l_min < math.log(sigma0) < l_max:
            raise ValueError(f'log(sigma0) = {math.log(sigma0):.3f} is outside {log_sigma_bounds}')
        self.action_dim = d = b.numel()
        self.log_sigma_bounds = (float(l_min), float(l_max))
        self.register_buffer('b', b)  # (d,) centre of the action box
        self.register_buffer('c', c)  # (d,) half-range of the action box
        self.trunk = mlp(obs_dim, hidden, activation, layer_norm)
        self.head = nn.Linear(hidden[-1] if hidden else obs_dim, 2 * d)  # z = W h + b -> [mu, l]
        with torch.no_grad():
            # Sec. 3.3: [W_mu]_ij ~ N(0, eps), b_mu = 0; W_logsigma = 0, b_logsigma = log(sigma0).
            self.head.weight[:d].normal_(0.0, mean_init_std)
            self.head.bias[:d].zero_()
            self.head.weight[d:].zero_()
            self.head.bias[d:].fill_(math.log(sigma0))

    def gaussian(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return mu (B, d) and log sigma = clip(l~, l_min, l_max) (B, d) of the latent x."""
        h = self.trunk(obs)  # (B, hidden[-1])
        if h.dtype == torch.float32:
            z = self.head(h)  # (B, 2d)
        else:  # a mixed-precision update (loco_train.sac.precision): the head in float32
            with torch.autocast(h.device.type, enabled=False):
                z = self.head(h.float())
        mu, raw_log_sigma = z.chunk(2, dim=-1)
        return mu, raw_log_sigma.clamp(*self.log_sigma_bounds)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Return the deterministic action b + c tanh(mu(s)) (B, d), the one the robot runs."""
        mu, _ = self.gaussian(obs)
        return self.b + self.c * torch.tanh(mu)

    def sample(
        self,
        obs: torch.Tensor,
        generator: torch.Generator | None = None,
        eps: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw a = f_phi(eps; s) (B, d) by reparameterisation and return it with log pi (B,).

        eps (B, d): the standard normal noise, if drawn by the caller; else drawn here.
        """
        mu, log_sigma = self.gaussian(obs)
        if eps is None:
            eps = torch.randn(mu.shape, generator=generator, device=mu.device, dtype=mu.dtype)
        x = mu + log_sigma.exp() * eps  # (B, d) latent action
        a = self.b + self.c * torch.tanh(x)  # (B, d) bounded action
        return a, squashed_log_prob(x, mu, log_sigma, self.c)
