"""A fitted actuator model as the training's drives: values, randomisation widths, file digest.

`loco-train shac|sac|ppo --actuator FILE.yaml` reads the YAML of `loco-train fit-actuator`
(loco_train.actuator.model's layout, values with 95 % intervals). The environment's drives are
set to the fit and each fitted parameter is randomised uniformly around it, half-width
    h = max(the 95 % interval's half-width, the configured least relative width * |value|)
(the delay: an absolute least width), clipped at 0 (and the delay at two control steps).
The file's sha256 goes into the exported policy's provenance.
"""

from dataclasses import dataclass
import os

import numpy as np

from loco_policy import spec
from loco_policy.policy_file import file_sha256
from loco_train.actuator import model as actuator_model

FIELDS = ('kp_scale', 'kd_scale', 'armature', 'friction', 'damping')
"""Per-joint fitted parameters of ActuatorParams; then 'delay'."""

YAML_KEYS = {'kp_scale': 'kp', 'kd_scale': 'kd'}
"""The YAML's name of a field where it differs (gains in SI, not as scales)."""


@dataclass
class ActuatorFit:
    """One fitted actuator model: values, 95 % half-widths, where it came from."""

    params: actuator_model.ActuatorParams
    """The fitted values (gains as scales on the commanded ones)."""
    half_width: dict
    """Field -> (12,) half-width of its 95 % interval in the field's units (gains as scales;
    0 where the file gives none); 'delay' -> float (s)."""
    path: str
    """The YAML file."""
    sha256: str
    """Hex sha256 of the file's bytes."""

    def provenance(self):
        """The exported policy's provenance keys naming this fit."""
        return {'actuator_file': os.path.basename(self.path), 'actuator_sha256': self.sha256}


def _half(entry):
    """Half-width of an entry's 'interval' [low, high] (its units); 0 without one."""
    if not isinstance(entry, dict) or 'interval' not in entry:
        return 0.0
    low, high = (float(x) for x in entry['interval'])
    if not (np.isfinite(low) and np.isfinite(high) and high >= low):
        raise ValueError(f'interval {entry["interval"]} is not [low, high]')
    return 0.5 * (high - low)


def read_fit(path):
    """Read an actuator YAML with its intervals; ValueError naming what is wrong."""
    from ruamel.yaml import YAML

    params = actuator_model.read(path)  # checks joints, values, ranges
    with open(path) as stream:
        data = YAML(typ='safe').load(stream)
    commanded = {'kp': spec.KP, 'kd': spec.KD}
    half = {name: np.zeros(spec.NUM_JOINTS) for name in FIELDS}
    for j, joint in enumerate(spec.JOINT_NAMES):
        entry = data['joints'][joint]
        for name in FIELDS:
            key = YAML_KEYS.get(name, name)
            try:
                width = _half(entry[key])
            except ValueError as error:
                raise ValueError(f'actuator file {path}: {joint}.{key}: {error}') from None
            if key in commanded:  # SI in the file, a scale on the commanded gain here
                gain = entry.get(f'{key}_commanded', commanded[key][j])
                width /= float(gain['value'] if isinstance(gain, dict) else gain)
            half[name][j] = width
    try:
        half['delay'] = _half(data.get('delay'))
    except ValueError as error:
        raise ValueError(f'actuator file {path}: delay: {error}') from None
    return ActuatorFit(params, half, os.path.abspath(path), file_sha256(path))


def ranges(fit, config, max_delay):
    """Name -> (low, high) of the randomisation around fit: (12,) arrays, delay floats.

    config: a RandomizationConfig (least widths: actuator_kp_width and the others); max_delay:
    the longest delay the simulator holds (s).
    """
    least = {
        'kp_scale': config.actuator_kp_width,
        'kd_scale': config.actuator_kd_width,
        'armature': config.actuator_armature_width,
        'friction': config.actuator_friction_width,
        'damping': config.actuator_damping_width,
    }
    out = {}
    for name in FIELDS:
        value = getattr(fit.params, name)
        h = np.maximum(fit.half_width[name], least[name] * np.abs(value))
        out[name] = (np.maximum(value - h, 0.0), value + h)
    d = fit.params.delay
    h = max(fit.half_width['delay'], config.actuator_delay_width)
    out['delay'] = (max(d - h, 0.0), min(d + h, max_delay))
    return out


def add_actuator_argument(parser):
    """Add the trainers' `--actuator FILE.yaml` option."""
    parser.add_argument(
        '--actuator',
        default='',
        metavar='FILE.yaml',
        help='train on this fitted actuator model (loco-train fit-actuator): drives set to the '
        'fit, its parameters randomised around it, the file sha256 in the policy provenance',
    )
