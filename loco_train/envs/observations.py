"""Batched, differentiable torch version of the spec's 48-entry observation."""

import torch

from loco_policy import spec


def quat_rotate_inverse(quat, vec):
    """Rotate world vectors (N, 3) into the body frame of quaternions (N, 4) w-x-y-z."""
    w, u = quat[..., :1], quat[..., 1:]
    # R^T v = v (2 w^2 - 1) - 2 w (u x v) + 2 u (u . v)
    return (
        vec * (2.0 * w * w - 1.0)
        - 2.0 * w * torch.cross(u, vec, dim=-1)
        + 2.0 * u * torch.sum(u * vec, dim=-1, keepdim=True)
    )


def projected_gravity(quat):
    """Unit gravity direction (N, 3) in the body frame of base quaternions (N, 4) w-x-y-z."""
    down = torch.zeros_like(quat[..., 1:])
    down[..., 2] = -1.0
    return quat_rotate_inverse(quat, down)


def build_observation(
    base_quat, base_lin_vel, base_ang_vel, joint_pos, joint_vel, command, last_action
):
    """Assemble the scaled observation (N, 48), differentiable in every input.

    Same inputs and order as loco_policy.observation.build_observation: base_quat (N, 4)
    w-x-y-z; base_lin_vel, base_ang_vel (N, 3) body frame; joint_pos, joint_vel (N, 12);
    command (N, 3) vx, vy, wz; last_action (N, 12).
    """
    default = torch.as_tensor(
        spec.DEFAULT_JOINT_POS, dtype=joint_pos.dtype, device=joint_pos.device
    )
    parts = {
        'base_lin_vel': base_lin_vel,
        'base_ang_vel': base_ang_vel,
        'projected_gravity': projected_gravity(base_quat),
        'command': command,
        'joint_pos': joint_pos - default,
        'joint_vel': joint_vel,
        'last_action': last_action,
    }
    obs = torch.cat([parts[term.name] for term in spec.OBSERVATION], dim=-1)
    scale = torch.as_tensor(spec.observation_scale(), dtype=obs.dtype, device=obs.device)
    return obs * scale
