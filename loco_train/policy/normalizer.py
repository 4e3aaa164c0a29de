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
    def update(self, x: torch.Tensor, all_reduce=None) -> None:
        """Merge a batch x (B, dim) into the statistics (Chan et al.'s parallel update).

        all_reduce, when given, sums a float64 tensor over data-parallel ranks in place: the
        batch merged is then the union of every rank's x, and the statistics stay equal on all.
        """
        x = x.reshape(-1, self.mean.shape[0]).to(torch.float64)
        if all_reduce is not None:
            n_b, mean_b, var_b = self._union_moments(x, all_reduce)
            if n_b == 0:
                return
        else:
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

    def _union_moments(self, x, all_reduce):
        """(count, mean (dim,), population variance (dim,)) of every rank's batch together.

        Sums are taken about the current mean (equal on every rank), one all-reduce of
        [count, sum(x - m), sum((x - m)^2)]; a rank whose batch is not finite adds nothing.
        """
        d = self.mean.shape[0]
        shifted = x - self.mean.double()  # (B, dim)
        ok = x.shape[0] > 0 and bool(torch.isfinite(x).all())
        moments = torch.zeros(1 + 2 * d, dtype=torch.float64)
        if ok:
            moments[0] = x.shape[0]
            moments[1 : 1 + d] = shifted.sum(dim=0).cpu()
            moments[1 + d :] = (shifted**2).sum(dim=0).cpu()
        all_reduce(moments)
        n = float(moments[0])
        if n == 0:
            return 0, None, None
        s1, s2 = moments[1 : 1 + d] / n, moments[1 + d :] / n
        mean = self.mean.double() + s1.to(self.mean.device)
        var = (s2 - s1**2).clamp_min(0.0).to(self.mean.device)
        return n, mean, var

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        """Map normalised values back to observation units (ignores clipping)."""
        return y * torch.sqrt(self.var + self.eps) + self.mean
