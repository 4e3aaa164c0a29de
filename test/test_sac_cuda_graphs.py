"""SAC's update replayed from CUDA graphs equals the eager update; off CUDA it is refused.

The equality tests need a GPU and skip without one (tools/cuda/bench.sh runs them there).
"""

import io

import pytest
import torch

from loco_policy import spec
from loco_train.sac import anymal_action_bounds, Batch, SAC, SACConfig

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason='CUDA graphs need a CUDA device')


def _batch(rows: int, seed: int, device) -> Batch:
    g = torch.Generator().manual_seed(seed)
    o, d = spec.OBS_DIM, spec.ACTION_DIM
    b, c = (torch.as_tensor(x, dtype=torch.float32) for x in anymal_action_bounds())
    return Batch(
        obs=torch.randn(rows, o, generator=g),
        action=b + c * (2 * torch.rand(rows, d, generator=g) - 1),
        reward=torch.randn(rows, generator=g),
        next_obs=torch.randn(rows, o, generator=g),
        terminated=(torch.rand(rows, generator=g) < 0.05).float(),
        discount=torch.full((rows,), 0.97**3),
    ).to(device)


def _pair(**config):
    """Two SACs that start alike on the GPU: eager and graphed."""
    b, c = anymal_action_bounds()
    made = []
    for graphs in (False, True):
        torch.manual_seed(0)
        made.append(SAC(spec.OBS_DIM, b, c, SACConfig(cuda_graphs=graphs, **config), 'cuda'))
    return made


def test_refused_off_cuda_with_the_reason():
    b, c = anymal_action_bounds()
    with pytest.raises(ValueError, match='CUDA device'):
        SAC(spec.OBS_DIM, b, c, SACConfig(cuda_graphs=True), 'cpu')


@needs_cuda
def test_refused_with_compile_or_bfloat16():
    b, c = anymal_action_bounds()
    with pytest.raises(ValueError, match='compile'):
        SAC(spec.OBS_DIM, b, c, SACConfig(cuda_graphs=True, compile=True), 'cuda')
    with pytest.raises(ValueError, match='float32'):
        SAC(spec.OBS_DIM, b, c, SACConfig(cuda_graphs=True, matmul_dtype='bfloat16'), 'cuda')


@needs_cuda
def test_replayed_updates_equal_eager_ones():
    """Warm-up, capture and replays of both graphs (delayed actor), a NaN batch, another size."""
    eager, graphed = _pair(actor_update_interval=2, batch_size=256)
    assert graphed._graphed is not None
    gens = [torch.Generator('cuda').manual_seed(7) for _ in range(2)]
    for step in range(16):
        batch = _batch(256, step, 'cuda')
        if step == 11:  # a non-finite batch: skipped by both, weights kept
            batch.reward[3] = float('nan')
        if step == 13:  # another batch size runs eagerly
            batch = _batch(128, step, 'cuda')
        m_eager = eager.update(batch, gens[0])
        m_graphed = graphed.update(batch, gens[1])
        assert set(m_eager) == set(m_graphed), step
        for key in m_eager:
            torch.testing.assert_close(
                m_graphed[key].float(), m_eager[key].float(), rtol=1e-4, atol=1e-5,
                msg=f'{key} at update {step}',
            )  # fmt: skip
    assert set(graphed._graphed.graphs) == {False, True}  # both kinds were captured
    assert eager.num_skipped == graphed.num_skipped == 1
    for name in ('actor', 'critic', 'critic_target'):
        for (key, p), q in zip(
            getattr(eager, name).state_dict().items(),
            getattr(graphed, name).state_dict().values(),
        ):
            torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5, msg=f'{name}.{key}')
    torch.testing.assert_close(graphed.log_alpha, eager.log_alpha, rtol=1e-4, atol=1e-6)


@needs_cuda
def test_metrics_are_not_overwritten_by_the_next_replay():
    _, graphed = _pair()
    kept = [graphed.update(_batch(256, step, 'cuda'))['loss/critic'] for step in range(8)]
    values = torch.stack(kept).tolist()
    assert len(set(values)) == len(values), values  # each update's own loss


@needs_cuda
def test_a_loaded_state_is_captured_again():
    eager, graphed = _pair()
    for step in range(6):
        graphed.update(_batch(256, step, 'cuda'))
    saved = io.BytesIO()  # a checkpoint's round trip: both load copies, not shared tensors
    torch.save(graphed.state_dict(), saved)
    for sac in (eager, graphed):
        saved.seek(0)
        sac.load_state_dict(torch.load(saved, map_location='cuda', weights_only=False))
    gens = [torch.Generator('cuda').manual_seed(3) for _ in range(2)]
    for step in range(6, 12):
        m_eager = eager.update(_batch(256, step, 'cuda'), gens[0])
        m_graphed = graphed.update(_batch(256, step, 'cuda'), gens[1])
        torch.testing.assert_close(m_graphed['loss/critic'], m_eager['loss/critic'], rtol=1e-4,
                                   atol=1e-5)  # fmt: skip
