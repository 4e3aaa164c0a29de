"""Domain randomisation of the velocity task: sensor noise, mass, friction, pushes, PD gains.

With a fitted actuator model (loco_train.envs.actuator_fit) the drives' gains, armature, joint
friction, damping and delay are drawn around the fit instead of the PD gains around the spec's.
"""

from dataclasses import dataclass, fields
import math

import numpy as np
import torch

from loco_policy import spec


@dataclass
class RandomizationConfig:
    """What is randomised and by how much; `enabled=False` turns every item off."""

    enabled: bool = True
    """Master switch."""
    noise_base_lin_vel: float = 0.1
    """Uniform noise half-width on the base linear velocity (m/s) before scaling."""
    noise_base_ang_vel: float = 0.2
    """... on the base angular velocity (rad/s)."""
    noise_gravity: float = 0.05
    """... on the projected gravity (unit vector)."""
    noise_joint_pos: float = 0.01
    """... on joint positions (rad)."""
    noise_joint_vel: float = 1.5
    """... on joint velocities (rad/s)."""
    mass_offset: tuple = (-2.0, 5.0)
    """Base mass offset range (kg): payloads and model error."""
    friction: tuple = (0.4, 1.2)
    """Ground friction coefficient range."""
    kp_scale: tuple = (0.9, 1.1)
    """Multiplier range on the PD stiffness, per environment and joint."""
    kd_scale: tuple = (0.8, 1.2)
    """Multiplier range on the PD damping, per environment and joint."""
    gain_scale: tuple = (1.0, 1.0)
    """Multiplier range on kp and kd together, one per environment (all drives weaker or
    stronger at once, as sim_robot's and the evaluation's gain_scale), on top of kp_scale."""
    delay: tuple = (0.0, 0.0)
    """Command delay range (s) of the spec's PD drives, per environment (at most the
    simulator's two control steps); with a fitted actuator model the fit's delay is used."""
    push_interval_s: float = 8.0
    """Mean seconds between base-velocity kicks of an environment (0: no pushes)."""
    push_velocity: float = 0.5
    """Half-width (m/s) of the uniform planar velocity kick."""
    actuator_kp_width: float = 0.1
    """With a fitted actuator model: least relative half-width of kp around the fit (the 95 %
    interval's half-width where wider); it replaces kp_scale."""
    actuator_kd_width: float = 0.1
    """... of kd (replaces kd_scale)."""
    actuator_armature_width: float = 0.2
    """... of the armature."""
    actuator_friction_width: float = 0.2
    """... of the joint Coulomb friction."""
    actuator_damping_width: float = 0.2
    """... of the joint viscous damping."""
    actuator_delay_width: float = 0.002
    """... least half-width (s, absolute) of the command delay."""


def _uniform(generator, low, high, shape):
    """Uniform samples in [low, high) as float64 numpy (shape)."""
    u = torch.rand(shape, generator=generator, dtype=torch.float64).numpy()
    return low + (high - low) * u


def sample_params(num_envs, config, generator=None, actuator=None, max_delay=0.04):
    """Per-env simulator parameters kp, kd (N, 12), mass_offset, mu (N,) as numpy arrays.

    With config.delay's upper end above 0 also delay (N,) s.
    actuator: an ActuatorFit (actuator_fit.py) or None. With one, also armature, friction,
    damping (N, 12) and delay (N,), all drawn around the fit (its values when disabled);
    max_delay: the longest delay the simulator holds (s).
    """
    n, j = num_envs, spec.NUM_JOINTS
    if actuator is not None:
        return _sample_actuator(n, config, generator, actuator, max_delay)
    if not config.enabled:
        return {
            'kp': np.tile(spec.KP, (n, 1)),
            'kd': np.tile(spec.KD, (n, 1)),
            'mass_offset': np.zeros(n),
            'mu': np.full(n, float(np.mean(config.friction))),
        }
    params = {
        'kp': spec.KP * _uniform(generator, *config.kp_scale, (n, j)),
        'kd': spec.KD * _uniform(generator, *config.kd_scale, (n, j)),
        'mass_offset': _uniform(generator, *config.mass_offset, (n,)),
        'mu': _uniform(generator, *config.friction, (n,)),
    }
    if tuple(config.gain_scale) != (1.0, 1.0):  # drawn only when asked for, as the delay
        common = _uniform(generator, *config.gain_scale, (n, 1))
        params['kp'], params['kd'] = params['kp'] * common, params['kd'] * common
    if config.delay[1] > 0.0:  # drawn only when asked for: default runs keep their streams
        low, high = config.delay
        if high > max_delay * (1.0 + 1e-9):
            raise ValueError(f"delay range {config.delay} s beyond the drives' {max_delay} s")
        params['delay'] = _uniform(generator, low, high, (n,))
    return params


def _sample_actuator(n, config, generator, actuator, max_delay):
    """sample_params with a fitted actuator model: the drives around the fit."""
    from loco_train.envs import actuator_fit
    from loco_train.sim.actuator_params import drive_params

    if not config.enabled:  # the fit itself
        fit = actuator.params.with_values(delay=min(actuator.params.delay, max_delay))
        mu = np.full(n, float(np.mean(config.friction)))
        return drive_params(fit, n) | {'mass_offset': np.zeros(n), 'mu': mu}
    bounds = actuator_fit.ranges(actuator, config, max_delay)
    j = spec.NUM_JOINTS
    drawn = {name: _uniform(generator, *bounds[name], (n, j)) for name in actuator_fit.FIELDS}
    params = {
        'kp': spec.KP * drawn.pop('kp_scale'),  # N m/rad, as drive_params maps a fit
        'kd': spec.KD * drawn.pop('kd_scale'),
        'mass_offset': _uniform(generator, *config.mass_offset, (n,)),
        'mu': _uniform(generator, *config.friction, (n,)),
        'delay': _uniform(generator, *bounds['delay'], (n,)),
        **drawn,
    }
    if tuple(config.gain_scale) != (1.0, 1.0):  # on top of the fit's ranges, as without one
        common = _uniform(generator, *config.gain_scale, (n, 1))
        params['kp'], params['kd'] = params['kp'] * common, params['kd'] * common
    return params


RANGE_FIELDS = ('mass_offset', 'friction', 'kp_scale', 'kd_scale', 'gain_scale', 'delay')
"""RandomizationConfig fields given as LOW:HIGH ranges."""

NUMBER_FIELDS = ('push_interval_s', 'push_velocity')
"""RandomizationConfig fields given as one number."""


def add_override_argument(parser):
    """Add the trainers' repeatable `--randomize NAME=LOW:HIGH` option (parse_overrides)."""
    parser.add_argument(
        '--randomize',
        action='append',
        default=[],
        metavar='NAME=LOW:HIGH',
        help='override a randomisation range of the anymal env (repeatable): '
        f'{", ".join(RANGE_FIELDS)} as LOW:HIGH, {", ".join(NUMBER_FIELDS)} as a number, '
        'e.g. --randomize mass_offset=-2:15 --randomize delay=0:0.02',
    )


FIT_FIELDS = ('kp_scale', 'kd_scale', 'delay')
"""Ranges a fitted actuator model replaces (its widths decide them): refused beside one."""


def parse_overrides(items, actuator=False):
    """RandomizationConfig keyword overrides from 'name=value' strings; ValueError on a bad one.

    actuator: whether a fitted actuator model is in use (then FIT_FIELDS are refused).
    """
    out = {}
    for item in items or ():
        name, sep, value = (part.strip() for part in item.partition('='))
        try:
            numbers = [float(v) for v in value.split(':')]
        except ValueError:
            numbers = []
        finite = bool(numbers) and all(math.isfinite(v) for v in numbers)
        if name in RANGE_FIELDS and sep and finite and len(numbers) == 2:
            if numbers[0] > numbers[1] or (name != 'mass_offset' and numbers[0] < 0.0):
                raise ValueError(f'randomize {item!r}: needs 0 <= LOW <= HIGH')
            out[name] = (numbers[0], numbers[1])
        elif name in NUMBER_FIELDS and sep and finite and len(numbers) == 1 and numbers[0] >= 0:
            out[name] = numbers[0]
        else:
            raise ValueError(
                f'randomize {item!r}: expected NAME=LOW:HIGH with NAME one of {RANGE_FIELDS} '
                f'or NAME=NUMBER (>= 0) with NAME one of {NUMBER_FIELDS}'
            )
        if actuator and name in FIT_FIELDS:
            raise ValueError(
                f"randomize {item!r}: with --actuator the fit's widths set {name} (see the "
                'actuator_* widths); gain_scale, mass, friction and pushes still apply'
            )
    return out


assert set(RANGE_FIELDS + NUMBER_FIELDS) <= {f.name for f in fields(RandomizationConfig)}


def noise_scale(config):
    """(48,) half-width of the uniform observation noise, in scaled observation units."""
    if not config.enabled:
        return np.zeros(spec.OBS_DIM)
    raw = {
        'base_lin_vel': config.noise_base_lin_vel,
        'base_ang_vel': config.noise_base_ang_vel,
        'projected_gravity': config.noise_gravity,
        'command': 0.0,
        'joint_pos': config.noise_joint_pos,
        'joint_vel': config.noise_joint_vel,
        'last_action': 0.0,
    }
    width = np.concatenate([np.full(term.dim, raw[term.name]) for term in spec.OBSERVATION])
    return width * spec.observation_scale()


def add_observation_noise(obs, scale, generator=None):
    """Obs (N, 48) plus uniform noise of half-width scale (48,) (no gradient through the noise)."""
    if not torch.any(scale > 0):
        return obs
    u = torch.rand(obs.shape, generator=generator, dtype=obs.dtype).to(obs.device)  # CPU draw
    return obs + (2.0 * u - 1.0) * scale.to(obs.device)


def push_mask(num_envs, dt, config, generator=None):
    """(N,) bool: environments kicked this control step (Poisson with the configured rate)."""
    if not config.enabled or config.push_interval_s <= 0.0:
        return torch.zeros(num_envs, dtype=torch.bool)
    return torch.rand(num_envs, generator=generator) < dt / config.push_interval_s


def push_velocity(num_envs, config, generator=None):
    """(N, 2) planar base-velocity kicks (m/s), uniform in +-push_velocity."""
    u = torch.rand(num_envs, 2, generator=generator, dtype=torch.float64)
    return (2.0 * u - 1.0) * config.push_velocity
