"""The robot and policy contract: joint order, default pose, gains, timing, observation layout.

Every other module imports these figures from here; nothing restates them. numpy only.
"""

from dataclasses import dataclass

import numpy as np

ROBOT_NAME = 'anymal_c'

LEGS = ('LF', 'RF', 'LH', 'RH')
"""Leg order: left fore, right fore, left hind, right hind."""

JOINT_NAMES = tuple(f'{leg}_{joint}' for leg in LEGS for joint in ('HAA', 'HFE', 'KFE'))
"""The 12 actuated joints in robot order (hip abduction, hip flexion, knee flexion per leg)."""

NUM_JOINTS = len(JOINT_NAMES)

FOOT_NAMES = tuple(f'{leg}_FOOT' for leg in LEGS)
"""Names of the foot-sphere geoms (and foot sites) in the robot description, leg order."""

BASE_BODY = 'base'

DEFAULT_JOINT_POS = np.array(
    [0.0, 0.4, -0.8, 0.0, 0.4, -0.8, 0.0, -0.4, 0.8, 0.0, -0.4, 0.8], dtype=np.float64
)
"""Standing pose q_default (12,) in rad, robot order; knees point inward ("X" stance)."""

DEFAULT_BASE_HEIGHT = 0.6
"""Base height (m) at which episodes start, feet a few cm above the ground at the default pose."""

ACTION_SCALE = 0.5
"""q* = q_default + ACTION_SCALE * a (rad per unit action); the only action type."""

KP = np.full(NUM_JOINTS, 80.0)
"""PD stiffness per joint (N m/rad)."""

KD = np.full(NUM_JOINTS, 2.0)
"""PD damping per joint (N m s/rad)."""

TORQUE_LIMIT = np.full(NUM_JOINTS, 80.0)
"""Drive torque limit per joint (N m), |tau| <= TORQUE_LIMIT."""

JOINT_POS_LIMITS = np.array(
    [
        [-0.72, 0.49],
        [-9.42478, 9.42478],
        [-9.42478, 9.42478],
        [-0.49, 0.72],
        [-9.42478, 9.42478],
        [-9.42478, 9.42478],
        [-0.72, 0.49],
        [-9.42478, 9.42478],
        [-9.42478, 9.42478],
        [-0.49, 0.72],
        [-9.42478, 9.42478],
        [-9.42478, 9.42478],
    ]
)
"""Hard joint range (12, 2) in rad, [low, high], as in the robot description."""

MAX_JOINT_OFFSET = 1.0
"""Largest |q* - q_default| (rad) a policy action may ask for (inside the joint range too)."""


def _action_half_range():
    """(12,) largest |action| per joint: the joint range around q_default, capped, over scale."""
    reach = np.minimum(
        JOINT_POS_LIMITS[:, 1] - DEFAULT_JOINT_POS, DEFAULT_JOINT_POS - JOINT_POS_LIMITS[:, 0]
    )
    return np.minimum(reach, MAX_JOINT_OFFSET) / ACTION_SCALE


ACTION_HIGH = _action_half_range()
"""(12,) upper bound of a policy action (unitless); HAA 0.98, HFE and KFE 2.0."""

ACTION_LOW = -ACTION_HIGH
"""(12,) lower bound of a policy action; the box is centred on the default pose."""

CONTROL_DT = 0.02
"""Policy period (s): 50 Hz."""

COMMAND_RANGES = {'vx': (-1.0, 1.0), 'vy': (-1.0, 1.0), 'wz': (-1.0, 1.0)}
"""Velocity-command ranges: vx, vy in m/s (body frame), wz in rad/s."""

TRACKING_SIGMA = 0.5
"""Width (m/s, rad/s) of the velocity-tracking reward kernels exp(-error^2 / sigma^2), shared by
the training rewards and the robot's transition rows."""

GRAVITY = np.array([0.0, 0.0, -9.81])
"""World gravity (m/s^2); the observation uses its unit direction."""


@dataclass(frozen=True)
class ObservationTerm:
    """One named block of the policy observation."""

    name: str
    """Term name, stable across training, export and deployment."""
    dim: int
    """Number of entries."""
    scale: tuple
    """Per-entry multiplier applied before the policy (dim floats)."""


def _term(name, dim, scale):
    scale = (scale,) * dim if isinstance(scale, float) else tuple(scale)
    return ObservationTerm(name, dim, scale)


OBSERVATION = (
    _term('base_lin_vel', 3, 2.0),  # m/s, body frame
    _term('base_ang_vel', 3, 0.25),  # rad/s, body frame
    _term('projected_gravity', 3, 1.0),  # unit vector, body frame
    _term('command', 3, (2.0, 2.0, 0.25)),  # vx, vy (m/s), wz (rad/s)
    _term('joint_pos', NUM_JOINTS, 1.0),  # q - q_default (rad), robot order
    _term('joint_vel', NUM_JOINTS, 0.05),  # qd (rad/s), robot order
    _term('last_action', NUM_JOINTS, 1.0),  # previous policy output a_{t-1}
)
"""The policy observation layout, in order."""

OBS_DIM = sum(term.dim for term in OBSERVATION)
ACTION_DIM = NUM_JOINTS

GAIT_PERIOD = 0.5
"""Seconds per cycle of the gait clock (one stride: each diagonal pair swings once)."""

GAIT_CLOCK = _term('gait_clock', 2, 1.0)
"""sin, cos of 2 pi t / GAIT_PERIOD, t the seconds since the policy took control (WALK began;
an episode's start in training), counted in control periods."""

OBSERVATION_GAIT_CLOCK = OBSERVATION + (GAIT_CLOCK,)
"""The gait-phase task's layout: the velocity task's 48 terms, then the clock (50)."""

LAYOUTS = {'velocity': OBSERVATION, 'gait_clock': OBSERVATION_GAIT_CLOCK}
"""Observation layouts a policy file may declare, by name."""


def layout_named(name):
    """The observation layout (terms) of a LAYOUTS name; ValueError naming the known ones."""
    if name not in LAYOUTS:
        raise ValueError(f'observation layout {name!r} is not one of {sorted(LAYOUTS)}')
    return LAYOUTS[name]


def gait_clock(ticks):
    """(sin, cos) of the gait clock after `ticks` control periods (array-like, any shape)."""
    angle = 2.0 * np.pi * (np.asarray(ticks, dtype=np.float64) * CONTROL_DT / GAIT_PERIOD)
    return np.sin(angle), np.cos(angle)


def observation_slices(layout=OBSERVATION):
    """Map each observation term name to its slice of the observation vector."""
    slices, start = {}, 0
    for term in layout:
        slices[term.name] = slice(start, start + term.dim)
        start += term.dim
    return slices


def observation_scale(layout=OBSERVATION):
    """Return the per-entry observation scale ((48,) for the velocity layout)."""
    return np.concatenate([np.asarray(term.scale, dtype=np.float64) for term in layout])


def observation_metadata(layout=OBSERVATION):
    """Return the observation layout as the policy file stores it: [{name, dim, scale}]."""
    return [{'name': t.name, 'dim': t.dim, 'scale': list(t.scale)} for t in layout]


def joint_targets(action):
    """Map policy actions (..., 12) to PD joint position targets q* (..., 12) in rad."""
    return DEFAULT_JOINT_POS + ACTION_SCALE * np.asarray(action, dtype=np.float64)


def contract_metadata(provenance, command_ranges=None, layout='velocity'):
    """The policy-file contract of this robot as JSON-ready values, keyed as in metadata_props.

    provenance: {algorithm, iterations, return, code_revision, created, weights_sha256}.
    command_ranges: {vx, vy, wz: [low, high]} the policy was trained on (within COMMAND_RANGES;
    policy_node clips /cmd_vel to them); default COMMAND_RANGES. Each range is widened to hold 0,
    so that a stop (or a silent operator's zero command) is never clipped into motion.
    layout: the LAYOUTS name of the observation ('gait_clock' adds gait_period).
    """
    ranges = {key: list(value) for key, value in COMMAND_RANGES.items()}
    for key, value in (command_ranges or {}).items():
        low, high = (float(v) for v in value)
        s_low, s_high = COMMAND_RANGES[key]  # KeyError: not a command
        if not s_low <= low <= high <= s_high:
            raise ValueError(f'command range {key} [{low}, {high}] is outside [{s_low}, {s_high}]')
        ranges[key] = [min(low, 0.0), max(high, 0.0)]
    return {
        'loco_format': 1,
        'joint_names': list(JOINT_NAMES),
        'default_joint_pos': DEFAULT_JOINT_POS.tolist(),
        'action_scale': ACTION_SCALE,
        'action_bounds': {'low': ACTION_LOW.tolist(), 'high': ACTION_HIGH.tolist()},
        'kp': KP.tolist(),
        'kd': KD.tolist(),
        'torque_limit': TORQUE_LIMIT.tolist(),
        'control_dt': CONTROL_DT,
        'observation': observation_metadata(layout_named(layout)),
        'command_ranges': ranges,
        'provenance': dict(provenance),
    } | ({'gait_period': GAIT_PERIOD} if layout == 'gait_clock' else {})


assert OBS_DIM == 48 and len(set(JOINT_NAMES)) == NUM_JOINTS == 12
