"""The transition schema of /replay/transitions (ROS-free, shared with training).

A batch of N transitions travels as one std_msgs/Float32MultiArray:

    layout.dim[0] = ('transition', N, N * W)     rows, one per control tick
    layout.dim[1] = (SCHEMA, W, W)               fields of a row; SCHEMA names the version
    layout.data_offset = 0, data = N * W float32

A row holds the FIELDS below in order (W = ROW_WIDTH). Integers (sequence number, episode id,
policy version) are stored exactly as two float32 halves, value = hi * 65536 + lo, each in
[0, 65535], so every number stays finite and exact up to 2**32 - 1. The next observation of row
``seq`` is the observation of row ``seq + 1`` in the same episode; ``terminated`` and ``truncated``
mark an episode's last row. Rewards are the raw (unweighted) terms computable on the robot.
"""

from dataclasses import dataclass
import math

import numpy as np

from loco_policy import spec
from loco_policy.observation import projected_gravity_one

SCHEMA = 'loco_transition_v1'
"""Label of layout.dim[1]; changes with any change of the row layout."""

MODES = ('PASSIVE', 'STAND', 'WALK', 'DAMP')
"""Control mode codes: the index of the mode's name."""

REWARD_TERMS = (
    'track_lin_vel_xy',  # exp(-|v_xy - cmd_xy|^2 / sigma^2), v body frame (m/s)
    'track_ang_vel_z',  # exp(-(w_z - cmd_wz)^2 / sigma^2) (rad/s), sigma = spec.TRACKING_SIGMA
    'lin_vel_z',  # v_z^2 (m^2/s^2)
    'ang_vel_xy',  # |w_xy|^2 (rad^2/s^2)
    'orientation',  # |g_xy|^2 of the projected gravity (unitless)
    'torques',  # |tau|^2 of measured joint efforts (N^2 m^2)
    'action_rate',  # |a_t - a_{t-1}|^2
)
"""Reward terms computed on the robot, raw; training weights them."""

FIELDS = (
    ('seq', 2),
    ('episode', 2),
    ('policy_version', 2),
    ('mode', 1),
    ('obs', spec.OBS_DIM),
    ('action', spec.ACTION_DIM),
    ('reward_terms', len(REWARD_TERMS)),
    ('terminated', 1),
    ('truncated', 1),
)
"""(name, width) of each row field, in order."""

MAX_REWARD_TERM = 1.0e6
"""Largest raw term a robot can report: every term is an exponential in [0, 1] or a square
(|tau|^2 of 12 drives at their 80 N m limit is 7.7e4); a larger one is a fault, not data."""

ROW_WIDTH = sum(width for _, width in FIELDS)
INT_FIELDS = ('seq', 'episode', 'policy_version')
MAX_INT = 2**32 - 1


def field_slices():
    """Map each field name to its slice of a row."""
    slices, start = {}, 0
    for name, width in FIELDS:
        slices[name] = slice(start, start + width)
        start += width
    return slices


SLICES = field_slices()


@dataclass
class TransitionRow:
    """One control tick as the replay stream carries it."""

    seq: int
    """Sequence number, +1 per tick of the publishing node."""
    episode: int
    """Episode id: +1 each time WALK is entered (and after a fault)."""
    policy_version: int
    """Numeric policy version (first 8 hex digits of the file sha256, as an integer)."""
    mode: str
    """Control mode name."""
    obs: np.ndarray
    """(48,) observation given to the policy."""
    action: np.ndarray
    """(12,) action a_t (in non-WALK modes the equivalent (q* - default) / scale)."""
    reward_terms: np.ndarray
    """(len(REWARD_TERMS),) raw reward terms."""
    terminated: bool
    """True when this tick ended the episode by a fault (fall, limit, stale input)."""
    truncated: bool
    """True when this tick ended the episode without a fault (stop, mode change)."""


def reward_terms(base_lin_vel, base_ang_vel, base_quat, command, effort, action, last_action):
    """Return the (7,) raw reward terms of REWARD_TERMS for one tick (body-frame inputs)."""
    vx, vy, vz = (float(c) for c in base_lin_vel)
    wx, wy, wz = (float(c) for c in base_ang_vel)
    cx, cy, cz = (float(c) for c in command)
    gx, gy, _ = projected_gravity_one(base_quat)
    effort = np.asarray(effort, dtype=np.float64)  # (12,) N m
    change = np.asarray(action, dtype=np.float64) - last_action  # (12,)
    sigma2 = spec.TRACKING_SIGMA**2
    return np.array(
        [
            math.exp(-((vx - cx) * (vx - cx) + (vy - cy) * (vy - cy)) / sigma2),
            math.exp(-(wz - cz) * (wz - cz) / sigma2),
            vz * vz,
            wx * wx + wy * wy,
            gx * gx + gy * gy,
            float(effort @ effort),
            float(change @ change),
        ]
    )


def _split(value):
    """(hi, lo) 16-bit halves of a non-negative integer below 2**32."""
    value = int(value)
    if not 0 <= value <= MAX_INT:
        raise ValueError(f'integer field {value} outside [0, 2**32 - 1]')
    return value >> 16, value & 0xFFFF


def pack_rows(rows):
    """Return (dims, data): dims [(label, size, stride)] x 2 and data (N * W,) float32."""
    data = np.zeros((len(rows), ROW_WIDTH), dtype=np.float32)
    for i, row in enumerate(rows):
        for name in INT_FIELDS:
            data[i, SLICES[name]] = _split(getattr(row, name))
        data[i, SLICES['mode']] = MODES.index(row.mode)
        data[i, SLICES['obs']] = row.obs
        data[i, SLICES['action']] = row.action
        data[i, SLICES['reward_terms']] = row.reward_terms
        data[i, SLICES['terminated']] = float(row.terminated)
        data[i, SLICES['truncated']] = float(row.truncated)
    if not np.all(np.isfinite(data)):
        raise ValueError('refusing to pack transitions with non-finite numbers')
    dims = [('transition', len(rows), len(rows) * ROW_WIDTH), (SCHEMA, ROW_WIDTH, ROW_WIDTH)]
    return dims, data.reshape(-1)


def unpack_rows(dims, data, data_offset=0):
    """Validate a packed batch and return its TransitionRows; raise ValueError naming the fault."""
    if len(dims) != 2:
        raise ValueError(f'transition batch needs 2 layout dims, got {len(dims)}')
    (_, n, _), (label, width, _) = dims
    if label != SCHEMA:
        raise ValueError(f'transition schema {label!r} is not {SCHEMA!r}')
    if width != ROW_WIDTH:
        raise ValueError(f'transition row width {width} is not {ROW_WIDTH}')
    data = np.asarray(data, dtype=np.float32)[data_offset:]
    if data.size != n * width:
        raise ValueError(f'transition batch holds {data.size} floats, layout says {n * width}')
    if not np.all(np.isfinite(data)):
        raise ValueError('transition batch holds non-finite numbers')
    table = data.reshape(n, width)
    rows = []
    for r in table:
        ints = {}
        for name in INT_FIELDS:
            hi, lo = r[SLICES[name]]
            if hi != int(hi) or lo != int(lo) or not (0 <= hi <= 0xFFFF and 0 <= lo <= 0xFFFF):
                raise ValueError(f'transition field {name} halves ({hi}, {lo}) are not 16-bit')
            ints[name] = int(hi) * 65536 + int(lo)
        mode = r[SLICES['mode']][0]
        flags = r[SLICES['terminated']][0], r[SLICES['truncated']][0]
        if mode not in range(len(MODES)) or any(f not in (0.0, 1.0) for f in flags):
            raise ValueError(f'transition mode {mode} or flags {flags} out of range')
        terms = r[SLICES['reward_terms']]
        if not np.all((terms >= 0.0) & (terms <= MAX_REWARD_TERM)):
            raise ValueError(
                f'transition reward terms {terms.tolist()} outside [0, {MAX_REWARD_TERM:g}]'
            )
        rows.append(
            TransitionRow(
                mode=MODES[int(mode)],
                obs=r[SLICES['obs']].copy(),
                action=r[SLICES['action']].copy(),
                reward_terms=r[SLICES['reward_terms']].copy(),
                terminated=bool(flags[0]),
                truncated=bool(flags[1]),
                **ints,
            )
        )
    return rows


def gaps(rows):
    """Return the sequence numbers missing between consecutive rows (lost transitions)."""
    seqs = [row.seq for row in rows]
    return [s for a, b in zip(seqs[:-1], seqs[1:]) for s in range(a + 1, b)]
