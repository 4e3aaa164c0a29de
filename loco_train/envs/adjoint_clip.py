"""Per-step clipping of the state adjoint: bounds gradient explosion through contacts.

Backpropagating through H control steps of a stiff contact-rich system multiplies the state
adjoint dL/ds_t by one step Jacobian per step. For most environments it stays small, but an
environment whose feet are in a chaotic contact phase can grow it by orders of magnitude per
step (1e-4 to 1e10 over 32 ANYmal steps), and one such row then sets the direction of the whole
policy gradient. Clipping each environment's adjoint row at every step to `factor` times the
median row norm of that step keeps every environment's contribution of the same order while
leaving the typical (median) environment untouched; it is scale-free, so it does not depend on
how the loss is normalised or on the number of environments.
"""

import torch


class AdjointStats:
    """Counts of adjoint rows seen and clipped since the last read."""

    def __init__(self):
        """Start at zero."""
        self.rows = 0
        self.clipped = 0

    def pop_fraction(self):
        """Fraction of rows clipped since the last call (0 when none were seen); resets."""
        fraction = self.clipped / self.rows if self.rows else 0.0
        self.rows = self.clipped = 0
        return fraction


def clip_rows(grad, factor, stats=None):
    """Return grad (N, D) with every row's norm limited to factor x the median row norm.

    Non-finite rows become zero (the environment is reset anyway). A zero median leaves the
    finite rows unchanged. None (no gradient reached the tensor) passes through.
    """
    if grad is None:
        return None
    finite = torch.isfinite(grad).all(dim=1)
    grad = torch.where(finite[:, None], grad, torch.zeros_like(grad))
    norms = grad.norm(dim=1)  # (N,)
    limit = factor * norms.median()
    over = (norms > limit) if float(limit) > 0.0 else torch.zeros_like(finite)
    over = over | ~finite
    if stats is not None:
        stats.rows += grad.shape[0]
        stats.clipped += int(over.sum())
    scale = torch.where(norms > limit, limit / norms.clamp_min(1e-30), torch.ones_like(norms))
    return grad * scale[:, None] if float(limit) > 0.0 else grad


def attach(tensor, factor, stats=None):
    """Register the clipping on tensor's gradient (no-op when factor <= 0 or no grad)."""
    if factor > 0.0 and tensor.requires_grad:
        tensor.register_hook(lambda grad: clip_rows(grad, factor, stats))
    return tensor
