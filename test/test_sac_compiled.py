"""The compiled SAC update (loco_train.sac.compiled) against the eager update it replaces."""

import warnings

import pytest
import torch

from loco_train.sac import Batch, SAC, SACConfig
from loco_train.sac.batch import BatchPart
from test.test_sac_reverse import B, batch, OBS


def pair(**overrides):
    """(SAC with the compiled update, its eager twin with the same weights)."""
    torch.manual_seed(0)
    cfg = dict(actor_hidden=(32, 16), critic_hidden=(32, 16), activation='silu') | overrides
    compiled = SAC(OBS, [0.2, 0.0, -0.1], [0.5, 1.0, 2.0], SACConfig(compile=True, **cfg))
    compiled.normalizer.update(torch.randn(500, OBS) * 2 + 1)
    eager = SAC(OBS, [0.2, 0.0, -0.1], [0.5, 1.0, 2.0], SACConfig(**cfg))
    eager.load_state_dict(compiled.state_dict())
    assert compiled._compiled is not None and eager._compiled is None and eager.reverse
    return compiled, eager


def state(sac):
    modules = (sac.actor, sac.critic, sac.critic_target)
    tensors = [p.detach() for m in modules for p in m.parameters()] + [sac.log_alpha.detach()]
    for optim in (sac.critic_optim, sac.actor_optim, sac.alpha_optim):
        for s in optim.state.values():
            tensors += [s['exp_avg'], s['exp_avg_sq'], s['step']]
    return tensors


def assert_same(compiled, eager):
    for a, b in zip(state(compiled), state(eager), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert compiled.num_skipped == eager.num_skipped


def test_compiled_updates_equal_the_eager_ones():
    # 3 critics, a delayed actor (both graphs), a clip that cuts, a NaN batch that is skipped
    compiled, eager = pair(num_critics=3, actor_update_interval=2, max_grad_norm=0.5)
    graphs = torch._dynamo.utils.counters['stats']['unique_graphs']
    g_compiled, g_eager = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    clipped = 0
    for i in range(12):
        data = batch(i, nan='next_obs' if i == 6 else None)
        if i % 3 == 2:  # the runner moves the normaliser between updates: the graph must see it
            seen = torch.randn(40, OBS) * (1 + i) + i
            compiled.normalizer.update(seen), eager.normalizer.update(seen)
        m_compiled, m_eager = compiled.update(data, g_compiled), eager.update(data, g_eager)
        assert m_compiled.keys() == m_eager.keys()
        for key in m_compiled:
            want = float(m_eager[key])
            assert float(m_compiled[key]) == pytest.approx(want, rel=1e-4, abs=1e-6), (i, key)
        clipped += float(m_eager['grad_norm/critic']) > 0.5
    assert torch._dynamo.utils.counters['stats']['unique_graphs'] >= graphs + 2
    assert compiled._compiled.failed is None
    assert clipped > 0 and eager.num_skipped == 1
    assert_same(compiled, eager)


def test_after_a_load_and_an_lr_change_it_still_matches():
    compiled, eager = pair()
    g_compiled, g_eager = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    for i in range(3):
        compiled.update(batch(i), g_compiled), eager.update(batch(i), g_eager)
    # a resume: new optimiser state tensors, which the graph must use, not the old ones
    restored = SAC(OBS, [0.2, 0.0, -0.1], [0.5, 1.0, 2.0], compiled.cfg)
    restored.load_state_dict(compiled.state_dict())
    for sac in (restored, eager):
        for group in sac.actor_optim.param_groups:
            group['lr'] = 1e-2
    for i in range(3, 6):
        restored.update(batch(i), g_compiled), eager.update(batch(i), g_eager)
    assert_same(restored, eager)


def test_a_ranks_part_runs_eagerly():
    compiled, eager = pair()
    g_compiled, g_eager = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    compiled.update(batch(0), g_compiled), eager.update(batch(0), g_eager)
    full = batch(1)
    rows = torch.arange(0, B, 2)
    part = Batch(**{n: getattr(full, n)[rows] for n in Batch.tensor_fields()})
    part.part = BatchPart(rows, B)
    compiled.update(part, g_compiled), eager.update(part, g_eager)
    assert_same(compiled, eager)


def test_an_optimiser_the_graph_does_not_serve_is_reported_once_and_runs_eagerly():
    compiled, eager = pair()
    for sac in (compiled, eager):  # two parameter groups: the critic's layers apart
        params = list(sac.critic.parameters())
        sac.critic_optim = torch.optim.Adam(
            [{'params': params[:2]}, {'params': params[2:]}], lr=sac.cfg.critic_lr
        )
    g_compiled, g_eager = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for i in range(3):
            compiled.update(batch(i), g_compiled), eager.update(batch(i), g_eager)
    said = [w for w in caught if 'serves one group of plain Adam' in str(w.message)]
    assert len(said) == 1 and 'Adam with 2 group(s)' in str(said[0].message)
    assert_same(compiled, eager)


def test_a_failed_compile_warns_and_keeps_learning():
    import torch._inductor.config as inductor

    compiled, eager = pair(critic_hidden=(24, 8))  # shapes no earlier test compiled
    g_compiled, g_eager = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    # inductor's own patch: a monkeypatched config entry stays broken for later compiles in
    # other threads (the runner's learner thread)
    broken = inductor.patch({'fx_graph_cache': False, 'cpp.cxx': ('/nonexistent/c++',)})
    with broken, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for i in range(3):
            compiled.update(batch(i), g_compiled), eager.update(batch(i), g_eager)
    assert compiled._compiled.failed is not None
    assert sum('running it eagerly' in str(w.message) for w in caught) == 1
    assert_same(compiled, eager)


def test_bfloat16_products_compile_too_and_match_the_eager_passes():
    compiled, eager = pair(matmul_dtype='bfloat16', critic_hidden=(32, 24))
    assert compiled.matmul_dtype == torch.bfloat16 and eager.reverse
    g_compiled, g_eager = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    for i in range(4):
        m_compiled = compiled.update(batch(i), g_compiled)
        m_eager = eager.update(batch(i), g_eager)
        for key in ('loss/critic', 'value/q_target_mean', 'loss/actor', 'policy/entropy'):
            want = float(m_eager[key])
            assert float(m_compiled[key]) == pytest.approx(want, rel=1e-5, abs=1e-6), (i, key)
    assert compiled._compiled.failed is None
    for a, b in zip(state(compiled), state(eager), strict=True):
        # a float32 difference of one rounding can move a bfloat16 operand by one of its steps
        # (here 2e-4 at most; a float32 twin differs by 6e-2)
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)
