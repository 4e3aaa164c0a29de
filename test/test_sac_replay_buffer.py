"""Fix 4 (n-step returns stopped at episode ends, timeout bootstrap) and the buffer's storage."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from loco_train.policy import atomic_io
from loco_train.sac import ReplayBuffer

GAMMA = 0.9
RESET_OBS = -1.0


def scripted_buffer(num_steps=10, capacity=None):
    """One environment, r_t = t + 1, terminated at t = 2, truncated (timeout) at t = 5.

    obs_t = t normally; after an episode end the env shows RESET_OBS; the observation that
    really followed step t (stored as next_obs) is 100 + t where the episode ended there.
    """
    buf = ReplayBuffer(capacity or num_steps, 1, obs_dim=1, action_dim=1)
    obs = 0.0
    for t in range(num_steps):
        terminated, truncated = t == 2, t == 5
        true_next = 100.0 + t if (terminated or truncated) else t + 1.0
        buf.add(
            torch.tensor([[obs]]),
            torch.tensor([[0.1 * t]]),
            torch.tensor([t + 1.0]),
            torch.tensor([[true_next]]),
            torch.tensor([terminated]),
            torch.tensor([truncated]),
        )
        obs = RESET_OBS if (terminated or truncated) else t + 1.0
    return buf


def window(buf, t, n):
    batch = buf.n_step(torch.tensor([t]), torch.tensor([0]), n, GAMMA)
    return (
        float(batch.reward),
        float(batch.next_obs),
        float(batch.terminated),
        float(batch.discount),
        float(batch.obs),
    )


# (t, reward sum, bootstrap observation, terminated, discount) computed by hand for n = 3.
HAND = [
    (0, 1 + 0.9 * 2 + 0.81 * 3, 102.0, 1.0, 0.729),  # window ends in the termination at t=2
    (1, 2 + 0.9 * 3, 102.0, 1.0, 0.81),  # stopped after the termination: n_eff = 2
    (2, 3.0, 102.0, 1.0, 0.9),
    (3, 4 + 0.9 * 5 + 0.81 * 6, 105.0, 0.0, 0.729),  # ends in the timeout at t=5: bootstrap
    (4, 5 + 0.9 * 6, 105.0, 0.0, 0.81),  # from the pre-reset observation 105, not -1
    (5, 6.0, 105.0, 0.0, 0.9),
    (6, 7 + 0.9 * 8 + 0.81 * 9, 9.0, 0.0, 0.729),  # a full window inside one episode
]


@pytest.mark.parametrize(('t', 'reward', 'boot', 'terminated', 'discount'), HAND)
def test_n_step_window_matches_hand_computed_values(t, reward, boot, terminated, discount):
    got = window(scripted_buffer(), t, 3)
    assert got[0] == pytest.approx(reward)
    assert got[1] == boot
    assert got[2] == terminated
    assert got[3] == pytest.approx(discount)


def test_n_step_target_equals_the_papers_formula():
    """Q_target = sum gamma^k S_k r + gamma^n S_n V(s~_{t+n}) + sum gamma^(k+1) S_k b V(s~)."""
    buf, n = scripted_buffer(12), 4

    def V(s):
        return 3.0 * s - 1.0  # any value function

    r = buf.reward[:, 0]
    term, trunc = buf.terminated[:, 0].float(), buf.truncated[:, 0].float()
    s_next = buf.next_obs[:, 0, 0]  # s~_{t+1}: pre-reset where the step ended an episode
    for t in range(12 - n + 1):
        S, paper = 1.0, 0.0
        for k in range(n):
            paper += GAMMA**k * S * r[t + k]
            paper += GAMMA ** (k + 1) * S * trunc[t + k] * V(s_next[t + k])
            S *= 1.0 - max(term[t + k], trunc[t + k])
        paper += GAMMA**n * S * V(s_next[t + n - 1])
        reward, boot, terminated, discount, _ = window(buf, t, n)
        ours = reward + discount * (1.0 - terminated) * V(boot)
        assert ours == pytest.approx(float(paper), rel=1e-6), t


def test_window_stops_at_the_newest_stored_step():
    buf = scripted_buffer(8)
    reward, boot, terminated, discount, _ = window(buf, 7, 3)  # only step 7 is stored
    assert (reward, boot, terminated) == (8.0, 8.0, 0.0)
    assert discount == pytest.approx(0.9)


def test_ring_wraps_and_keeps_the_newest_rows():
    buf = scripted_buffer(10, capacity=4)  # rows 6..9 survive
    assert len(buf) == 4 and buf.capacity == 4
    assert window(buf, 0, 3)[4] == RESET_OBS  # age 0 is now step 6, just after a reset
    assert window(buf, 0, 3)[0] == pytest.approx(7 + 0.9 * 8 + 0.81 * 9)
    assert window(buf, 3, 3)[0] == pytest.approx(10.0)  # newest row: window of one


@pytest.mark.parametrize('steps, capacity', [(5, 8), (13, 8), (8, 8)])
def test_extend_equals_one_add_per_step_across_the_ring(steps, capacity):
    gen = torch.Generator().manual_seed(0)
    shapes = [(steps, 2, 3), (steps, 2, 1), (steps, 2), (steps, 2, 3)]
    fields = [torch.randn(*shape, generator=gen) for shape in shapes]
    fields += [torch.rand(steps, 2, generator=gen) < 0.3 for _ in range(2)]
    one, many = (ReplayBuffer(2 * capacity, 2, obs_dim=3, action_dim=1) for _ in range(2))
    for buf in (one, many):  # a partly filled ring first, so the writes wrap
        for t in range(3):
            buf.add(*(f[t] for f in fields))
    for t in range(steps):
        one.add(*(f[t] for f in fields))
    many.extend(*fields)
    assert (one.ptr, one.size) == (many.ptr, many.size)
    for name in ReplayBuffer.FIELDS:
        assert torch.equal(getattr(one, name), getattr(many, name)), name


def test_vectorised_insertion_keeps_environments_apart():
    N = 3
    buf = ReplayBuffer(30, N, obs_dim=2, action_dim=1)
    for t in range(5):
        obs = torch.arange(N, dtype=torch.float32)[:, None].expand(N, 2) + 10 * t
        done = torch.tensor([t == 1, False, False])
        buf.add(
            obs,
            torch.zeros(N, 1),
            torch.ones(N) * (torch.arange(N) + 1),
            obs + 10,
            done,
            torch.zeros(N, dtype=torch.bool),
        )
    batch = buf.n_step(torch.tensor([0, 0, 0]), torch.tensor([0, 1, 2]), 3, GAMMA)
    full = 1 + 0.9 + 0.81
    torch.testing.assert_close(batch.reward, torch.tensor([1 + 0.9, 2 * full, 3 * full]))
    torch.testing.assert_close(batch.obs[:, 0], torch.tensor([0.0, 1.0, 2.0]))
    torch.testing.assert_close(batch.terminated, torch.tensor([1.0, 0.0, 0.0]))


def test_sample_shapes_and_ranges():
    buf = scripted_buffer(10)
    batch = buf.sample(64, 3, GAMMA, generator=torch.Generator().manual_seed(0))
    assert batch.obs.shape == (64, 1) and batch.reward.shape == (64,)
    assert torch.all((batch.discount <= GAMMA) & (batch.discount >= GAMMA**3 - 1e-7))


def test_save_load_round_trip(tmp_path):
    buf = scripted_buffer(10, capacity=6)  # wrapped
    path = tmp_path / 'replay.pt'
    buf.save(path)
    other = ReplayBuffer(6, 1, 1, 1)
    other.load(path)
    assert len(other) == len(buf)
    gen = lambda: torch.Generator().manual_seed(5)  # noqa: E731
    a, b = buf.sample(32, 3, GAMMA, gen()), other.sample(32, 3, GAMMA, gen())
    for name in ('obs', 'action', 'reward', 'next_obs', 'terminated', 'discount'):
        torch.testing.assert_close(getattr(a, name), getattr(b, name))
    with pytest.raises(ValueError):
        ReplayBuffer(6, 2, 1, 1).load(path)  # wrong number of environments


def test_crash_mid_save_leaves_the_previous_file_loadable(tmp_path, monkeypatch):
    path = tmp_path / 'replay.pt'
    scripted_buffer(4).save(path)
    real_save = torch.save

    def crash_half_way(obj, handle):
        real_save(obj, handle)
        handle.truncate(handle.tell() // 2)
        raise KeyboardInterrupt('killed mid-write')

    monkeypatch.setattr(atomic_io.torch, 'save', crash_half_way)
    with pytest.raises(KeyboardInterrupt):
        scripted_buffer(10).save(path)
    monkeypatch.undo()
    survivor = ReplayBuffer(10, 1, 1, 1)
    survivor.load(path)
    assert len(survivor) == 4  # the old file, whole
    assert os.listdir(tmp_path) == ['replay.pt']  # and no temporary left behind


SAVER = """
import sys, torch
from loco_train.sac import ReplayBuffer
buf = ReplayBuffer(200_000, 4, 48, 12)
buf.size = buf.rows
print('ready', flush=True)
while True:
    buf.obs.add_(1.0)
    buf.save(sys.argv[1])
"""


@pytest.mark.slow
def test_sigkill_during_saves_never_corrupts_the_file(tmp_path):
    path = tmp_path / 'replay.pt'
    first = ReplayBuffer(200_000, 4, 48, 12)
    first.size = first.rows
    first.save(path)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for delay in (0.3, 0.7, 1.1):
        proc = subprocess.Popen(
            [sys.executable, '-c', SAVER, str(path)], cwd=root, stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout.readline().strip() == 'ready'
        time.sleep(delay)  # somewhere inside a ~40 MB write
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        buf = ReplayBuffer(200_000, 4, 48, 12)
        buf.load(path)  # whole, whichever version it is
        assert len(buf) == 200_000
        assert torch.all(buf.obs == buf.obs[0, 0, 0])  # one version, not a mix
