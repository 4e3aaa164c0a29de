"""Captured graphs (Warp's CPU graphs) replay exactly what direct launches compute.

step() and the torch bridge replay captured launch sequences; a replay must give the same bits as
launching every kernel from Python, across parameter and configuration changes (which must
re-capture, not replay stale values) and across reuse of the bridge's pooled steps.
"""

import numpy as np
import pytest
import torch

from loco_policy import spec
from loco_policy.description import default_qpos
from loco_train.sim import Simulator
from loco_train.sim.graphs import GraphCache
from loco_train.sim.reference import robot
from loco_train.sim.torch_bridge import TorchSim

N = 3


def _pair(**config):
    sims = [Simulator(robot(), N, graphs=g, **config) for g in (True, False)]
    for sim in sims:
        sim.set_params(kp=spec.KP, kd=spec.KD, tau_max=spec.TORQUE_LIMIT)
        qpos = np.tile(default_qpos(), (N, 1))
        qpos[:, 2] = [0.54, 0.56, 0.60]
        sim.set_state(qpos, np.zeros((N, 18)))
    return sims


def _zeroing(fail_on_call=None):
    """A launch sequence that zeroes an array of ones, counting its calls (Python runs)."""
    import warp as wp

    a = wp.array(np.ones(4), dtype=wp.float32, device='cpu')
    calls = []

    def launches():
        calls.append(1)
        if len(calls) == fail_on_call:  # as if the device could not capture
            raise RuntimeError('capture not supported')
        a.zero_()
        return a

    return a, calls, launches


def test_capture_records_without_running_and_replays():
    cache = GraphCache('cpu')
    a, calls, launches = _zeroing()
    for run in range(3):  # launched directly, then captured and replayed, then replayed
        a.assign(np.ones(4))
        assert cache.run('zero', launches) is a
        assert np.all(a.numpy() == 0.0)
        assert len(calls) == min(run + 1, 2)  # a replay does not call the function
    assert cache.captured() == ['zero']
    cache.run('zero', launches, values=(1,))  # other values: launched directly again
    assert len(calls) == 3 and cache.captured() == []


def test_a_failed_capture_falls_back_to_direct_launches():
    cache = GraphCache('cpu')
    a, calls, launches = _zeroing(fail_on_call=2)  # the second call is the capture
    cache.run('zero', launches)
    a.assign(np.ones(4))
    with pytest.warns(RuntimeWarning, match='launching directly'):
        assert cache.run('zero', launches) is a
    assert np.all(a.numpy() == 0.0) and len(calls) == 3  # launched directly after the failure
    assert not cache.enabled and cache.captured() == []


def test_step_replays_what_direct_launches_compute():
    graphed, direct = _pair(dtype='float64')
    rng = np.random.default_rng(0)
    for t in range(9):
        targets = spec.DEFAULT_JOINT_POS + 0.2 * rng.normal(size=(N, 12))
        if t == 3:  # parameters are written in place: the graph must see the new values
            for sim in (graphed, direct):
                sim.set_params(kp=0.5 * spec.KP, mu=0.4)
        if t == 6:  # a changed value the launches hold: captured again
            for sim in (graphed, direct):
                sim.config.kappa = 300.0
        graphed.step(targets)
        direct.step(targets)
        for a, b in zip(graphed.get_state(), direct.get_state()):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(graphed.contact_forces(), direct.contact_forces())
    assert np.any(graphed.contact_forces()[..., 2] > 1.0)  # the feet carried load
    assert graphed.graphs.captured() == ['step']  # one graph per sequence, replaced on change


def _window(sim, targets, loss_terms):
    ts = TorchSim(sim)
    qvel = np.zeros((N, 18))
    qvel[:, 0] = 2.0  # pushed on ice: the feet slide, so the loss depends on mu
    qpos = np.tile(default_qpos(), (N, 1))
    qpos[:, 2] = 0.54  # standing (m)
    ts.reset(qpos, qvel)
    targets = torch.tensor(targets, requires_grad=True)
    mu = torch.full((N,), 0.1, dtype=torch.float64, requires_grad=True)
    loss = 0.0
    for t in range(len(targets)):
        out = ts.step(targets[t], params={'mu': mu})
        if 'force' in loss_terms:
            loss = loss + 1e-3 * out.contact_force.square().sum()
        if 'feet' in loss_terms:
            loss = loss + out.foot_pos[..., 2].sum()
    loss = loss + out.qpos[:, :3].sum() + out.qvel.square().sum()
    loss.backward()
    return out.qpos.detach(), targets.grad, mu.grad


def test_bridge_replays_forward_and_reverse_passes_exactly():
    rng = np.random.default_rng(1)
    targets = spec.DEFAULT_JOINT_POS + 0.1 * rng.normal(size=(3, N, 12))
    graphed = _pair(dtype='float64')[0]
    # the graphed simulator reuses its pooled steps window after window; each reference is a
    # fresh simulator launching directly. The third window seeds fewer outputs, so a gradient
    # left over from an earlier window would show.
    for terms in (('force', 'feet'), ('force', 'feet'), ()):
        direct = _pair(dtype='float64')[1]
        for a, b in zip(_window(graphed, targets, terms), _window(direct, targets, terms)):
            assert torch.isfinite(a).all() and a.abs().max() > 0.0
            torch.testing.assert_close(a, b, rtol=0.0, atol=0.0)


def test_a_backward_replays_the_tape_of_its_own_forward():
    # a config change between a recorded step and its backward pass, then back: the backward
    # must reverse the step that ran, not an older captured one
    rng = np.random.default_rng(2)
    targets = torch.tensor(spec.DEFAULT_JOINT_POS + 0.1 * rng.normal(size=(N, 12)))
    graphed, direct = _pair(dtype='float64')
    grads = []
    for sim in (graphed, direct):
        ts = TorchSim(sim)
        for kappa in (1000.0, 1000.0, 300.0):  # the first two capture, the third runs directly
            qpos = np.tile(default_qpos(), (N, 1))
            qpos[:, 2] = 0.54
            qvel = torch.zeros(N, 18, dtype=torch.float64, requires_grad=True)
            ts.reset(qpos, qvel)
            sim.config.kappa = kappa
            out = ts.step(targets)
            sim.config.kappa = 1000.0
            (out.qpos[:, 2].sum() + out.qvel.square().sum()).backward()
        grads.append(qvel.grad)
    assert grads[0].abs().max() > 0.0
    torch.testing.assert_close(grads[0], grads[1], rtol=0.0, atol=0.0)


def test_a_recorded_step_never_differentiated_returns_its_arrays():
    import gc

    sim = _pair(dtype='float64')[0]
    ts = TorchSim(sim)
    targets = torch.tensor(np.tile(spec.DEFAULT_JOINT_POS, (N, 1)), requires_grad=True)
    for _ in range(5):  # outputs dropped without a backward pass: the slot comes back
        ts.reset(np.tile(default_qpos(), (N, 1)), np.zeros((N, 18)))
        ts.step(targets)
        ts.qpos = ts.qvel = None
        gc.collect()
    assert sim._bridge_slots == 1 and len(sim._bridge_pool[True]) == 1
