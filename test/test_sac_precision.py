"""Mixed precision of SAC.update: bfloat16 hidden products, float32 everything the update keeps."""

import pytest
import torch

from loco_train.sac import Batch, precision, SAC, SACConfig

OBS, ACT, B = 11, 3, 256


def make_sac(dtype):
    torch.manual_seed(0)
    cfg = SACConfig(actor_hidden=(64, 64), critic_hidden=(64, 64), matmul_dtype=dtype)
    return SAC(OBS, [0.0] * ACT, [1.0] * ACT, cfg)


def make_batch():
    g = torch.Generator().manual_seed(3)
    return Batch(
        obs=torch.randn(B, OBS, generator=g),
        action=torch.rand(B, ACT, generator=g) * 2 - 1,
        reward=torch.randn(B, generator=g),
        next_obs=torch.randn(B, OBS, generator=g),
        terminated=(torch.rand(B, generator=g) < 0.1).float(),
        discount=torch.full((B,), 0.99),
    )


def grads_after_one_update(sac):
    """The critic and actor gradients of one update (the optimisers' steps are taken after).

    From autograd's hooks, or, where the hand-written reverse passes run (float32), from the
    gradients they hand to SAC._step.
    """
    seen = {}
    names = {id(sac.critic): 'critic', id(sac.actor): 'actor'}
    for name, module in (('critic', sac.critic), ('actor', sac.actor)):
        for i, p in enumerate(module.parameters()):
            p.register_post_accumulate_grad_hook(
                lambda p, key=(name, i): seen.__setitem__(key, p.grad.detach().clone())
            )
    step = sac._step

    def recording(optim, module, loss, ok, params=None, grads=None):
        if grads is not None and id(module) in names:
            seen.update({(names[id(module)], i): g.clone() for i, g in enumerate(grads)})
        return step(optim, module, loss, ok, params=params, grads=grads)

    sac._step = recording
    metrics = sac.update(make_batch(), generator=torch.Generator().manual_seed(5))
    return seen, metrics


def test_choices_resolve_and_an_unknown_one_is_refused():
    assert precision.resolve('float32', 'cpu') == torch.float32
    assert precision.resolve('bfloat16', 'cpu') == torch.bfloat16
    expected = torch.bfloat16 if precision.native_bf16_cpu() else torch.float32
    assert precision.resolve('auto', 'cpu') == expected
    with pytest.raises(ValueError, match='matmul_dtype'):
        precision.resolve('float16', 'cpu')


def test_bfloat16_update_matches_float32_to_its_precision_and_keeps_float32_state():
    exact, mixed = make_sac('float32'), make_sac('bfloat16')
    g32, m32 = grads_after_one_update(exact)
    g16, m16 = grads_after_one_update(mixed)
    assert g32.keys() == g16.keys() and len(g32) > 0
    for key in g32:  # the same gradient direction, within bfloat16's 8-bit mantissa
        a, b = g32[key].flatten(), g16[key].flatten()
        if a.norm() > 1e-6:
            cos = torch.nn.functional.cosine_similarity(a, b, dim=0)
            assert cos > 0.995, (key, float(cos))
    for key in ('loss/critic', 'value/q_target_mean', 'policy/entropy'):
        assert float(m16[key]) == pytest.approx(float(m32[key]), rel=0.03, abs=0.02)
        assert m16[key].dtype == torch.float32
    modules = (mixed.actor, mixed.critic, mixed.critic_target)
    assert all(p.dtype == torch.float32 for m in modules for p in m.parameters())
    for optim in (mixed.actor_optim, mixed.critic_optim):
        for state in optim.state.values():
            assert all(v.dtype == torch.float32 for k, v in state.items() if k != 'step')


def test_acting_stays_float32_and_equal_whatever_the_update_precision():
    exact, mixed = make_sac('float32'), make_sac('bfloat16')
    obs = torch.randn(8, OBS)
    a, b = exact.act(obs, deterministic=True), mixed.act(obs, deterministic=True)
    assert a.dtype == b.dtype == torch.float32
    assert torch.equal(a, b)  # same weights: the precision applies to updates only


def test_bfloat16_on_the_reverse_passes_matches_bfloat16_on_autograd():
    """The hand-written passes round where autocast does (the products' operands), not more."""
    reverse, autograd = make_sac('bfloat16'), make_sac('bfloat16')
    assert reverse.reverse
    autograd.reverse = False
    g_rev, m_rev = grads_after_one_update(reverse)
    g_auto, m_auto = grads_after_one_update(autograd)
    assert g_rev.keys() == g_auto.keys() and len(g_rev) > 0
    for key in g_rev:
        a, b = g_rev[key].flatten(), g_auto[key].flatten()
        assert a.dtype == torch.float32
        if b.norm() > 1e-6:
            cos = torch.nn.functional.cosine_similarity(a, b, dim=0)
            assert cos > 0.998, (key, float(cos))  # 0.9993 at the least here
    for key in ('loss/critic', 'value/q_target_mean', 'policy/entropy'):
        assert float(m_rev[key]) == pytest.approx(float(m_auto[key]), rel=0.01, abs=0.01)
    # and its products are bfloat16's: farther from float32 than float32 rounding
    exact = make_sac('float32')
    g32, _ = grads_after_one_update(exact)
    differs = [not torch.allclose(g_rev[k], g32[k], rtol=1e-5, atol=1e-7) for k in g32]
    assert sum(differs) >= len(g32) // 2
