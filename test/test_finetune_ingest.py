"""Rebuilding (s, a, r, s', done) from /replay/transitions: pairing, gaps, order, n-step."""

import numpy as np
import pytest
import torch

from loco_policy import spec, transition
from loco_train.finetune.ingest import (
    ACTION_RATE,
    n_step_returns,
    replay_fields,
    TransitionAssembler,
)
from loco_train.finetune.reward import robot_reward, robot_weights, weights_from_overrides
from loco_train.sac import ReplayBuffer

WEIGHTS = weights_from_overrides({'feet_air_time': 2, 'orientation': -5, 'torque': -2.5e-5})


def row(seq, episode=1, mode='WALK', terminated=False, truncated=False, version=7):
    """A row whose numbers name it: obs and action carry seq, the terms seq and column."""
    terms = (seq % 97) * 0.01 + np.arange(len(transition.REWARD_TERMS)) * 0.1
    return transition.TransitionRow(
        seq=seq, episode=episode, policy_version=version, mode=mode,
        obs=np.full(spec.OBS_DIM, float(seq)), action=np.full(spec.ACTION_DIM, seq * 0.5),
        reward_terms=terms, terminated=terminated, truncated=truncated,
    )  # fmt: skip


def messages(rows, size=10):
    """The rows packed 10 to a message, as policy_node publishes them."""
    return [transition.pack_rows(rows[i : i + size]) for i in range(0, len(rows), size)]


def assemble(msgs, **kw):
    asm = TransitionAssembler(WEIGHTS, **kw)
    for dims, data in msgs:
        asm.feed(dims, data)
    asm.finish()
    return asm, asm.drain()


def walk_then_stop(first=0, count=30, episode=1):
    """count WALK rows, then the STAND row that truncates the episode, then 5 STAND rows."""
    rows = [row(first + i, episode) for i in range(count)]
    rows.append(row(first + count, episode, 'STAND', truncated=True))
    rows += [row(first + count + 1 + i, episode, 'STAND') for i in range(5)]
    return rows


def test_clean_episode_pairs_rows_with_their_successor():
    rows = walk_then_stop()
    asm, out = assemble(messages(rows))
    assert len(out['seq']) == 30 and list(out['seq']) == list(range(30))
    assert np.array_equal(out['obs'][:, 0], np.arange(30.0))
    assert np.array_equal(out['next_obs'][:, 0], np.arange(1.0, 31.0))  # s' of the last: STAND row
    assert np.array_equal(out['action'][:, 0], np.arange(30) * 0.5)
    assert not out['terminated'].any() and list(np.flatnonzero(out['truncated'])) == [29]
    assert list(np.flatnonzero(out['segment_end'])) == [29] and len(set(out['segment'])) == 1
    # Training's timing: state terms measured after a_k (row k+1), action rate of a_k (row k).
    state = [i for i in range(7) if i != ACTION_RATE]
    assert np.allclose(
        out['reward_terms'][:, state], [rows[k + 1].reward_terms[state] for k in range(30)]
    )
    assert np.allclose(
        out['reward_terms'][:, ACTION_RATE], [rows[k].reward_terms[ACTION_RATE] for k in range(30)]
    )
    assert np.allclose(out['reward'], robot_reward(out['reward_terms'], WEIGHTS))
    assert (out['policy_version'] == 7).all()
    assert asm.sequence_gaps == 0 and asm.duplicates == 0 and asm.malformed == 0
    assert asm.transitions_received == len(rows) and asm.emitted == 30
    assert asm.not_learned == 6  # the truncating STAND row and the STAND rows after it


def test_a_gap_yields_no_transition_on_either_side_and_starts_a_segment():
    rows = [r for r in walk_then_stop() if r.seq not in (12, 13)]
    asm, out = assemble(messages(rows))
    assert asm.sequence_gaps == 2
    seqs = list(out['seq'])
    assert 11 not in seqs and 12 not in seqs and 13 not in seqs and 10 in seqs and 14 in seqs
    assert len(seqs) == 27
    i10, i14 = seqs.index(10), seqs.index(14)
    assert out['segment_end'][i10] and not out['truncated'][i10]
    assert out['segment'][i14] == out['segment'][i10] + 1
    fields = replay_fields(out)
    assert fields[5][i10] and not out['truncated'][i10]  # the buffer sees the break as a stop


def test_out_of_order_and_duplicated_messages_give_the_same_transitions():
    rows = walk_then_stop(first=100, count=40)
    msgs = messages(rows)
    _, expected = assemble(msgs)
    shuffled = [msgs[0], msgs[2], msgs[1], msgs[1], msgs[3], msgs[0], msgs[4]]
    # Rows swapped inside a message too: seq 141 before 140.
    inner = rows[40:46]
    shuffled[-1] = transition.pack_rows([inner[1], inner[0], *inner[2:]])
    asm, out = assemble(shuffled)
    assert asm.duplicates == 20 and asm.sequence_gaps == 0 and asm.late == 0
    for name in expected:
        assert np.array_equal(out[name], expected[name]), name


def test_a_row_later_than_the_window_is_dropped_as_late_and_counted_as_a_gap():
    rows = walk_then_stop(count=60)
    late = rows.pop(5)
    msgs = messages(rows) + [transition.pack_rows([late])]
    asm, out = assemble(msgs, window=20)
    assert asm.late == 1 and asm.duplicates == 0 and asm.sequence_gaps == 1
    assert 4 not in out['seq'] and 5 not in out['seq'] and 6 in out['seq']


def test_terminated_episode_ends_without_bootstrap_and_the_next_episode_is_a_new_segment():
    rows = [row(i, 3) for i in range(15)]
    rows.append(row(15, 3, 'DAMP', terminated=True))  # the fault row keeps the episode id
    rows += [row(16 + i, 4, 'DAMP') for i in range(4)]
    rows += [row(20 + i, 4, 'STAND') for i in range(3)]
    rows += [row(23 + i, 5) for i in range(10)] + [row(33, 5, 'STAND', truncated=True)]
    asm, out = assemble(messages(rows))
    seqs = list(out['seq'])
    assert seqs == list(range(15)) + list(range(23, 33))
    i14 = seqs.index(14)
    assert out['terminated'][i14] and out['segment_end'][i14] and out['next_obs'][i14, 0] == 15
    assert out['segment'][i14 + 1] == out['segment'][i14] + 1
    assert out['truncated'][-1] and not out['terminated'][i14 + 1 :].any()


def test_walk_row_followed_by_an_unflagged_other_mode_or_episode_is_a_break():
    rows = [row(0), row(1), row(2, mode='STAND'), row(3, episode=2), row(4, episode=3)]
    asm, out = assemble(messages(rows))
    assert list(out['seq']) == [0] and asm.breaks == 2  # 1 -> unflagged STAND, 3 -> episode 3


def test_policy_version_is_that_of_the_row_that_chose_the_action():
    rows = [row(i, version=1 if i < 5 else 2) for i in range(10)]
    rows.append(row(10, mode='STAND', truncated=True, version=2))
    _, out = assemble(messages(rows))
    assert list(out['policy_version']) == [1] * 5 + [2] * 5


def test_malformed_messages_are_counted_and_dropped_never_raised():
    good = transition.pack_rows([row(i) for i in range(10)])
    dims, data = good
    nan = data.copy()
    nan[20] = np.nan
    bad = [
        ([dims[0]], data),  # one layout dim
        ([dims[0], ('loco_transition_v0', dims[1][1], dims[1][2])], data),  # old schema
        (dims, nan),  # non-finite
        ([dims[0], (transition.SCHEMA, dims[1][1] - 1, dims[1][2])], data),  # wrong width
        (dims, data[:-3]),  # too short
        (None, data),  # not a layout at all
        (dims, 'text'),  # not numbers
    ]
    asm = TransitionAssembler(WEIGHTS)
    for dims_, data_ in bad:
        assert asm.feed(dims_, data_) == 0
    assert asm.malformed == len(bad) and asm.last_error
    assert asm.feed(*good) == 10 and asm.transitions_received == 10
    asm.feed(*transition.pack_rows([row(10, mode='STAND', truncated=True)]))
    asm.finish()
    assert len(asm.drain()['seq']) == 10


def test_a_publisher_restart_starts_a_new_stream():
    first = walk_then_stop(first=5000, count=30, episode=9)
    second = walk_then_stop(first=0, count=20, episode=1)
    asm, out = assemble(messages(first) + messages(second))
    assert asm.restarts == 1 and asm.duplicates == 0 and asm.late == 0
    assert len(out['seq']) == 50 and asm.sequence_gaps == 0
    assert list(out['seq'][30:]) == list(range(20))


@pytest.mark.parametrize('old_rows', [40, 200])
def test_a_restart_sooner_than_restart_after_rows_is_told_from_duplicates_by_content(old_rows):
    old = [row(seq) for seq in range(old_rows)]  # died at seq old_rows - 1, mid-episode
    new = walk_then_stop(first=0, count=300)  # started again at 0: same numbers, new rows
    for r in new:
        r.obs = r.obs + 1e4
    asm, out = assemble(messages(old) + messages(new))
    assert asm.restarts == 1 and asm.duplicates == 0 and asm.late == 0
    renewed = out['obs'][:, 0] >= 1e4
    assert renewed.sum() == 300  # every transition of the new stream is kept
    # no transition has s from one stream and s' from the other, and none joins them by segment
    assert np.array_equal(out['next_obs'][:, 0] >= 1e4, renewed)
    assert not set(out['segment'][renewed]) & set(out['segment'][~renewed])
    # a re-delivered copy of a decided row is still a duplicate
    asm2, _ = assemble(messages(old) + messages(old[: old_rows // 2]))
    assert asm2.restarts == 0 and asm2.duplicates == old_rows // 2


def test_large_forward_jump_is_counted_without_walking_every_number():
    rows = walk_then_stop(count=10) + walk_then_stop(first=2**31, count=10, episode=2)
    asm, out = assemble(messages(rows))
    assert asm.sequence_gaps == 2**31 - 16 and len(out['seq']) == 20


def test_n_step_windows_equal_the_replay_buffers_and_never_span_a_gap():
    rng = np.random.default_rng(0)
    rows = walk_then_stop(count=40, episode=1)[:-3]  # 0..39 WALK, 40 truncates, 41..42 STAND
    rows += [row(43 + i, 2) for i in range(30)] + [row(73, 2, 'DAMP', terminated=True)]
    rows += [row(74 + i, 3) for i in range(25)] + [row(99, 3, 'STAND', truncated=True)]
    lost = set(rng.choice(np.arange(100), size=8, replace=False).tolist())
    asm, out = assemble(messages([r for r in rows if r.seq not in lost]))
    size, n, gamma = len(out['seq']), 5, 0.9
    buffer = ReplayBuffer(size, 1, spec.OBS_DIM, spec.ACTION_DIM)
    for values in zip(*replay_fields(out)):
        buffer.add(*(torch.as_tensor(np.asarray(v))[None] for v in values))
    ref = buffer.n_step(torch.arange(size), torch.zeros(size, dtype=torch.long), n, gamma)
    got = n_step_returns(out, n, gamma)
    assert np.allclose(got['reward'], ref.reward.numpy(), atol=1e-6)
    assert np.array_equal(got['next_obs'], ref.next_obs.numpy())
    assert np.array_equal(got['terminated'], ref.terminated.numpy())
    assert np.allclose(got['discount'], ref.discount.numpy())
    seq = out['seq'].astype(np.int64)
    for t in range(size):  # every window: consecutive sequence numbers inside one segment
        steps = np.arange(t, t + got['n_eff'][t])
        assert np.array_equal(seq[steps], seq[t] + np.arange(len(steps)))
        assert len(set(out['segment'][steps])) == 1
        assert not any(s in lost for s in range(seq[t], seq[t] + len(steps) + 1))
    assert got['n_eff'].max() == n and got['n_eff'].min() == 1


def test_weights_of_a_config_object_change_the_reward():
    class Config:
        lin_vel_tracking, yaw_rate_tracking, lin_vel_z, ang_vel_xy = 2.0, 0.0, 0.0, 0.0
        orientation, torque, action_rate = 0.0, 0.0, 0.0
        alive, lin_vel_error, yaw_rate_error = 0.0, 0.0, 0.0

    rows = walk_then_stop(count=5)
    asm = TransitionAssembler(robot_weights(Config(), dt=0.5))
    for dims, data in messages(rows):
        asm.feed(dims, data)
    asm.finish()
    out = asm.drain()
    assert np.allclose(out['reward'], out['reward_terms'][:, 0])  # 2.0 * 0.5 * kernel
    with pytest.raises(ValueError, match='window'):
        TransitionAssembler(WEIGHTS, window=0)
