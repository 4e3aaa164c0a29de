"""Fixes 1 and 2: the bounded squashed Gaussian's log-probability, and the initial policy."""

import math

import numpy as np
import pytest
import torch
from torch.distributions import (
    AffineTransform,
    Independent,
    Normal,
    TanhTransform,
    TransformedDistribution,
)

from loco_policy import spec
from loco_train.sac import anymal_action_bounds, bounds_from_box, SAC, SACConfig
from loco_train.sac.actor import squashed_log_prob, SquashedGaussianActor


def _randomised_actor(b, c, obs_dim=5):
    """An actor whose mean and sigma vary with the input (not the near-constant initial one)."""
    torch.manual_seed(0)
    actor = SquashedGaussianActor(obs_dim, b, c, hidden=(32,), sigma0=0.5)
    with torch.no_grad():
        actor.head.weight.normal_(0.0, 0.3)
        actor.head.bias.normal_(0.0, 0.3)
    return actor


def test_log_prob_matches_torch_distributions_change_of_variables():
    b = np.array([0.5, -1.0, 0.0])
    c = np.array([2.0, 0.3, 17.0])  # asymmetric centres, very different ranges
    actor = _randomised_actor(b, c)
    obs = torch.randn(512, 5)
    a, log_pi = actor.sample(obs)
    mu, log_sigma = actor.gaussian(obs)
    reference = TransformedDistribution(
        Independent(Normal(mu.double(), log_sigma.exp().double()), 1),
        [TanhTransform(), AffineTransform(torch.tensor(b), torch.tensor(c))],
    )
    u = (a.double() - torch.tensor(b)) / torch.tensor(c)
    keep = u.abs().max(dim=1).values < 0.999  # float32 atanh loses digits right at the bounds
    assert keep.float().mean() > 0.8
    expected = reference.log_prob(a.double())
    torch.testing.assert_close(log_pi.double()[keep], expected[keep], atol=2e-3, rtol=1e-4)
    # The affine Jacobian is there: sum_j log c_j separates the two.
    assert abs(float(np.log(c).sum())) > 1.0


def test_log_prob_matches_histogram_of_samples():
    b, c, mu, sigma = 0.5, 2.0, 0.4, 0.7
    actor = SquashedGaussianActor(1, [b], [c], hidden=(), sigma0=sigma)
    with torch.no_grad():
        actor.head.weight.zero_()
        actor.head.bias.copy_(torch.tensor([mu, math.log(sigma)]))
    gen = torch.Generator().manual_seed(1)
    a, _ = actor.sample(torch.zeros(400_000, 1), generator=gen)
    a = a.double().squeeze(1)
    assert a.min() > b - c and a.max() < b + c  # bounded by construction
    edges = torch.linspace(b - 0.9 * c, b + 0.9 * c, 41, dtype=torch.float64)
    counts = torch.histc(a, bins=40, min=float(edges[0]), max=float(edges[-1]))
    width = float(edges[1] - edges[0])
    empirical = counts / (a.numel() * width)
    centres = (edges[:-1] + edges[1:]) / 2
    x = torch.atanh((centres - b) / c)[:, None]
    density = squashed_log_prob(
        x, torch.tensor([[mu]]), torch.tensor([[math.log(sigma)]]), torch.tensor([c])
    ).exp()
    torch.testing.assert_close(empirical, density, atol=0.01, rtol=0.05)


def test_log_prob_stays_finite_at_saturation():
    actor = SquashedGaussianActor(2, [0.0], [1.0], hidden=(8,))
    with torch.no_grad():
        actor.head.bias[0] = 30.0  # tanh(x) == 1 in float32
    a, log_pi = actor.sample(torch.zeros(16, 2))
    assert torch.isfinite(log_pi).all() and torch.all(a <= 1.0)


def test_anymal_bounds_are_centred_on_the_default_pose_and_inside_the_joint_limits():
    b, c = anymal_action_bounds()
    np.testing.assert_array_equal(b, np.zeros(spec.NUM_JOINTS))
    low, high = spec.joint_targets(b - c), spec.joint_targets(b + c)
    assert np.all(low >= spec.JOINT_POS_LIMITS[:, 0] - 1e-9)
    assert np.all(high <= spec.JOINT_POS_LIMITS[:, 1] + 1e-9)
    # Each joint reaches its nearer limit or the spec's offset cap: as large as the robot allows.
    touches = np.isclose(low, spec.JOINT_POS_LIMITS[:, 0]) | np.isclose(
        high, spec.JOINT_POS_LIMITS[:, 1]
    )
    capped_at_offset = np.isclose(c * spec.ACTION_SCALE, spec.MAX_JOINT_OFFSET)
    assert (touches | capped_at_offset).all() and touches.any() and capped_at_offset.any()
    _, capped = anymal_action_bounds(max_offset=0.5)
    assert np.all(capped * spec.ACTION_SCALE <= 0.5 + 1e-12)


@pytest.mark.parametrize(('scale', 'atol_rad'), [(0.0, 0.005), (1.0, 0.02), (100.0, 0.1)])
def test_initial_policy_has_sigma0_everywhere_and_mean_at_default_pose(scale, atol_rad):
    torch.manual_seed(3)
    b, c = anymal_action_bounds()
    sac = SAC(spec.OBS_DIM, b, c, SACConfig())
    sac.normalizer.update(torch.randn(1000, spec.OBS_DIM) * 5.0)
    obs = torch.randn(256, spec.OBS_DIM) * scale
    mu, log_sigma = sac.actor.gaussian(sac.normalize(obs))
    # sigma = exp(0 * h + log sigma0) = sigma0 exactly, for every input.
    torch.testing.assert_close(
        log_sigma.exp(), torch.full_like(log_sigma, 0.15), rtol=0, atol=1e-7
    )
    # Mean action b + c tanh(mu) maps to q_default (mean head: tiny weights, zero bias). The
    # tolerance grows with the input: the spec's +-3 pi HFE/KFE limits give c ~ 18 there.
    q_mean = spec.joint_targets(sac.act(obs, deterministic=True).numpy())
    default = np.broadcast_to(spec.DEFAULT_JOINT_POS, q_mean.shape)
    np.testing.assert_allclose(q_mean, default, atol=atol_rad)
    head = sac.actor.head
    d = spec.ACTION_DIM
    assert torch.all(head.bias[:d] == 0) and torch.all(head.weight[d:] == 0)
    assert 0 < head.weight[:d].std() < 2e-4


def test_log_sigma_is_clamped():
    actor = SquashedGaussianActor(3, [0.0], [1.0], hidden=(8,), log_sigma_bounds=(-5.0, 2.0))
    with torch.no_grad():
        actor.head.bias[1] = 50.0
    _, log_sigma = actor.gaussian(torch.zeros(1, 3))
    assert log_sigma.item() == 2.0


def test_bounds_reject_unbounded_boxes():
    with pytest.raises(ValueError):
        bounds_from_box([-np.inf], [1.0])
    b, c = bounds_from_box([-2.0, 0.0], [2.0, 1.0])
    np.testing.assert_array_equal(b, [0.0, 0.5])
    np.testing.assert_array_equal(c, [2.0, 0.5])
