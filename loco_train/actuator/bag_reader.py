"""rosbag2 (MCAP) recordings of /joint_states and the commands as aligned numpy arrays.

The commands are /joint_command/applied where the recording has it (the drives' own report, on
the states' clock), else /joint_command.

A BAG argument is a rosbag2 directory (metadata.yaml + .mcap), a recorder output root holding
such splits (read in order, as one recording) or one .mcap file. Joints are matched by name
(any order; the 12 robot joints must all be there), times are the messages' header stamps.
Each recording is cut into segments wherever /joint_states or /joint_command pause (a gap longer
than GAP_FACTOR median periods and MIN_GAP) or the commanded gains change. States recorded while
the commands paused (later than one command period after the last one) are dropped, and each
segment starts HISTORY after its commands begin, so that the delayed command the drive acted on
is always one the recording holds. The fit puts the commands on the physics grid by zero-order
hold (``hold_on_grid``). Non-finite or missing state values are refused, naming the message, and
so is a sender's /joint_command stamped on a clock the recorder's receive times show to be off
the states' clock.
"""

from dataclasses import dataclass
import hashlib
import os

import numpy as np

from loco_policy import spec
from loco_policy.control import joint_command
from loco_train.actuator.model import MAX_DELAY

STATE_TOPIC = '/joint_states'
COMMAND_TOPIC = '/joint_command'
APPLIED_TOPIC = '/joint_command/applied'
"""The commands as the drives took them in, stamped on the states' clock (sim_robot, or a robot
driver that reports them); preferred to COMMAND_TOPIC where a recording has it."""

GAP_FACTOR = 5.0
"""A pause longer than this many median message periods (and than MIN_GAP) splits a recording."""

MIN_GAP = 0.05
"""Shortest pause (s) that counts as a gap (shorter ones are scheduling jitter; the drive holds
the last command through them, as the zero-order hold does)."""

STAMP_TOLERANCE = 1e-6
"""A command stamped up to this long (s) after a physics step's start is in force for it (stamps
are whole nanoseconds: equal times on two clocks may round apart)."""

CLOCK_TOLERANCE = 0.005
"""Largest offset (s) between the clocks that stamp /joint_command and /joint_states, as the
recorder's receive times show it; beyond it the fit's delay would absorb the offset."""

MIN_SEGMENT = 1.0
"""Shortest segment (s) kept; shorter pieces between gaps are dropped."""

HISTORY = MAX_DELAY + 0.01
"""Command history (s) a segment's first state needs: the fit's delay reaches MAX_DELAY back,
and its history buffer a few physics steps more. Where the recording lacks it (after a command
gap or a gain change, or at its start) that stretch of states is dropped."""


class BagError(ValueError):
    """A recording that cannot be used, with the reason."""


@dataclass
class Segment:
    """A stretch of one recording without gaps and with constant commanded gains, robot order."""

    bag: str
    """Path of the recording."""
    t: np.ndarray
    """(N,) /joint_states stamps (s, the recording's clock)."""
    q: np.ndarray
    """(N, 12) joint positions (rad)."""
    qd: np.ndarray
    """(N, 12) joint velocities (rad/s)."""
    tau: np.ndarray
    """(N, 12) joint efforts (N m)."""
    cmd_t: np.ndarray
    """(M,) /joint_command stamps (s)."""
    cmd_q: np.ndarray
    """(M, 12) q* (rad)."""
    cmd_qd: np.ndarray
    """(M, 12) qd* (rad/s)."""
    cmd_ff: np.ndarray
    """(M, 12) tau_ff (N m)."""
    kp: np.ndarray
    """(12,) commanded kp (N m/rad), constant over the segment."""
    kd: np.ndarray
    """(12,) commanded kd (N m s/rad)."""
    limit: np.ndarray
    """(12,) commanded torque limit (N m)."""

    @property
    def duration(self):
        """Length (s) of the segment's joint-state stream."""
        return float(self.t[-1] - self.t[0])

    def window(self, start, end):
        """The part of the segment with state stamps in [start, end) s (commands kept before)."""
        keep = (self.t >= start) & (self.t < end)
        ckeep = self.cmd_t < end
        return Segment(self.bag, self.t[keep], self.q[keep], self.qd[keep], self.tau[keep],
                       self.cmd_t[ckeep], self.cmd_q[ckeep], self.cmd_qd[ckeep],
                       self.cmd_ff[ckeep], self.kp, self.kd, self.limit)  # fmt: skip


def bag_paths(path):
    """The rosbag2 directories (or the .mcap file) that make up the recording at path."""
    if os.path.isfile(path):
        if not path.endswith('.mcap'):
            raise BagError(f'{path}: not an MCAP file or a rosbag2 directory')
        return [path]
    if not os.path.isdir(path):
        raise BagError(f'{path}: no such bag')
    if os.path.isfile(os.path.join(path, 'metadata.yaml')):
        return [path]
    splits = sorted(
        os.path.join(path, name) for name in os.listdir(path)
        if os.path.isfile(os.path.join(path, name, 'metadata.yaml'))
    )  # fmt: skip
    if not splits:
        raise BagError(f'{path}: neither a rosbag2 directory nor a root of bag splits')
    return splits


def sha256(path):
    """Hex sha256 of the recording's MCAP bytes (its files in name order)."""
    digest = hashlib.sha256()
    files = []
    for part in bag_paths(path):
        if os.path.isfile(part):
            files.append(part)
        else:
            files += sorted(os.path.join(part, n) for n in os.listdir(part) if n.endswith('.mcap'))
    for name in files:
        with open(name, 'rb') as stream:
            for block in iter(lambda: stream.read(2**20), b''):
                digest.update(block)
    return digest.hexdigest()


def _messages(path):
    """The state and command messages of the recording and when the recorder received them.

    ({topic: [message]} in file order, {topic: (n,) recording times (s)}).
    """
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import get_typestore

    from loco_policy.tools.bag_writer import TYPESTORE

    out = {STATE_TOPIC: [], COMMAND_TOPIC: [], APPLIED_TOPIC: []}
    received = {topic: [] for topic in out}
    typestore = get_typestore(TYPESTORE)
    for part in bag_paths(path):
        try:
            with AnyReader([_as_path(part)], default_typestore=typestore) as reader:
                connections = [c for c in reader.connections if c.topic in out]
                for connection, log_time, raw in reader.messages(connections=connections):
                    out[connection.topic].append(reader.deserialize(raw, connection.msgtype))
                    received[connection.topic].append(log_time * 1e-9)
        except BagError:
            raise
        except Exception as error:  # rosbags' reader errors: a truncated or foreign file
            raise BagError(
                f'{part}: cannot read the bag ({type(error).__name__}: {error}); a recording '
                'cut short by a kill or a full disk is repaired by `loco-bag-recover DIR`'
            ) from None
    return out, {topic: np.array(times) for topic, times in received.items()}


def _as_path(part):
    """pathlib.Path of a bag part (rosbags wants Paths; an .mcap file reads as its directory)."""
    from pathlib import Path

    return Path(part)


def _stamp(msg):
    """Header stamp (s) of a message."""
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


def _states(path, messages):
    """T (N,), q, qd, tau (N, 12) from /joint_states messages, joints matched by name."""
    if not messages:
        raise BagError(f'{path}: no {STATE_TOPIC} messages (record {STATE_TOPIC} and '
                       f'{COMMAND_TOPIC})')  # fmt: skip
    names = list(messages[0].name)
    missing = [n for n in spec.JOINT_NAMES if n not in names]
    if missing:
        raise BagError(f'{path}: {STATE_TOPIC} joint names {names} do not match the robot: '
                       f'missing {missing}')  # fmt: skip
    order = np.array([names.index(n) for n in spec.JOINT_NAMES])
    rows = []
    for msg in messages:
        if list(msg.name) != names:
            index = {n: i for i, n in enumerate(msg.name)}
            if any(n not in index for n in spec.JOINT_NAMES):
                continue
            row_order = np.array([index[n] for n in spec.JOINT_NAMES])
        else:
            row_order = order
        lengths = {f: len(getattr(msg, f)) for f in ('position', 'velocity', 'effort')}
        short = [f for f, size in lengths.items() if size < len(msg.name)]
        if short:
            raise BagError(f'{path}: {STATE_TOPIC} at {_stamp(msg):.6f} s has fewer '
                           f'{" and ".join(short)} values than joint names ({lengths}, '
                           f'{len(msg.name)} names); the fit needs all three')  # fmt: skip
        values = [np.asarray(getattr(msg, f), dtype=float)[row_order] for f in lengths]
        bad = [f for f, v in zip(lengths, values) if not np.all(np.isfinite(v))]
        if bad:
            joints = [spec.JOINT_NAMES[j] for j in np.nonzero(~np.isfinite(np.stack(values)))[1]]
            raise BagError(f'{path}: {STATE_TOPIC} at {_stamp(msg):.6f} s holds non-finite '
                           f'{", ".join(bad)} ({sorted(set(joints))})')  # fmt: skip
        rows.append((_stamp(msg), *values))
    t = np.array([r[0] for r in rows])
    if np.any(t <= 0):
        raise BagError(f'{path}: {STATE_TOPIC} messages without header stamps')
    return (
        t,
        np.array([r[1] for r in rows]),
        np.array([r[2] for r in rows]),
        np.array([r[3] for r in rows]),
    )


def _commands(path, messages, topic=COMMAND_TOPIC):
    """T (M,) and the JointCommand fields (M, 12) of the command messages (read from topic)."""
    if not messages:
        raise BagError(f'{path}: no {COMMAND_TOPIC} messages (record {STATE_TOPIC} and '
                       f'{COMMAND_TOPIC})')  # fmt: skip
    t, fields = [], []
    for msg in messages:
        try:
            command = joint_command.unpack(msg.name, msg.position, msg.velocity, msg.effort)
        except ValueError as error:
            raise BagError(f'{path}: {topic} at {_stamp(msg):.6f} s: {error}') from None
        t.append(_stamp(msg))
        fields.append(np.stack([command.position, command.velocity, command.effort,
                                command.kp, command.kd, command.torque_limit]))  # fmt: skip
    t = np.array(t)
    if np.any(t <= 0):
        raise BagError(f'{path}: {topic} messages without header stamps')
    order = np.argsort(t, kind='stable')
    return t[order], np.array(fields)[order]


def clock_offset(messages, received):
    """Estimated offset (s) of the command sender's clock from the states' clock.

    Per topic, the median of recording time minus header stamp is transport latency plus the
    offset of that topic's clock from the recorder's; their difference is the offset between
    the two stamping clocks, up to the difference of the two topics' latencies.
    """
    lag = {}
    for topic in (STATE_TOPIC, COMMAND_TOPIC):
        stamps = np.array([_stamp(m) for m in messages[topic]])
        lag[topic] = float(np.median(received[topic] - stamps))
    return lag[STATE_TOPIC] - lag[COMMAND_TOPIC]


def _check_clocks(path, messages, received, tolerance):
    """BagError when the commands are stamped over tolerance (s) off the states' clock."""
    offset = clock_offset(messages, received)
    if abs(offset) > tolerance:
        raise BagError(
            f'{path}: {COMMAND_TOPIC} is stamped on a clock {offset * 1e3:+.1f} ms off the '
            f'{STATE_TOPIC} clock (median recording time minus stamp, per topic; tolerance '
            f'{tolerance * 1e3:.1f} ms): the fitted command delay would be off by as much. '
            'A driver that publishes its samples late shows the same way. Synchronise the clocks '
            f'(PTP, chrony), record {APPLIED_TOPIC}, or allow it with --clock-tolerance'
        )


def _breaks(t):
    """Indices i where t[i] - t[i-1] is a gap (> GAP_FACTOR median periods and > MIN_GAP)."""
    dt = np.diff(t)
    if dt.size == 0:
        return np.array([], dtype=int)
    return np.nonzero(dt > max(GAP_FACTOR * np.median(dt), MIN_GAP))[0] + 1


def read(path, clock_tolerance=CLOCK_TOLERANCE):
    """The gap-free, constant-gain Segments of the recording at path; BagError when unusable.

    clock_tolerance: s, the largest clock offset between the command and state stamps.
    """
    messages, received = _messages(path)
    t, q, qd, tau = _states(path, messages[STATE_TOPIC])
    order = np.argsort(t, kind='stable')
    t, q, qd, tau = t[order], q[order], qd[order], tau[order]
    first = np.concatenate([[True], np.diff(t) > 0])  # a repeated stamp is the same sample
    t, q, qd, tau = t[first], q[first], qd[first], tau[first]
    topic = APPLIED_TOPIC if messages[APPLIED_TOPIC] else COMMAND_TOPIC
    cmd_t, fields = _commands(path, messages[topic], topic)
    if topic == COMMAND_TOPIC:
        _check_clocks(path, messages, received, clock_tolerance)
    period = float(np.median(np.diff(cmd_t))) if len(cmd_t) > 1 else 0.0  # s, of the commands
    # cut points (s): state gaps, command gaps (both ends), gain changes
    cuts = [t[i] for i in _breaks(t)]
    stale = np.zeros(len(t), dtype=bool)  # states during a command gap: no known command
    regimes = [cmd_t[0]]  # times from which the commands' history is known (s)
    for i in _breaks(cmd_t):
        # the drive held the last command for about one period, then its own timeout acted
        held_until = cmd_t[i - 1] + period
        stale |= (t >= held_until) & (t < cmd_t[i])
        cuts += [held_until, cmd_t[i]]
        regimes.append(cmd_t[i])
    gains = fields[:, 3:6].reshape(len(cmd_t), -1)
    change = np.nonzero(np.any(np.diff(gains, axis=0) != 0, axis=1))[0] + 1
    cuts += [cmd_t[i] for i in change]
    regimes += [cmd_t[i] for i in change]
    regimes = np.sort(np.array(regimes))
    edges = [max(t[0], cmd_t[0])] + sorted(c for c in cuts if c > max(t[0], cmd_t[0]))
    edges.append(min(t[-1], cmd_t[-1]) + 1e-9)
    segments = []
    for start, end in zip(edges[:-1], edges[1:]):
        known = regimes[np.searchsorted(regimes, start, side='right') - 1]  # this regime's start
        start = max(start, known + HISTORY)  # the delay's history must be recorded, not guessed
        keep = (t >= start) & (t < end) & ~stale
        ckeep = (cmd_t >= start) & (cmd_t < end)
        if keep.sum() < 2 or ckeep.sum() < 1:
            continue
        # the commands the drive took from HISTORY before the first state on (same regime)
        first = max(0, np.searchsorted(cmd_t, start - HISTORY, side='right') - 1)
        cidx = np.arange(first, np.nonzero(ckeep)[0][-1] + 1)
        f = fields[cidx]
        if np.any(f[:, 3:6] != f[0, 3:6]):  # cannot happen: gain changes start regimes
            raise BagError(f'{path}: commanded gains change inside a segment at {start:.6f} s')
        segment = Segment(path, t[keep], q[keep], qd[keep], tau[keep], cmd_t[cidx],
                          f[:, 0], f[:, 1], f[:, 2], f[0, 3], f[0, 4], f[0, 5])  # fmt: skip
        if segment.duration >= MIN_SEGMENT and np.any(segment.kp > 0):
            segments.append(segment)
    if not segments:
        raise BagError(
            f'{path}: no stretch of at least {MIN_SEGMENT} s with {STATE_TOPIC} and '
            f'{COMMAND_TOPIC} together, without gaps and with kp > 0'
        )
    return segments


def hold_on_grid(segment, times):
    """Ctrl (K, 36) = q*, qd*, tau_ff in force at times (K,) s (zero-order hold of the commands).

    Before the segment's first command the first one is held.
    """
    index = np.searchsorted(segment.cmd_t, np.asarray(times) + STAMP_TOLERANCE, side='right') - 1
    index = np.clip(index, 0, None)
    return np.concatenate(
        [segment.cmd_q[index], segment.cmd_qd[index], segment.cmd_ff[index]], axis=1
    )
