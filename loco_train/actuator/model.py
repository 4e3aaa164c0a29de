"""The actuator parameters of the 12 drives (one model for every simulator) and their YAML file.

Per joint: the effective gains the drive realises, as multipliers on the commanded ones
(realised kp = kp_scale * commanded kp, likewise kd), reflected armature (kg m^2, MuJoCo
``dof_armature``), Coulomb friction (N m, ``dof_frictionloss``) and viscous damping
(N m s/rad, ``dof_damping``); one command delay (s) shared by all drives.

The YAML (written by ``loco-train fit-actuator``) gives the gains in SI, as realised at the
commanded gains of the identification run, next to those commanded gains:

    robot: anymal_c
    delay: {value: 0.0113, interval: [0.0112, 0.0114]}   # s, 95 % interval
    joints:
      LF_HAA: {kp: {value: 84.1, interval: [..]}, kd: .., armature: .., friction: .., damping: ..,
               kp_commanded: 80.0, kd_commanded: 2.0}
    ...

Every value may also be a bare number. Reading checks that all 12 joints are present, by name.
"""

from dataclasses import dataclass, field
import os

import numpy as np

from loco_policy import spec

JOINT_FIELDS = ('kp', 'kd', 'armature', 'friction', 'damping')
"""Per-joint entries of the YAML (SI units)."""

NOMINAL_FRICTION = 0.1
"""Coulomb friction (N m) of the robot description's joints."""

NOMINAL_DAMPING = 1.0
"""Viscous damping (N m s/rad) of the robot description's joints."""

MAX_DELAY = 0.04
"""Largest command delay (s) the MuJoCo model holds history for."""


def _joint_array(value):
    """A (12,) float array from a scalar or a 12-vector."""
    array = np.broadcast_to(np.asarray(value, dtype=np.float64), (spec.NUM_JOINTS,)).copy()
    return array


@dataclass
class ActuatorParams:
    """The actuator model's parameters, robot joint order, SI units."""

    kp_scale: np.ndarray = field(default_factory=lambda: np.ones(spec.NUM_JOINTS))
    """(12,) realised kp / commanded kp."""
    kd_scale: np.ndarray = field(default_factory=lambda: np.ones(spec.NUM_JOINTS))
    """(12,) realised kd / commanded kd."""
    armature: np.ndarray = field(default_factory=lambda: np.zeros(spec.NUM_JOINTS))
    """(12,) reflected rotor inertia (kg m^2)."""
    friction: np.ndarray = field(default_factory=lambda: np.full(spec.NUM_JOINTS, 0.1))
    """(12,) Coulomb friction (N m)."""
    damping: np.ndarray = field(default_factory=lambda: np.full(spec.NUM_JOINTS, 1.0))
    """(12,) viscous damping (N m s/rad)."""
    delay: float = 0.0
    """Command delay (s), any value in [0, MAX_DELAY] (not a multiple of the physics step)."""

    def __post_init__(self):
        """Broadcast to (12,) arrays and check the ranges."""
        for name in ('kp_scale', 'kd_scale', 'armature', 'friction', 'damping'):
            setattr(self, name, _joint_array(getattr(self, name)))
        self.delay = float(self.delay)
        self.check()

    def check(self):
        """Raise ValueError naming a parameter that is not finite or out of its range."""
        for name in ('kp_scale', 'kd_scale', 'armature', 'friction', 'damping'):
            value = getattr(self, name)
            if not np.all(np.isfinite(value)) or np.any(value < 0):
                raise ValueError(f'actuator parameter {name} must be finite and >= 0: {value}')
        if not 0.0 <= self.delay <= MAX_DELAY:
            raise ValueError(f'actuator delay {self.delay} s outside [0, {MAX_DELAY}] s')

    def with_values(self, **changes):
        """A copy with some fields replaced."""
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values.update(changes)
        return ActuatorParams(**values)


def _value(entry, where):
    """The number of a YAML entry (bare number or {value: ...})."""
    if isinstance(entry, dict):
        if 'value' not in entry:
            raise ValueError(f'actuator file: {where} has no value')
        entry = entry['value']
    try:
        return float(entry)
    except (TypeError, ValueError):
        raise ValueError(f'actuator file: {where} is not a number: {entry!r}') from None


def read(path):
    """Read an actuator YAML into ActuatorParams; raise ValueError naming what is wrong."""
    from ruamel.yaml import YAML

    if not os.path.isfile(path):
        raise ValueError(f'actuator file {path} does not exist')
    with open(path) as stream:
        data = YAML(typ='safe').load(stream)
    if not isinstance(data, dict) or not isinstance(data.get('joints'), dict):
        raise ValueError(f'actuator file {path}: no joints mapping')
    joints = data['joints']
    missing = [n for n in spec.JOINT_NAMES if n not in joints]
    extra = [n for n in joints if n not in spec.JOINT_NAMES]
    if missing or extra:
        raise ValueError(f'actuator file {path}: joints missing {missing}, unknown {extra}')
    values = {name: np.zeros(spec.NUM_JOINTS) for name in JOINT_FIELDS}
    commanded = {'kp': spec.KP.copy(), 'kd': spec.KD.copy()}
    for j, name in enumerate(spec.JOINT_NAMES):
        entry = joints[name]
        for key in JOINT_FIELDS:
            if key not in entry:
                raise ValueError(f'actuator file {path}: joint {name} has no {key}')
            values[key][j] = _value(entry[key], f'{name}.{key}')
        for key in ('kp', 'kd'):
            if f'{key}_commanded' in entry:
                commanded[key][j] = _value(entry[f'{key}_commanded'], f'{name}.{key}_commanded')
    if np.any(commanded['kp'] <= 0) or np.any(commanded['kd'] <= 0):
        raise ValueError(f'actuator file {path}: commanded gains must be > 0')
    return ActuatorParams(
        kp_scale=values['kp'] / commanded['kp'],
        kd_scale=values['kd'] / commanded['kd'],
        armature=values['armature'],
        friction=values['friction'],
        damping=values['damping'],
        delay=_value(data.get('delay', 0.0), 'delay'),
    )


def to_document(params, commanded_kp, commanded_kd, intervals=None):
    """The YAML mapping of params (gains in SI at the commanded gains (12,)), with intervals.

    intervals: optional {field: (12, 2) array, 'delay': (2,)} of 95 % intervals.
    """
    intervals = intervals or {}
    realised = {
        'kp': params.kp_scale * commanded_kp,
        'kd': params.kd_scale * commanded_kd,
        'armature': params.armature,
        'friction': params.friction,
        'damping': params.damping,
    }

    def entry(value, interval):
        if interval is None:
            return float(value)
        return {'value': float(value), 'interval': [float(interval[0]), float(interval[1])]}

    joints = {}
    for j, name in enumerate(spec.JOINT_NAMES):
        row = {}
        for key in JOINT_FIELDS:
            bounds = intervals.get(key)
            row[key] = entry(realised[key][j], None if bounds is None else bounds[j])
        row['kp_commanded'] = float(commanded_kp[j])
        row['kd_commanded'] = float(commanded_kd[j])
        joints[name] = row
    return {'joints': joints, 'delay': entry(params.delay, intervals.get('delay'))}
