"""The /joint_command contract (ROS-free): PD targets and gains in a sensor_msgs/JointState.

Layout of one message (all arrays 24 long, entries matched by name, any order):

    header.frame_id          control mode of the sender: PASSIVE, STAND, WALK or DAMP
    name[j]  = '<joint>'     position = q* (rad), velocity = qd* (rad/s), effort = tau_ff (N m)
    name[j]  = '<joint>/gains'  position = kp (N m/rad), velocity = kd (N m s/rad),
                             effort = torque limit (N m)

for each of the 12 robot joints. The robot applies, at its own rate,
tau = clip(kp (q* - q) + kd (qd* - qd) + tau_ff, -limit, limit). Every number is finite.
"""

from dataclasses import dataclass

import numpy as np

from loco_policy import spec

GAINS_SUFFIX = '/gains'
"""Suffix of the pseudo-joint names that carry each joint's gains."""


@dataclass
class JointCommand:
    """PD targets and gains for the 12 joints, robot order."""

    position: np.ndarray
    """q* (12,) rad."""
    velocity: np.ndarray
    """qd* (12,) rad/s."""
    effort: np.ndarray
    """tau_ff (12,) N m."""
    kp: np.ndarray
    """(12,) N m/rad."""
    kd: np.ndarray
    """(12,) N m s/rad."""
    torque_limit: np.ndarray
    """(12,) N m."""
    mode: str = ''
    """Sender's control mode."""

    def is_finite(self):
        """True when every number is finite."""
        return all(
            np.isfinite(a).all()
            for a in (
                self.position,
                self.velocity,
                self.effort,
                self.kp,
                self.kd,
                self.torque_limit,
            )
        )


def damping(position, kd, mode='DAMP'):
    """A damping-only command: kp 0, kd > 0, targets at the given pose, zero velocity."""
    zeros = np.zeros(spec.NUM_JOINTS)
    return JointCommand(
        np.asarray(position, dtype=np.float64).copy(),
        zeros.copy(),
        zeros.copy(),
        zeros.copy(),
        np.broadcast_to(np.asarray(kd, dtype=np.float64), (spec.NUM_JOINTS,)).copy(),
        spec.TORQUE_LIMIT.copy(),
        mode,
    )


NAMES = tuple(spec.JOINT_NAMES) + tuple(n + GAINS_SUFFIX for n in spec.JOINT_NAMES)
"""The 24 JointState names of a command: the joints (targets), then their gains entries."""


def pack_arrays(command):
    """Return (names (24,), position, velocity, effort (24,) arrays) of the command's message."""
    if not command.is_finite():
        raise ValueError('refusing to pack a joint command with non-finite numbers')
    position = np.concatenate([command.position, command.kp])
    velocity = np.concatenate([command.velocity, command.kd])
    effort = np.concatenate([command.effort, command.torque_limit])
    return NAMES, position, velocity, effort


def pack(command):
    """Return (names, position, velocity, effort) lists of a JointState for the command."""
    names, position, velocity, effort = pack_arrays(command)
    return list(names), position.tolist(), velocity.tolist(), effort.tolist()


def unpack(names, position, velocity, effort, mode=''):
    """Parse JointState arrays into a JointCommand; raise ValueError naming what is wrong."""
    names = list(names)
    if not len(names) == len(position) == len(velocity) == len(effort):
        raise ValueError(
            f'/joint_command array lengths differ: {len(names)} names, {len(position)} '
            f'positions, {len(velocity)} velocities, {len(effort)} efforts'
        )
    index = {n: i for i, n in enumerate(names)}
    wanted = list(spec.JOINT_NAMES) + [n + GAINS_SUFFIX for n in spec.JOINT_NAMES]
    missing = [n for n in wanted if n not in index]
    if missing or len(index) != len(names):
        raise ValueError(f'/joint_command names rejected: missing {missing} or duplicated names')
    order = np.array([index[n] for n in wanted])
    pos = np.asarray(position, dtype=np.float64)[order]
    vel = np.asarray(velocity, dtype=np.float64)[order]
    eff = np.asarray(effort, dtype=np.float64)[order]
    n = spec.NUM_JOINTS
    command = JointCommand(pos[:n], vel[:n], eff[:n], pos[n:], vel[n:], eff[n:], mode)
    if not command.is_finite():
        raise ValueError('/joint_command rejected: non-finite numbers')
    if np.any(command.kp < 0) or np.any(command.kd < 0) or np.any(command.torque_limit < 0):
        raise ValueError('/joint_command rejected: negative gains or torque limits')
    return command


def pd_torque(command, q, qd, gain_scale=1.0):
    """Torque (12,) N m of the PD actuator for joint state q, qd (12,) under a command."""
    tau = gain_scale * (command.kp * (command.position - q) + command.kd * (command.velocity - qd))
    tau = tau + command.effort
    limit = np.minimum(command.torque_limit, spec.TORQUE_LIMIT)
    return np.clip(tau, -limit, limit)
