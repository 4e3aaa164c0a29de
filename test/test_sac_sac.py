"""SAC.update: the paper's target, NaN safety, delayed actor, temperature, state round trip."""

import copy
import math

import pytest
import torch

from loco_train.policy.atomic_io import atomic_torch_save, torch_load
from loco_train.sac import Batch, SAC, SACConfig
from loco_train.sac.critic import make_target, polyak_update, QEnsemble

OBS, ACT, B = 4, 2, 32


def make_sac(**overrides):
    torch.manual_seed(0)
    cfg = SACConfig(actor_hidden=(32, 32), critic_hidden=(32, 32), **overrides)
    return SAC(OBS, [0.0, 1.0], [1.0, 0.5], cfg)


def make_batch(seed=0, **replace):
    g = torch.Generator().manual_seed(seed)
    fields = dict(
        obs=torch.randn(B, OBS, generator=g),
        action=torch.rand(B, ACT, generator=g) - 0.5,
        reward=torch.randn(B, generator=g),
        next_obs=torch.randn(B, OBS, generator=g),
        terminated=(torch.rand(B, generator=g) < 0.2).float(),
        discount=torch.full((B,), 0.99**3),
    )
    fields.update(replace)
    return Batch(**fields)


def parameters(sac):
    modules = (sac.actor, sac.critic, sac.critic_target)
    return [p.detach().clone() for m in modules for p in m.parameters()] + [
        sac.log_alpha.detach().clone()
    ]


def optimisers(sac):
    return (sac.actor_optim, sac.critic_optim, sac.alpha_optim)


def test_update_changes_networks_and_reports_finite_metrics():
    sac = make_sac()
    before = parameters(sac)
    metrics = sac.update(make_batch())
    assert all(math.isfinite(v) for v in metrics.values())
    for key in ('loss/critic', 'loss/actor', 'loss/alpha', 'alpha', 'policy/entropy'):
        assert key in metrics
    assert all(not torch.equal(a, b) for a, b in zip(before, parameters(sac)))


def test_target_is_min_over_ensemble_minus_alpha_log_pi():
    sac = make_sac(matmul_dtype='float32')  # the formula to float32 precision
    batch = make_batch()
    with torch.no_grad():  # two critics that disagree, so min differs from mean
        for p in sac.critic_target.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    torch.manual_seed(7)
    expected_target = None
    with torch.no_grad():
        s_next = sac.normalize(batch.next_obs)
        a_next, log_pi = sac.actor.sample(s_next)
        q = sac.critic_target(s_next, a_next)  # (N, B)
        assert not torch.allclose(q[0], q[1])
        V = q.min(dim=0).values - sac.alpha * log_pi
        expected_target = batch.reward + batch.discount * (1 - batch.terminated) * V
    torch.manual_seed(7)  # update() draws a~ first, with the same noise
    metrics = sac.update(batch)
    expected = float(expected_target.mean())
    assert float(metrics['value/q_target_mean']) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize('field', ['obs', 'action', 'reward', 'next_obs', 'discount'])
@pytest.mark.parametrize('bad', [float('nan'), float('inf')])
def test_non_finite_batch_is_rejected_and_nothing_is_written(field, bad):
    sac = make_sac()
    sac.update(make_batch(seed=1))  # the optimisers hold moments and step counts
    batch = make_batch()
    getattr(batch, field)[3] = bad
    before = parameters(sac)
    optim_states = [copy.deepcopy(o.state_dict()['state']) for o in optimisers(sac)]
    metrics = sac.update(batch)
    assert float(metrics['skipped']) == 1.0
    assert all(float(v) == 0.0 for k, v in metrics.items() if k not in ('skipped', 'alpha'))
    assert sac.num_skipped == 1 and sac.num_updates == 1
    assert all(torch.equal(a, b) for a, b in zip(before, parameters(sac)))
    for optim, old in zip(optimisers(sac), optim_states):
        for index, entry in optim.state_dict()['state'].items():
            assert all(torch.equal(entry[k], old[index][k]) for k in entry)


def test_overflowing_loss_is_skipped_without_writing_nan():
    sac = make_sac()
    before = parameters(sac)
    sac.update(make_batch(reward=torch.full((B,), 3e38)))  # finite data, (Q - y)^2 overflows
    assert sac.num_skipped >= 1
    assert all(torch.isfinite(p).all() for p in parameters(sac))
    assert all(torch.equal(a, b) for a, b in zip(before[:4], parameters(sac)[:4]))


def test_delayed_actor_updates():
    sac = make_sac(actor_update_interval=3)
    actor = lambda: [p.detach().clone() for p in sac.actor.parameters()]  # noqa: E731
    changed = []
    for i in range(6):
        before = actor()
        metrics = sac.update(make_batch(seed=i))
        changed.append(not all(torch.equal(a, b) for a, b in zip(before, actor())))
        assert ('loss/actor' in metrics) == changed[-1]
    assert changed == [False, False, True, False, False, True]


def test_temperature_moves_towards_the_target_entropy():
    low = make_sac(target_entropy=-20.0)  # policy entropy is far above: alpha must fall
    high = make_sac(target_entropy=20.0)  # far below: alpha must rise
    for i in range(20):
        low.update(make_batch(seed=i))
        high.update(make_batch(seed=i))
    assert float(low.alpha) < 0.2 < float(high.alpha)


def test_gradient_norm_is_clipped():
    sac = make_sac(max_grad_norm=1e-3)
    sac.update(make_batch(reward=torch.full((B,), 1e4)))
    norm = torch.nn.utils.get_total_norm([p.grad for p in sac.critic.parameters()])
    assert float(norm) == pytest.approx(1e-3, rel=1e-3)


def test_state_dict_round_trip_gives_identical_updates(tmp_path):
    a, b = make_sac(), make_sac(actor_lr=0.1)
    for i in range(3):
        a.update(make_batch(seed=i))
    atomic_torch_save(a.state_dict(), tmp_path / 'sac.pt')  # as checkpoints do
    b.load_state_dict(torch_load(tmp_path / 'sac.pt'))
    torch.manual_seed(1)
    ma = a.update(make_batch(seed=9))
    torch.manual_seed(1)
    mb = b.update(make_batch(seed=9))
    assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)


def test_polyak_average_and_frozen_target():
    torch.manual_seed(0)
    critic = QEnsemble(3, 1, num_critics=3, hidden=(8,))
    target = make_target(critic)
    assert all(not p.requires_grad for p in target.parameters())
    with torch.no_grad():
        for p in critic.parameters():
            p.add_(1.0)
    old = [p.clone() for p in target.parameters()]
    polyak_update(target, critic, 0.25)
    for t, o, s in zip(target.parameters(), old, critic.parameters()):
        torch.testing.assert_close(t, 0.25 * s + 0.75 * o)
    q = critic(torch.randn(5, 3), torch.randn(5, 1))
    assert q.shape == (3, 5)
    assert not torch.allclose(q[0], q[1])  # independent members


def test_update_returns_device_tensors_and_never_reads_them():
    """Metrics are 0-d tensors (the runner reads them once per log interval), for every call."""
    sac = make_sac(actor_update_interval=2)
    for i in range(3):
        metrics = sac.update(make_batch(seed=i))
        assert metrics and all(
            isinstance(v, torch.Tensor) and v.ndim == 0 for v in metrics.values()
        )
        assert float(metrics['skipped']) == 0.0
    assert sac.num_calls == 3 and sac.num_updates == 3


def test_fused_adam_step_is_masked_without_reading_the_flag():
    from loco_train.sac.sac import adam, masked_step

    p = torch.nn.Parameter(torch.ones(3))
    optim = adam([p], 0.1)
    assert optim.defaults['fused']
    p.grad = torch.ones(3)
    masked_step(optim, torch.tensor(True))
    stepped = p.detach().clone()
    assert not torch.equal(stepped, torch.ones(3))
    p.grad = torch.full((3,), float('nan'))
    masked_step(optim, torch.tensor(False))
    assert torch.equal(p.detach(), stepped) and float(optim.state[p]['step']) == 1.0
    assert not hasattr(optim, 'found_inf')


def test_no_clip_still_skips_a_non_finite_gradient():
    sac = make_sac(max_grad_norm=None)
    sac.update(make_batch(seed=1))
    before = parameters(sac)
    assert float(sac.update(make_batch(reward=torch.full((B,), 3e38)))['skipped']) == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, parameters(sac)))


def test_a_part_of_a_global_batch_weights_its_gradient_by_its_share():
    """A data-parallel rank's batch part: its gradient is scaled by B_r / B_total before the
    ranks' sum (grad_sync), and a rank without any of the global batch adds a zero gradient and
    still takes the step the others take (an empty mean would be NaN and skip it everywhere)."""
    from loco_train.sac.batch import BatchPart

    seen = []

    def grad_sync(params, ok, share):  # one rank's view of the sum over ranks
        seen.append((share, [p.grad.clone() if p.grad is not None else None for p in params]))
        for p in params:  # the sum's result: every parameter has a gradient afterwards
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        return ok

    whole, part = make_sac(), make_sac()
    part.grad_sync = grad_sync
    batch = make_batch()
    whole.update(batch)
    rows = torch.arange(B // 2)  # the first half of a global batch of B
    half = Batch(**{name: getattr(batch, name)[rows] for name in Batch.tensor_fields()},
                 part=BatchPart(rows, B))  # fmt: skip
    metrics = part.update(half)
    assert float(metrics['skipped']) == 0.0 and seen[0][0] == 0.5
    empty = Batch(**{name: getattr(batch, name)[:0] for name in Batch.tensor_fields()},
                  part=BatchPart(rows[:0], B))  # fmt: skip
    seen.clear()
    before = [p.detach().clone() for p in part.critic.parameters()]
    metrics = part.update(empty)
    assert float(metrics['skipped']) == 0.0  # the step is taken (here with nothing to add)
    assert seen and all(share == 0.0 for share, _ in seen)
    assert all(g is None or not g.any() for _, grads in seen for g in grads)
    after = list(part.critic.parameters())
    assert all(torch.isfinite(p).all() for p in after)
    assert any(not torch.equal(a, b) for a, b in zip(before, after))  # Adam's momentum moves it
