"""Running observation normaliser: a torch module the exporter bakes into the ONNX graph.

Its state is three buffers (mean, var, count), so it travels in state_dict() and exports as
constants; forward() is a pure elementwise map, (x - mean) / sqrt(var + eps) clipped to +-clip.
"""

import torch
from torch import nn


class EmpiricalNormalizer(nn.Module):
    """Normalise observations with the running mean and variance of everything seen so far."""

    def __init__(self, dim: int, eps: float = 1e-8, clip: float | None = 10.0):
        super().__init__()
        self.eps, self.clip = float(eps), clip
        self.register_buffer('mean', torch.zeros(dim))  # (dim,)
        self.register_buffer('var', torch.ones(dim))  # (dim,) population variance
        self.register_buffer('count', torch.zeros((), dtype=torch.float64))  # samples seen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return (x - mean) / sqrt(var + eps), clipped to [-clip, clip]; x is (..., dim)."""
        y = (x - self.mean) / torch.sqrt(self.var + self.eps)
        return y if self.clip is None else y.clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge a batch x (B, dim) into the statistics (Chan et al.'s parallel update)."""
        x = x.reshape(-1, self.mean.shape[0]).to(torch.float64)
        if x.shape[0] == 0 or not torch.isfinite(x).all():
            return  # a NaN observation must not poison the normaliser baked into the policy
        n_b = x.shape[0]
        mean_b = x.mean(dim=0)
        var_b = x.var(dim=0, unbiased=False)
        n_a = self.count
        n = n_a + n_b
        delta = mean_b - self.mean.double()
        mean = self.mean.double() + delta * (n_b / n)
        # M2 = M2_a + M2_b + delta^2 n_a n_b / n; var = M2 / n.
        m2 = self.var.double() * n_a + var_b * n_b + delta**2 * (n_a * n_b / n)
        self.mean.copy_(mean.to(self.mean.dtype))
        self.var.copy_((m2 / n).to(self.var.dtype))
        self.count.copy_(n)

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        """Map normalised values back to observation units (ignores clipping)."""
        return y * torch.sqrt(self.var + self.eps) + self.mean
