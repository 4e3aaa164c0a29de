"""Per-step adjoint clipping: outlier environments are bounded, typical ones untouched."""

import torch

from loco_train.envs.adjoint_clip import AdjointStats, attach, clip_rows


def test_rows_beyond_factor_times_median_are_scaled_down_to_it():
    grad = torch.ones(9, 4) * 1e-4  # row norm 2e-4
    grad[3] = 1e6  # an exploding environment
    grad[5, 0] = float('nan')  # a diverged one
    stats = AdjointStats()
    out = clip_rows(grad, 10.0, stats)
    norms = out.norm(dim=1)
    assert torch.allclose(norms[3], torch.tensor(2e-3), rtol=1e-5)  # 10 x median
    assert torch.equal(out[5], torch.zeros(4))
    typical = [i for i in range(9) if i not in (3, 5)]
    assert torch.equal(out[typical], grad[typical])
    assert stats.pop_fraction() == 2 / 9 and stats.pop_fraction() == 0.0
    # the direction of a clipped row is kept
    assert torch.allclose(out[3] / out[3].norm(), grad[3] / grad[3].norm())


def test_hook_bounds_the_gradient_reaching_an_earlier_tensor_and_passes_none():
    x = torch.ones(4, 2, requires_grad=True)
    y = attach(x * 1.0, 2.0)
    weights = torch.tensor([[1.0], [1.0], [1.0], [1e8]])
    (y * weights).sum().backward()
    assert x.grad[3].norm() <= 2.0 * x.grad[0].norm() * (1 + 1e-6)
    assert clip_rows(None, 10.0) is None
    assert attach(torch.ones(2, 2), 10.0) is not None  # no grad: no hook, no error
