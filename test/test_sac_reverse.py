"""The hand-written reverse passes and the lean optimiser step against autograd and torch.optim."""

import copy
import math

import pytest
import torch

from loco_train.sac import Batch, ReplayBuffer, SAC, SACConfig
from loco_train.sac.sac import adam, fused_adam_step, masked_step

OBS, ACT, B = 7, 3, 64


def batch(seed, nan=None):
    g = torch.Generator().manual_seed(seed)
    data = dict(
        obs=torch.randn(B, OBS, generator=g) * 2,
        action=torch.rand(B, ACT, generator=g) * 2 - 1,
        reward=torch.randn(B, generator=g),
        next_obs=torch.randn(B, OBS, generator=g) * 2,
        terminated=(torch.rand(B, generator=g) < 0.1).float(),
        discount=torch.full((B,), 0.97),
    )
    if nan is not None:
        data[nan].view(-1)[5] = math.nan
    return Batch(**data)


def pair(**overrides):
    """(SAC on the reverse passes, its autograd twin with the same weights)."""
    torch.manual_seed(0)
    cfg = SACConfig(actor_hidden=(32, 16, 8), critic_hidden=(32, 16), **overrides)
    fast = SAC(OBS, [0.2, 0.0, -0.1], [0.5, 1.0, 2.0], cfg)
    fast.normalizer.update(torch.randn(500, OBS) * 2 + 1)
    slow = copy.deepcopy(fast)
    slow.reverse = False
    assert fast.reverse
    return fast, slow


def parameters(sac):
    modules = (sac.actor, sac.critic, sac.critic_target)
    return [p.detach() for m in modules for p in m.parameters()] + [sac.log_alpha.detach()]


@pytest.mark.parametrize('activation', ['relu', 'elu', 'silu', 'tanh'])
def test_updates_on_the_reverse_passes_equal_autograds(activation):
    # 3 critics, a delayed actor, and log-sigma bounds tight enough that the clamp cuts some rows
    fast, slow = pair(
        activation=activation, num_critics=3, actor_update_interval=2,
        log_sigma_bounds=(-2.5, -1.5), sigma0=0.15,
    )  # fmt: skip
    with torch.no_grad():  # spread the raw log-sigma around the bounds
        fast.actor.head.weight[ACT:].normal_(0.0, 0.3)
        fast.actor.head.bias[ACT:] = torch.tensor([-2.6, -2.0, -1.45])
        slow.actor.head.load_state_dict(fast.actor.head.state_dict())
    g_fast, g_slow = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    for i in range(12):
        m_fast, m_slow = fast.update(batch(i), g_fast), slow.update(batch(i), g_slow)
        assert m_fast.keys() == m_slow.keys()
        for key in m_fast:
            assert float(m_fast[key]) == pytest.approx(float(m_slow[key]), rel=1e-4, abs=1e-6), key
    for a, b in zip(parameters(fast), parameters(slow), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    for a, b in zip(fast.actor_optim.state.values(), slow.actor_optim.state.values(), strict=True):
        torch.testing.assert_close(a['exp_avg'], b['exp_avg'], rtol=1e-3, atol=1e-8)


def test_the_clamp_and_the_skip_are_covered():
    """The bounds above cut rows (else the clamp's pass is untested), and a NaN skips alike."""
    fast, slow = pair(log_sigma_bounds=(-2.5, -1.5))
    with torch.no_grad():
        fast.actor.head.weight[ACT:].normal_(0.0, 0.3)
        fast.actor.head.bias[ACT:] = torch.tensor([-2.6, -2.0, -1.45])
        raw = fast.actor.head(fast.actor.trunk(fast.normalize(batch(0).obs)))[:, ACT:]
    inside = (raw >= -2.5) & (raw <= -1.5)
    assert inside.any() and (~inside).any()
    before = [p.clone() for p in parameters(fast)]
    metrics = fast.update(batch(0, nan='reward'), torch.Generator().manual_seed(0))
    assert float(metrics['skipped']) == 1.0 and fast.num_skipped == 1
    for a, b in zip(before, parameters(fast), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    'overrides',
    [
        dict(critic_layer_norm=True),
        dict(matmul_dtype='bfloat16'),
        dict(critic_hidden=()),  # the action's gradient would have no hidden layer to pass
        dict(activation='elu'),
    ],
)
def test_which_configurations_the_passes_cover(overrides):
    sac = SAC(OBS, [0.0] * ACT, [1.0] * ACT, SACConfig(**overrides))
    covered = (dict(activation='elu'), dict(matmul_dtype='bfloat16'))
    assert sac.reverse == (overrides in covered)
    metrics = sac.update(batch(0), torch.Generator().manual_seed(0))
    assert float(metrics['skipped']) == 0.0 and float(metrics['actor_updates']) == 1.0


def test_the_lean_fused_step_equals_torch_adam_and_skips_on_found_inf():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(5, 4)), torch.nn.Parameter(torch.randn(4))]
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    lean, reference = adam(params, 3e-4), adam(twins, 3e-4)
    for step in range(6):
        grads = [torch.randn_like(p) for p in params]
        for p, q, g in zip(params, twins, grads, strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        skip = step == 3
        ok = torch.tensor(not skip)
        if step == 0:  # no state yet: the lean path declines and torch's step runs
            assert not fused_adam_step(lean, (~ok).float())
        masked_step(lean, ok)
        if not skip:
            reference.step()
        assert fused_adam_step(lean, torch.ones(())) if step == 5 else True
    for p, q in zip(params, twins, strict=True):
        assert torch.equal(p, q)
        assert float(lean.state[p]['step']) == float(reference.state[q]['step']) == 5.0
        assert torch.equal(lean.state[p]['exp_avg_sq'], reference.state[q]['exp_avg_sq'])


def test_batch_finite_finds_a_nan_or_inf_in_every_field():
    assert bool(batch(0).finite())
    for name in Batch.tensor_fields():
        for bad in (math.nan, math.inf, -math.inf):
            b = batch(0)
            getattr(b, name).view(-1)[-1] = bad
            assert not bool(b.finite()), (name, bad)
    empty = Batch(**{name: getattr(batch(0), name)[:0] for name in Batch.tensor_fields()})
    assert bool(empty.finite())


def test_one_step_samples_are_the_stored_transitions():
    buf = ReplayBuffer(50, 2, obs_dim=3, action_dim=2)
    g = torch.Generator().manual_seed(0)
    for t in range(80):  # wraps the ring
        done = torch.rand(2, generator=g) < 0.2
        buf.add(
            torch.full((2, 3), float(t)) + torch.tensor([[0.0], [0.5]]),
            torch.randn(2, 2, generator=g),
            torch.tensor([t + 0.25, t + 0.75]),
            torch.randn(2, 3, generator=g),
            done,
            torch.zeros(2, dtype=torch.bool),
        )
    sample = buf.sample(200, 1, 0.9, torch.Generator().manual_seed(1))
    many = buf.sample(200, 3, 0.9, torch.Generator().manual_seed(1))  # the same (t, e) drawn
    assert torch.equal(sample.obs, many.obs) and torch.equal(sample.action, many.action)
    t = sample.obs[:, 0].floor().long()
    e = (sample.obs[:, 0] - t == 0.5).long()
    row = t % buf.rows
    assert torch.all(t >= 30)  # the 50 newest steps
    assert torch.equal(sample.reward, buf.reward[row, e])
    assert torch.equal(sample.next_obs, buf.next_obs[row, e])
    assert torch.equal(sample.terminated, buf.terminated[row, e].float())
    assert torch.all(sample.discount == torch.tensor(0.9))
