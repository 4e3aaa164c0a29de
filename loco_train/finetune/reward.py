"""The task reward on the robot: the training terms the robot measures, weighted as in training.

Training's per-step reward is sum_i w_i r_i dt over loco_train.envs.rewards' named terms. The
robot streams the raw terms of loco_policy.transition.REWARD_TERMS; each is the same quantity as
one RewardConfig term (ROBOT_TERMS). Three more training terms follow exactly from them
(DERIVED_TERMS); the rest cannot be measured on the robot (UNMEASURED_TERMS) and are left out,
so the robot reward equals the training reward restricted to the measurable terms.

This module imports numpy only; weights_from_overrides alone reads RewardConfig's defaults from
the training module (torch), which the fine-tuning node has anyway.
"""

from dataclasses import dataclass, field

import numpy as np

from loco_policy import spec
from loco_policy.transition import REWARD_TERMS

ROBOT_TERMS = {
    'track_lin_vel_xy': 'lin_vel_tracking',  # exp(-|c_xy - v_xy|^2 / sigma^2), body frame
    'track_ang_vel_z': 'yaw_rate_tracking',  # exp(-(c_wz - w_z)^2 / sigma^2)
    'lin_vel_z': 'lin_vel_z',  # v_z^2 (m^2/s^2)
    'ang_vel_xy': 'ang_vel_xy',  # |w_xy|^2 (rad^2/s^2)
    'orientation': 'orientation',  # |g_xy|^2 of the projected gravity
    'torques': 'torque',  # |tau|^2 (N^2 m^2): measured efforts; training's clamped PD torques
    'action_rate': 'action_rate',  # |a_t - a_{t-1}|^2
}
"""Robot term (REWARD_TERMS order) -> the RewardConfig weight field of the same quantity."""

DERIVED_TERMS = {
    'alive': '1 per transition, the terminal one too',
    'lin_vel_error': 'sigma^2 * -ln(track_lin_vel_xy), the squared planar velocity error',
    'yaw_rate_error': 'sigma^2 * -ln(track_ang_vel_z), the squared yaw-rate error',
}
"""Training terms computed from the robot's terms: name -> how."""

UNMEASURED_TERMS = {
    'joint_acc': 'joint accelerations are not streamed (a 50 Hz difference of velocities)',
    'undesired_contact': 'base, thigh and knee contacts: the robot has no sensor for them',
    'foot_height': 'needs each foot height above the terrain and the swing phase',
    'foot_clearance': 'needs foot heights above the terrain and foot velocities',
    'feet_air_time': 'needs per-foot touchdown events: foot contacts are not streamed',
    'base_height': 'needs the base height above the terrain: odometry drifts and sees no terrain',
    'stand_still': 'needs the joint offsets of the observation, which the streamed terms lack',
    'stand_feet': 'needs foot velocities: the robot streams none',
    'feet_slip': 'needs foot velocities and heights: the robot streams neither',
}
"""Training terms left out of the robot reward: name -> why the robot cannot measure them."""

MIN_KERNEL = 1e-30
"""Floor of a tracking kernel before its log (caps a derived squared error at 69 sigma^2)."""


@dataclass(frozen=True)
class RobotWeights:
    """What robot_reward needs: per-term weights times dt and the kernel width change."""

    terms: np.ndarray
    """(7,) w_i * dt of REWARD_TERMS, in that order."""
    alive: float = 0.0
    """w_alive * dt."""
    lin_vel_error: float = 0.0
    """w * dt of the squared planar velocity error."""
    yaw_rate_error: float = 0.0
    """w * dt of the squared yaw-rate error."""
    tracking_sigma: float = spec.TRACKING_SIGMA
    """Training's kernel width (m/s, rad/s); the robot's kernels use spec.TRACKING_SIGMA."""
    ignored: dict = field(default_factory=dict)
    """Unmeasured training terms with a non-zero weight: name -> weight (for the log)."""


def robot_weights(config, dt=spec.CONTROL_DT):
    """RobotWeights from a RewardConfig (or any object with its field names), dt in s."""
    if not dt > 0.0:
        raise ValueError(f'reward dt must be positive, got {dt}')
    names = (*ROBOT_TERMS.values(), *DERIVED_TERMS)
    missing = [name for name in names if not hasattr(config, name)]
    if missing:
        raise ValueError(f'reward config lacks the weight fields {missing}')
    sigma = float(getattr(config, 'tracking_sigma', spec.TRACKING_SIGMA))
    if not sigma > 0.0:
        raise ValueError(f'tracking_sigma must be positive, got {sigma}')
    weight = {name: float(getattr(config, name)) for name in names}
    if not all(np.isfinite(list(weight.values()))):
        raise ValueError(f'reward weights must be finite, got {weight}')
    return RobotWeights(
        terms=np.array([weight[ROBOT_TERMS[name]] * dt for name in REWARD_TERMS]),
        alive=weight['alive'] * dt,
        lin_vel_error=weight['lin_vel_error'] * dt,
        yaw_rate_error=weight['yaw_rate_error'] * dt,
        tracking_sigma=sigma,
        ignored={
            name: float(getattr(config, name))
            for name in UNMEASURED_TERMS
            if float(getattr(config, name, 0.0)) != 0.0
        },
    )


def weights_from_overrides(overrides=None, dt=spec.CONTROL_DT):
    """RobotWeights of RewardConfig's defaults plus overrides: a dict or 'NAME=VALUE' strings."""
    from loco_train.envs.rewards import parse_overrides, RewardConfig  # torch: the node's side

    if isinstance(overrides, dict):
        overrides = [f'{name}={value}' for name, value in overrides.items()]
    return robot_weights(RewardConfig(**parse_overrides(overrides)), dt)


def robot_reward(reward_terms, weights):
    """Per-transition reward (B,) of raw robot terms (B, 7): sum_i w_i r_i dt as in training."""
    terms = np.asarray(reward_terms, dtype=np.float64)
    if terms.ndim != 2 or terms.shape[1] != len(REWARD_TERMS):
        raise ValueError(f'reward terms need shape (B, {len(REWARD_TERMS)}), got {terms.shape}')
    kernels = np.clip(terms[:, :2], MIN_KERNEL, 1.0)  # (B, 2) planar and yaw tracking
    error = -(spec.TRACKING_SIGMA**2) * np.log(kernels)  # (B, 2) squared errors
    if weights.tracking_sigma != spec.TRACKING_SIGMA:  # the kernels training used
        terms = terms.copy()
        terms[:, :2] = np.exp(-error / weights.tracking_sigma**2)
    total = terms @ weights.terms + weights.alive
    total += weights.lin_vel_error * error[:, 0] + weights.yaw_rate_error * error[:, 1]
    return total.astype(np.float32)
