"""The fitted actuator model as the simulator's per-environment drive parameters.

An ``ActuatorParams`` (``loco_train.actuator.model``: realised / commanded gain multipliers,
armature, Coulomb friction, viscous damping per joint, one command delay) becomes kp, kd,
armature, friction, damping (N, 12) and delay (N,), robot joint order, SI units.
"""

import numpy as np

from loco_policy import spec

DRIVE_PARAMS = ('kp', 'kd', 'armature', 'friction', 'damping', 'delay')
"""The simulator parameters an actuator model sets."""


def drive_params(actuator, num_envs, kp=spec.KP, kd=spec.KD):
    """Per-env parameters of `actuator` at commanded gains kp, kd (12,): name -> numpy array."""
    n = int(num_envs)
    rows = {
        'kp': actuator.kp_scale * np.asarray(kp, dtype=np.float64),  # N m/rad
        'kd': actuator.kd_scale * np.asarray(kd, dtype=np.float64),  # N m s/rad
        'armature': actuator.armature,  # kg m^2
        'friction': actuator.friction,  # N m
        'damping': actuator.damping,  # N m s/rad
    }
    params = {name: np.tile(value, (n, 1)) for name, value in rows.items()}
    params['delay'] = np.full(n, float(actuator.delay))  # s
    return params


def apply_actuator(sim_or_params, actuator, kp=spec.KP, kd=spec.KD):
    """Set the drive parameters of a Simulator, or of a parameter dict, to `actuator`'s.

    A dict (name -> (N, ...) arrays, N read from its 'kp') is updated in place. Returns the
    parameters set.
    """
    if isinstance(sim_or_params, dict):
        params = drive_params(actuator, len(sim_or_params['kp']), kp, kd)
        sim_or_params.update(params)
        return params
    sim = sim_or_params
    if sim.spec.nu != spec.NUM_JOINTS:
        raise ValueError(f'the simulator has {sim.spec.nu} drives, the actuator model 12')
    params = drive_params(actuator, sim.num_envs, kp, kd)
    sim.set_params(**params)
    return params
