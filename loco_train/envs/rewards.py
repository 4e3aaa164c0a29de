"""Reward terms of the velocity-tracking task: small named functions times configured weights.

Every term maps a RewardInputs of (N, ...) tensors to an unweighted (N,) value and is
differentiable in the simulator state except feet_air_time (kept for SAC and PPO). The per-step
reward is sum_i w_i r_i dt (legged_gym's convention, so returns do not depend on the rate).
"""

from dataclasses import dataclass, fields
import math

import torch

from loco_policy import spec


@dataclass
class RewardInputs:
    """The state a reward needs, all batched over N environments."""

    command: torch.Tensor
    """(N, 3) vx, vy (m/s), wz (rad/s)."""
    base_lin_vel: torch.Tensor
    """(N, 3) m/s, body frame."""
    base_ang_vel: torch.Tensor
    """(N, 3) rad/s, body frame."""
    torque: torch.Tensor
    """(N, 12) N m, applied joint torques."""
    joint_acc: torch.Tensor
    """(N, 12) rad/s^2, (qd_t - qd_{t-1}) / dt."""
    action: torch.Tensor
    """(N, 12) a_t."""
    last_action: torch.Tensor
    """(N, 12) a_{t-1}."""
    foot_height: torch.Tensor
    """(N, 4) m, height of the lowest point of each foot sphere above the ground."""
    undesired_contact: torch.Tensor
    """(N,) number (or smoothed number) of base/thigh/knee shapes touching the ground."""
    phase_time: torch.Tensor
    """(N,) s, time since the episode started (drives the swing reference)."""
    feet_air_time: torch.Tensor = None
    """(N,) the air-time reward of FeetAirTime.update, when that term is enabled."""
    projected_gravity: torch.Tensor = None
    """(N, 3) gravity direction in the body frame, when the orientation term is enabled."""
    foot_vel: torch.Tensor = None
    """(N, 4, 3) m/s, world-frame foot velocities, when the foot_clearance term is enabled."""
    base_height: torch.Tensor = None
    """(N,) m, base height above the ground, when the base_height term is enabled."""
    joint_pos_offset: torch.Tensor = None
    """(N, 12) rad, q - q_default, when the stand_still term is enabled."""


@dataclass
class RewardConfig:
    """Weights (0 disables a term) and shape parameters."""

    lin_vel_tracking: float = 1.0
    """exp(-|c_xy - v_xy|^2 / sigma^2)."""
    yaw_rate_tracking: float = 0.5
    """exp(-(c_wz - w_z)^2 / sigma^2)."""
    alive: float = 0.0
    """1 per step lived (the terminal step too): keeps a penalised return above a fall's 0."""
    lin_vel_error: float = 0.0
    """|c_xy - v_xy|^2: a tracking penalty whose gradient does not vanish far from the command
    (the kernel's does: exp(-4) at 1 m/s of error); for first-order methods, e.g. -1."""
    yaw_rate_error: float = 0.0
    """(c_wz - w_z)^2, the yaw counterpart of lin_vel_error."""
    lin_vel_z: float = -2.0
    """v_z^2 (m^2/s^2)."""
    ang_vel_xy: float = -0.05
    """|w_xy|^2 (rad^2/s^2)."""
    torque: float = -1e-5
    """|tau|^2 (N^2 m^2)."""
    joint_acc: float = -2.5e-7
    """|qdd|^2."""
    action_rate: float = -0.01
    """|a_t - a_{t-1}|^2."""
    orientation: float = 0.0
    """|g_xy|^2 of the projected gravity (legged_gym's flat ANYmal: -5)."""
    undesired_contact: float = -1.0
    """Count of base/thigh/knee contacts."""
    foot_height: float = 0.0
    """Differentiable swing reference tracking, mean over feet of exp(-(z - z_ref)^2 / s^2).

    Off by default: the reference's phase is time since the episode start, and the spec's 48-term
    observation has no gait clock, so a policy cannot know where in the swing it is. With
    `--observation gait_clock` it sees the clock (Schwarke et al. feed the phase to the policy);
    use it there (e.g. 0.5)."""
    foot_clearance: float = 0.0
    """sum over feet of max(0, swing_height - z)^2 tanh(2 |v_xy|) (m^2): a foot that moves
    sideways must be lifted; differentiable and clock-free (Isaac Lab's Spot uses the kernel
    form), a swing incentive for the 48-term observation; e.g. -50."""
    feet_air_time: float = 0.0
    """legged_gym's air-time reward (non-differentiable); 0.125 for SAC/PPO runs."""
    stand_still: float = 0.0
    """sum |q - q_default| (rad) while the command is below 0.1 (legged_gym's stand_still): a
    policy told to stand keeps its feet down instead of stepping in place; e.g. -1."""
    stand_feet: float = 0.0
    """sum over feet of |v_foot|^2 (m^2/s^2) while the command is below 0.1: stepping in place
    costs, a posture does not (stand_still's offsets also price the posture); e.g. -2."""
    feet_slip: float = 0.0
    """sum over feet of |v_xy|^2 exp(-max(z, 0) / slip_height) (m^2/s^2): a foot on the ground
    that slides costs, a swinging one hardly; differentiable (a smooth stance weight instead of
    a contact flag). A gait that does not lean on friction keeps walking where there is less of
    it; e.g. -1."""
    base_height: float = 0.0
    """max(0, base_height_target - h)^2 (m^2): a crouch below the target, one-sided; the slope
    towards a fall that a base contact's termination does not give a first-order method."""
    tracking_sigma: float = spec.TRACKING_SIGMA
    """sigma (m/s, rad/s) of the tracking kernels; sigma^2 = 0.25 as in legged_gym."""
    swing_height: float = 0.08
    """Peak of the swing reference above the ground (m)."""
    gait_period: float = 0.5
    """Period of the swing reference (s); diagonal pairs are half a period apart."""
    foot_height_sigma: float = 0.04
    """Width (m) of the foot-height kernel."""
    slip_height: float = 0.01
    """Foot height (m) over which feet_slip's stance weight falls by e."""
    base_height_target: float = 0.55
    """Base height (m) below which base_height penalises; ANYmal walks at 0.55-0.6 m."""


FOOT_PHASE = (0.0, math.pi, math.pi, 0.0)
"""Swing phase offsets in leg order LF, RF, LH, RH: diagonal pairs LF+RH and RF+LH."""


def lin_vel_tracking(x, cfg):
    """Planar velocity tracking kernel, (N,)."""
    error = torch.sum((x.command[:, :2] - x.base_lin_vel[:, :2]) ** 2, dim=1)
    return torch.exp(-error / cfg.tracking_sigma**2)


def yaw_rate_tracking(x, cfg):
    """Yaw-rate tracking kernel, (N,)."""
    error = (x.command[:, 2] - x.base_ang_vel[:, 2]) ** 2
    return torch.exp(-error / cfg.tracking_sigma**2)


def alive(x, cfg):
    """1 for every environment, (N,) (a terminal step earns it too: legged_gym's convention)."""
    return torch.ones_like(x.command[:, 0])


def lin_vel_error(x, cfg):
    """Squared planar velocity error (m^2/s^2), (N,)."""
    return torch.sum((x.command[:, :2] - x.base_lin_vel[:, :2]) ** 2, dim=1)


def yaw_rate_error(x, cfg):
    """Squared yaw-rate error (rad^2/s^2), (N,)."""
    return (x.command[:, 2] - x.base_ang_vel[:, 2]) ** 2


def lin_vel_z(x, cfg):
    """Vertical base velocity squared, (N,)."""
    return x.base_lin_vel[:, 2] ** 2


def ang_vel_xy(x, cfg):
    """Roll and pitch rates squared, (N,)."""
    return torch.sum(x.base_ang_vel[:, :2] ** 2, dim=1)


def torque(x, cfg):
    """Joint torques squared, (N,)."""
    return torch.sum(x.torque**2, dim=1)


def joint_acc(x, cfg):
    """Joint accelerations squared, (N,)."""
    return torch.sum(x.joint_acc**2, dim=1)


def action_rate(x, cfg):
    """Change of action squared, (N,)."""
    return torch.sum((x.action - x.last_action) ** 2, dim=1)


def orientation(x, cfg):
    """Tilt: squared planar part of the projected gravity, (N,)."""
    if x.projected_gravity is None:
        raise ValueError('orientation has a weight but RewardInputs.projected_gravity is None')
    return torch.sum(x.projected_gravity[:, :2] ** 2, dim=1)


def undesired_contact(x, cfg):
    """Base, thigh and knee contacts with the ground, (N,)."""
    return x.undesired_contact


def swing_reference(phase_time, cfg):
    """Reference foot heights (N, 4) m: half-sine swings, diagonal pairs in antiphase."""
    offsets = torch.tensor(FOOT_PHASE, dtype=phase_time.dtype, device=phase_time.device)
    angle = 2.0 * math.pi * phase_time[:, None] / cfg.gait_period + offsets
    return cfg.swing_height * torch.clamp(torch.sin(angle), min=0.0)


def foot_height(x, cfg):
    """Tracking of the swing reference, mean over feet, (N,); 0 when commanded to stand."""
    error = (x.foot_height - swing_reference(x.phase_time, cfg)) ** 2
    moving = (torch.linalg.norm(x.command, dim=1) > 0.05).to(error.dtype)
    return moving * torch.mean(torch.exp(-error / cfg.foot_height_sigma**2), dim=1)


def foot_clearance(x, cfg):
    """Low feet moving sideways, summed over feet (m^2), (N,)."""
    if x.foot_vel is None:
        raise ValueError('foot_clearance has a weight but RewardInputs.foot_vel is None')
    below = torch.clamp(cfg.swing_height - x.foot_height, min=0.0)
    speed = torch.linalg.norm(x.foot_vel[..., :2], dim=-1)
    return torch.sum(below**2 * torch.tanh(2.0 * speed), dim=1)


STAND_COMMAND = 0.1
"""|c| (m/s and rad/s together) below which the stand terms count a command as 'stand'."""


def _told_to_stand(command, dtype):
    """1 where the (N, 3) command is below STAND_COMMAND, else 0, (N,)."""
    return (torch.linalg.norm(command, dim=1) < STAND_COMMAND).to(dtype)


def stand_still(x, cfg):
    """Joint offset from the default pose while commanded to stand (rad), (N,)."""
    if x.joint_pos_offset is None:
        raise ValueError('stand_still has a weight but RewardInputs.joint_pos_offset is None')
    offset = torch.sum(torch.abs(x.joint_pos_offset), dim=1)
    return _told_to_stand(x.command, offset.dtype) * offset


def stand_feet(x, cfg):
    """Squared foot speeds while commanded to stand, summed over feet (m^2/s^2), (N,)."""
    if x.foot_vel is None:
        raise ValueError('stand_feet has a weight but RewardInputs.foot_vel is None')
    speed = torch.sum(x.foot_vel**2, dim=(1, 2))
    return _told_to_stand(x.command, speed.dtype) * speed


def feet_slip(x, cfg):
    """Squared planar speeds of the feet near the ground, summed over feet (m^2/s^2), (N,)."""
    if x.foot_vel is None:
        raise ValueError('feet_slip has a weight but RewardInputs.foot_vel is None')
    stance = torch.exp(-torch.clamp(x.foot_height, min=0.0) / cfg.slip_height)  # (N, 4)
    return torch.sum(stance * torch.sum(x.foot_vel[..., :2] ** 2, dim=-1), dim=1)


def base_height(x, cfg):
    """Squared depth of the base below its target height (m^2), (N,)."""
    if x.base_height is None:
        raise ValueError('base_height has a weight but RewardInputs.base_height is None')
    return torch.clamp(cfg.base_height_target - x.base_height, min=0.0) ** 2


def feet_air_time(x, cfg):
    """Air-time reward computed by FeetAirTime, (N,)."""
    if x.feet_air_time is None:
        raise ValueError('feet_air_time has a weight but RewardInputs.feet_air_time is None')
    return x.feet_air_time


TERMS = {
    'lin_vel_tracking': lin_vel_tracking,
    'yaw_rate_tracking': yaw_rate_tracking,
    'alive': alive,
    'lin_vel_error': lin_vel_error,
    'yaw_rate_error': yaw_rate_error,
    'lin_vel_z': lin_vel_z,
    'ang_vel_xy': ang_vel_xy,
    'torque': torque,
    'joint_acc': joint_acc,
    'action_rate': action_rate,
    'orientation': orientation,
    'undesired_contact': undesired_contact,
    'foot_height': foot_height,
    'foot_clearance': foot_clearance,
    'feet_air_time': feet_air_time,
    'base_height': base_height,
    'stand_still': stand_still,
    'stand_feet': stand_feet,
    'feet_slip': feet_slip,
}
"""Term name -> function; the names are the RewardConfig weight fields and the log keys."""

assert set(TERMS) <= {f.name for f in fields(RewardConfig)}


POSITIVE_FIELDS = (
    'tracking_sigma',
    'swing_height',
    'gait_period',
    'foot_height_sigma',
    'slip_height',
    'base_height_target',
)
"""RewardConfig shape parameters (not weights): a kernel width or period of 0 divides by 0."""


def add_override_argument(parser):
    """Add the trainers' repeatable `--reward NAME=WEIGHT` option (parsed by parse_overrides)."""
    parser.add_argument(
        '--reward',
        action='append',
        default=[],
        metavar='NAME=WEIGHT',
        help='override a RewardConfig field of the anymal env (repeatable), e.g. feet_air_time=2',
    )


def parse_overrides(items):
    """RewardConfig keyword overrides from 'name=value' strings (e.g. --reward foot_height=0).

    Raises ValueError naming an unknown field or a value that is not a finite number.
    """
    known = {f.name for f in fields(RewardConfig)}
    out = {}
    for item in items or ():
        name, sep, value = item.partition('=')
        name = name.strip()
        if not sep or name not in known:
            raise ValueError(
                f'reward override {item!r}: expected NAME=VALUE, NAME one of {sorted(known)}'
            )
        try:
            number = float(value)
        except ValueError:
            number = float('nan')
        if not math.isfinite(number):
            raise ValueError(f'reward override {item!r}: {value!r} is not a finite number')
        if name in POSITIVE_FIELDS and number <= 0.0:
            raise ValueError(f'reward override {item!r}: {name} must be positive')
        out[name] = number
    return out


def compute_reward(inputs, config, dt):
    """Return the per-step reward (N,) and each weighted term (N,) by name, times dt."""
    total = torch.zeros_like(inputs.command[:, 0])
    terms = {}
    for name, function in TERMS.items():
        weight = getattr(config, name)
        if weight == 0.0:
            continue
        terms[name] = weight * dt * function(inputs, config)
        total = total + terms[name]
    return total, terms


class FeetAirTime:
    """legged_gym's feet-air-time reward: sum over touchdowns of (air time - 0.5 s)."""

    def __init__(self, num_envs, num_feet=4, device='cpu', target_s=0.5):
        """Zero the per-foot air timers."""
        self.air_time = torch.zeros(num_envs, num_feet, device=device)  # s
        self.last_contact = torch.zeros(num_envs, num_feet, dtype=torch.bool, device=device)
        self.target_s = target_s

    def update(self, contact, command, dt):
        """Advance with foot contacts (N, 4) bool; return the reward (N,) of this step."""
        touchdown = contact & ~self.last_contact
        self.air_time += dt
        reward = torch.sum((self.air_time - self.target_s) * touchdown, dim=1)
        reward = reward * (torch.linalg.norm(command[:, :2], dim=1) > 0.1)
        self.air_time = torch.where(contact, torch.zeros_like(self.air_time), self.air_time)
        self.last_contact = contact.clone()
        return reward

    def reset(self, env_ids):
        """Clear the timers of restarted environments."""
        self.air_time[env_ids] = 0.0
        self.last_contact[env_ids] = False
