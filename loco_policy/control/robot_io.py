"""Robot input validation (ROS-free): joint states by name, IMU, odometry, velocity command.

Each check takes plain sequences (what the ROS messages hold) and returns arrays in robot order
or raises InputError with a message fit for a log line and the status topic. ``InputError.fault``
says whether the problem is a fault (non-finite or out-of-range values: DAMP) or only a rejected
message (wrong structure: dropped, and the watchdog acts if no good message follows).
"""

from dataclasses import dataclass

import numpy as np

from loco_policy import spec


@dataclass(frozen=True)
class InputLimits:
    """Plausibility bounds of the robot inputs; beyond them an input is a fault."""

    joint_pos_margin: float = 0.3
    """Allowed excursion (rad) beyond the description's hard joint range."""
    joint_vel: float = 40.0
    """Largest |qd| (rad/s)."""
    joint_effort: float = 500.0
    """Largest |tau| (N m) a joint may report (drives saturate near 80 N m)."""
    base_lin_vel: float = 10.0
    """Largest |v| component (m/s), body frame."""
    base_ang_vel: float = 20.0
    """Largest |omega| component (rad/s), body frame."""
    quat_norm_tol: float = 0.1
    """Allowed deviation of the IMU quaternion's norm from 1."""


class InputError(ValueError):
    """A rejected input message; fault=True when the values themselves are unsafe."""

    def __init__(self, message, fault=False):
        """Store the message and whether it is a fault."""
        super().__init__(message)
        self.fault = fault


class JointMatcher:
    """Map JointState arrays given in any order onto the robot's joint order, by name."""

    def __init__(self, joint_names=spec.JOINT_NAMES):
        """Remember the robot's joint order."""
        self.joint_names = tuple(joint_names)
        self._cache_key = None
        self._index = None  # (12,) int: message index of each robot joint

    def order(self, names):
        """Return the (12,) message indices of the robot joints; raise InputError."""
        key = tuple(names)
        if key == self._cache_key:
            return self._index
        unknown = sorted(set(key) - set(self.joint_names))
        missing = [n for n in self.joint_names if n not in key]
        duplicate = sorted({n for n in key if key.count(n) > 1})
        if unknown or missing or duplicate:
            parts = []
            if missing:
                parts.append(f'missing {missing}')
            if unknown:
                parts.append(f'unknown {unknown}')
            if duplicate:
                parts.append(f'duplicated {duplicate}')
            raise InputError('/joint_states joint names rejected: ' + ', '.join(parts))
        self._cache_key = key
        self._index = np.array([key.index(n) for n in self.joint_names])
        return self._index

    def match(self, names, position, velocity, effort=()):
        """Return (q, qd, tau) (12,) each in robot order; raise InputError on bad arrays."""
        index = self.order(names)
        n = len(names)
        if len(position) != n or len(velocity) != n or len(effort) not in (0, n):
            raise InputError(
                f'/joint_states array lengths rejected: {n} names, {len(position)} positions, '
                f'{len(velocity)} velocities, {len(effort)} efforts (need equal, effort may be 0)'
            )
        q = np.asarray(position, dtype=np.float64)[index]
        qd = np.asarray(velocity, dtype=np.float64)[index]
        tau = np.asarray(effort, dtype=np.float64)[index] if len(effort) else np.zeros(len(index))
        return q, qd, tau


def check_finite(topic, **arrays):
    """Raise a fault InputError naming the first field with a non-finite entry."""
    for name, value in arrays.items():
        if not np.isfinite(value).all():
            raise InputError(
                f'{topic} rejected: non-finite {name} {np.asarray(value).tolist()}', True
            )


def check_joints(q, qd, tau, limits=InputLimits()):
    """Fault when joint values are non-finite or out of range."""
    check_finite('/joint_states', position=q, velocity=qd, effort=tau)
    margin = limits.joint_pos_margin
    if (q < spec.JOINT_POS_LIMITS[:, 0] - margin).any() or (
        q > spec.JOINT_POS_LIMITS[:, 1] + margin
    ).any():
        low = spec.JOINT_POS_LIMITS[:, 0] - margin
        high = spec.JOINT_POS_LIMITS[:, 1] + margin
        names = [spec.JOINT_NAMES[i] for i in np.flatnonzero((q < low) | (q > high))]
        raise InputError(f'/joint_states rejected: position of {names} out of range', True)
    if np.abs(tau).max() > limits.joint_effort:
        raise InputError(
            f'/joint_states rejected: |effort| {np.max(np.abs(tau)):.3g} N m > '
            f'{limits.joint_effort} N m',
            True,
        )
    if np.abs(qd).max() > limits.joint_vel:
        raise InputError(
            f'/joint_states rejected: |velocity| {np.max(np.abs(qd)):.3g} rad/s > '
            f'{limits.joint_vel} rad/s',
            True,
        )


def check_imu(quat_xyzw, ang_vel, limits=InputLimits()):
    """Return (quat w-x-y-z normalised (4,), body angular velocity (3,)); fault on bad values."""
    quat = np.asarray(quat_xyzw, dtype=np.float64)
    ang_vel = np.asarray(ang_vel, dtype=np.float64)
    check_finite('/imu', orientation=quat, angular_velocity=ang_vel)
    norm = float(np.linalg.norm(quat))
    if abs(norm - 1.0) > limits.quat_norm_tol:
        raise InputError(f'/imu rejected: orientation quaternion norm {norm:.3g} is not 1', True)
    if np.abs(ang_vel).max() > limits.base_ang_vel:
        raise InputError(
            f'/imu rejected: |angular velocity| {np.max(np.abs(ang_vel)):.3g} rad/s > '
            f'{limits.base_ang_vel} rad/s',
            True,
        )
    x, y, z, w = quat / norm
    return np.array([w, x, y, z]), ang_vel


def check_odom(lin_vel, limits=InputLimits()):
    """Return the body-frame base linear velocity (3,); fault on bad values."""
    lin_vel = np.asarray(lin_vel, dtype=np.float64)
    check_finite('/odom', twist_linear=lin_vel)
    if np.abs(lin_vel).max() > limits.base_lin_vel:
        raise InputError(
            f'/odom rejected: |linear velocity| {np.max(np.abs(lin_vel)):.3g} m/s > '
            f'{limits.base_lin_vel} m/s',
            True,
        )
    return lin_vel


def clip_command(vx, vy, wz, ranges=spec.COMMAND_RANGES):
    """Clip a velocity command to the ranges; return ((3,) command, clipped?) or raise InputError.

    A non-finite command is rejected (not a fault: the previous command stays in force).
    """
    raw = np.array([vx, vy, wz], dtype=np.float64)
    if not np.all(np.isfinite(raw)):
        raise InputError(f'/cmd_vel rejected: non-finite command {raw.tolist()}')
    low = np.array([ranges[k][0] for k in ('vx', 'vy', 'wz')])
    high = np.array([ranges[k][1] for k in ('vx', 'vy', 'wz')])
    command = np.clip(raw, low, high)
    return command, bool(np.any(command != raw))


def roll_pitch(quat_wxyz):
    """Return (roll, pitch) in rad of a base quaternion w-x-y-z."""
    w, x, y, z = quat_wxyz
    roll = np.arctan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y))
    pitch = np.arcsin(np.clip(2.0 * (w * y - z * x), -1.0, 1.0))
    return float(roll), float(pitch)
