"""Rebuild SAC transitions (s, a, r, s', terminated, truncated) from /replay/transitions rows.

Each message is validated with loco_policy.transition; a malformed one is counted and dropped.
Rows are paired by sequence number: the transition of row k is

    s = obs_k, a = action_k, s' = obs_{k+1}, terminated/truncated = the flags of row k+1

when row k is a WALK row without an end flag and row k+1 (seq k + 1) is of the same episode and
is either a WALK row or the row that ends the episode. policy_node sets a flag on the first row
after the episode's last action (the DAMP row of a fault, the STAND row of a stop), so a
flagged row is the s' of the episode's last transition and starts none (its action is no policy
action). Consequences, chosen on purpose:

- terminated: the target does not bootstrap; s' is still the observation the robot reached.
- truncated: s' is the true next observation (the state the last WALK action led to, seen one
  tick later), so the transition is kept and a timeout-aware target bootstraps from V(s').
- a missing row (a gap) or a row that never comes: no transition uses it, on either side.

Rewards follow training's timing: training scores step t on the state after action a_t and on
|a_t - a_{t-1}|^2. Row k+1 holds the terms measured after a_k (velocities, tilt, efforts) and
row k the action rate of a_k, so the reward terms of transition k take the state terms of row
k+1 and the action rate of row k. The terminal transition thus pays for the state it fell into.

Rows may arrive out of order within `window` sequence numbers; a row further behind the newest
is late (dropped, counted). The publisher restarted (its sequence numbers start over) when a row
is far behind the newest (restart_after), lies before the stream's first row, or carries a
sequence number already decided whose content differs from the row decided there (the last
restart_after rows are remembered by a digest); an identical one is a duplicate.

n-step returns: every transition carries `segment`, an id that changes after every gap and
episode end, and `segment_end` (True on a segment's last transition). The sidecar feeds the
existing ReplayBuffer (num_envs = 1) with truncated = truncated | segment_end (replay_fields):
its n-step window stops at any done flag and bootstraps from next_obs, which is the true s'
here, so it never joins across a gap. n_step_returns forms the same windows in numpy.
"""

from collections import deque

import numpy as np

from loco_policy import spec
from loco_policy.transition import REWARD_TERMS, unpack_rows
from loco_train.finetune.reward import robot_reward

ACTION_RATE = REWARD_TERMS.index('action_rate')
"""Column of the action-rate term: a term of the action, taken from row k, not row k+1."""

TRANSITION_DTYPE = np.dtype(
    [
        ('seq', np.uint64),  # sequence number of row k (s)
        ('episode', np.uint32),
        ('policy_version', np.uint32),  # the policy that chose a
        ('segment', np.uint64),  # changes after every gap and episode end
        ('obs', np.float32, (spec.OBS_DIM,)),
        ('action', np.float32, (spec.ACTION_DIM,)),
        ('reward_terms', np.float32, (len(REWARD_TERMS),)),  # raw, aligned as above
        ('reward', np.float32),  # robot_reward of reward_terms
        ('next_obs', np.float32, (spec.OBS_DIM,)),
        ('terminated', np.bool_),
        ('truncated', np.bool_),
        ('segment_end', np.bool_),  # the next transition is not this one's successor
    ]
)
"""One transition as drain() returns it (field by field) and the store keeps it (one record)."""


def row_digest(row):
    """A hash of a row's content: tells a copy of a decided row from a new stream's row."""
    return hash(
        (row.episode, row.mode, row.policy_version, row.obs.tobytes(), row.action.tobytes())
    )


def empty_transitions(size=0):
    """A dict of zeroed field arrays for size transitions (the shape drain() returns)."""
    table = np.zeros(size, dtype=TRANSITION_DTYPE)
    return {name: table[name].copy() for name in TRANSITION_DTYPE.names}


class TransitionAssembler:
    """Feed it each /replay/transitions message; drain() returns the finished transitions.

    A transition is handed out once the rows up to window + 2 sequence numbers after it are
    final (0.44 s at 50 Hz with window 20). Not thread-safe: feed and drain from one thread.
    """

    def __init__(self, weights, window=20, restart_after=250, memory=4096):
        """Weights from reward.robot_weights; window: reorder tolerance in rows (20 = 0.4 s)."""
        if window < 1 or restart_after <= window:
            raise ValueError(f'need window >= 1 and restart_after > window, got {window}')
        self.weights = weights
        self.window = int(window)
        self.restart_after = int(restart_after)
        self.messages = 0  # messages fed
        self.malformed = 0  # messages dropped by validation
        self.last_error = ''  # why the last malformed message was dropped
        self.transitions_received = 0  # rows in valid messages
        self.sequence_gaps = 0  # sequence numbers that never arrived
        self.duplicates = 0  # rows whose sequence number was already seen (ignored)
        self.late = 0  # rows arriving after their place was given up (dropped)
        self.restarts = 0  # publisher restarts (sequence numbers started over)
        self.not_learned = 0  # rows that start no transition: not WALK, or an episode's end
        self.breaks = 0  # WALK rows whose successor left the episode without an end flag
        self.emitted = 0  # transitions handed out by drain()
        self._missing = deque(maxlen=memory)  # (first, end) ranges of missing seqs, end exclusive
        self._segment = 0
        self._out = []
        self._held = None  # the last decided transition, waiting for its successor's fate
        self._reset_stream()

    def _reset_stream(self):
        """Forget the current stream's rows (after finish or a publisher restart)."""
        self._rows = {}  # seq -> TransitionRow, not yet released
        self._released = {}  # seq -> digest of a decided row, the last restart_after of them
        self._missing.clear()  # seqs given up in an earlier stream mean nothing in this one
        self._start = None  # first seq of the stream
        self._floor = None  # next seq to decide; every seq below is released
        self._highest = None

    def feed(self, dims, data, data_offset=0):
        """Take one message's layout dims and data; return the number of rows accepted."""
        self.messages += 1
        try:
            rows = unpack_rows(dims, data, data_offset)
        except Exception as error:  # any malformed layout: counted, never raised to the node
            self.malformed += 1
            self.last_error = f'{type(error).__name__}: {error}'
            return 0
        return sum(self._accept(row) for row in rows)

    def _accept(self, row):
        """Place one row; return 1 when kept for pairing, 0 when a duplicate or late."""
        self.transitions_received += 1
        s = row.seq
        if self._highest is not None and s <= self._highest - self.restart_after:
            self.restart()
        if self._highest is None:
            return self._accept_first(row)
        if s in self._rows:
            self.duplicates += 1
            return 0
        if self._start <= s < self._floor:  # decided already: late, a copy, or a new stream
            if self._was_missing(s):
                self.late += 1
                return 0
            if self._released.get(s) == row_digest(row):
                self.duplicates += 1
                return 0
            return self._new_stream(row)
        if s < self._start and s <= self._highest - self.window:  # before the stream began
            return self._new_stream(row)
        self._rows[s] = row
        if s < self._start:  # an early row arriving late, before anything was decided
            self._start = self._floor = s
        if s > self._highest:
            self._highest = s
            self._settle(self._highest - self.window)
        return 1

    def _new_stream(self, row):
        """The publisher restarted: close the stream and start the next one with row."""
        self.restart()
        return self._accept_first(row)

    def _accept_first(self, row):
        self._start = self._floor = self._highest = row.seq
        self._rows[row.seq] = row
        return 1

    def _was_missing(self, s):
        """True when s was given up as missing (within the remembered ranges)."""
        return any(first <= s < end for first, end in self._missing)

    def _settle(self, upto):
        """Decide the transitions of every seq k < upto (rows k and k+1 are final)."""
        while self._floor < upto:
            k = self._floor
            row = self._rows.pop(k, None)
            if row is None:  # jump over the whole missing run at once
                end = min([seq for seq in self._rows if seq > k] + [upto])
                self.sequence_gaps += end - k
                self._missing.append((k, end))
                self._push(None)
                self._floor = end
                continue
            self._push(self._pair(row, self._rows.get(k + 1)))
            self._remember(k, row)
            self._floor = k + 1

    def _remember(self, seq, row):
        """Keep the digest of decided row seq; forget those restart_after behind it."""
        self._released[seq] = row_digest(row)
        while next(iter(self._released)) <= seq - self.restart_after:  # oldest first
            del self._released[next(iter(self._released))]

    def _pair(self, row, succ):
        """The transition of row and its successor row (None when there is none)."""
        if row.mode != 'WALK' or row.terminated or row.truncated:
            self.not_learned += 1
            return None
        if succ is None:
            return None
        ends = succ.terminated or succ.truncated
        if succ.episode != row.episode or (succ.mode != 'WALK' and not ends):
            self.breaks += 1
            return None
        terms = succ.reward_terms.copy()  # state terms measured after a_k
        terms[ACTION_RATE] = row.reward_terms[ACTION_RATE]  # |a_k - a_{k-1}|^2
        return {
            'seq': row.seq,
            'episode': row.episode,
            'policy_version': row.policy_version,
            'obs': row.obs,
            'action': row.action,
            'reward_terms': terms,
            'next_obs': succ.obs,
            'terminated': succ.terminated,
            'truncated': succ.truncated,
        }

    def _push(self, transition):
        """Append the next decided transition (None: none) in sequence order."""
        held = self._held
        if held is not None:
            held['segment_end'] = transition is None or held['terminated'] or held['truncated']
            self._out.append(held)
        if transition is not None:
            if held is None or held['segment_end']:
                self._segment += 1
            transition['segment'] = self._segment
        self._held = transition

    def restart(self):
        """Close the current stream (as finish does) and expect sequence numbers anew."""
        self.finish()
        self.restarts += 1

    def finish(self):
        """Decide every row still held (the newest has no known successor), e.g. at shutdown."""
        if self._highest is not None:
            self._settle(self._highest)
            row = self._rows.pop(self._highest, None)
            if row is not None and (row.mode != 'WALK' or row.terminated or row.truncated):
                self.not_learned += 1
            self._push(None)
        self._reset_stream()

    def pending(self):
        """Rows held for pairing plus decided transitions not yet drained."""
        return len(self._rows) + len(self._out) + (self._held is not None)

    def drain(self):
        """Return the finished transitions, oldest first, as a dict of (B, ...) field arrays."""
        out, self._out = self._out, []
        result = empty_transitions(len(out))
        for name in TRANSITION_DTYPE.names:
            if name != 'reward' and out:
                result[name][:] = np.array([t[name] for t in out])
        result['reward'][:] = robot_reward(result['reward_terms'], self.weights)
        self.emitted += len(out)
        return result

    def stats(self):
        """The counters, for /diagnostics."""
        names = (
            'messages', 'malformed', 'transitions_received', 'sequence_gaps', 'duplicates',
            'late', 'restarts', 'not_learned', 'breaks', 'emitted',
        )  # fmt: skip
        return {name: getattr(self, name) for name in names}


def replay_fields(transitions):
    """Arguments of ReplayBuffer.add for num_envs = 1 rows: truncated also marks segment ends."""
    return (
        transitions['obs'],
        transitions['action'],
        transitions['reward'],
        transitions['next_obs'],
        transitions['terminated'],
        transitions['truncated'] | transitions['segment_end'],
    )


def n_step_returns(transitions, n_step, gamma):
    """n-step windows over consecutive transitions, as ReplayBuffer.n_step forms them.

    For each transition t: reward = sum_{k<n_eff} gamma^k r_{t+k}, next_obs and terminated of
    step t + n_eff - 1, discount = gamma^n_eff, where the window stops after an episode end or
    segment end and at the last transition given; it never joins two segments. Returns a dict
    of (B, ...) arrays: obs, action, reward, next_obs, terminated (float), discount, n_eff.
    """
    if n_step < 1:
        raise ValueError('n_step must be at least 1')
    seq = transitions['seq'].astype(np.int64)
    size = seq.shape[0]
    k = np.arange(n_step)  # (n,)
    idx = np.arange(size)[:, None] + k  # (B, n)
    clipped = np.minimum(idx, max(size - 1, 0))
    # Same segment and the very next sequence number: consecutive steps of one stream.
    follows = (idx < size) & (transitions['segment'][clipped] == transitions['segment'][:, None])
    follows &= seq[clipped] == seq[:, None] + k
    done = (
        transitions['terminated'] | transitions['truncated'] | transitions['segment_end']
    ).astype(np.int64)[clipped]  # (B, n)
    ended_before = np.cumsum(done, axis=1) - done
    S = np.logical_and.accumulate((ended_before == 0) & follows, axis=1)  # (B, n) S_k; S_0 = 1
    n_eff = S.sum(axis=1)  # (B,) >= 1
    gamma_k = gamma ** k.astype(np.float64)  # (n,)
    reward = (gamma_k * S * transitions['reward'][clipped]).sum(axis=1)
    last = np.take_along_axis(clipped, (n_eff - 1)[:, None], axis=1)[:, 0] if size else n_eff
    return {
        'obs': transitions['obs'],
        'action': transitions['action'],
        'reward': reward.astype(np.float32),
        'next_obs': transitions['next_obs'][last],
        'terminated': transitions['terminated'][last].astype(np.float32),
        'discount': (gamma ** n_eff.astype(np.float64)).astype(np.float32),
        'n_eff': n_eff,
    }
