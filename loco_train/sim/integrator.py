"""Moreau time stepping: position half steps and the free velocity update."""

from types import SimpleNamespace

import warp as wp

from loco_train.sim.model import FREE, HINGE


def build(sp, module):
    """Kernels for one scalar type `sp`."""
    Float, Vec3, Quat = sp.Float, sp.Vec3, sp.Quat

    @wp.kernel(module=module)
    def integrate_positions(
        qpos: wp.array2d(dtype=Float),  # (N, nq)
        qvel: wp.array2d(dtype=Float),  # (N, nv)
        h: Float,  # duration of this position step (s): dt/2 in the Moreau scheme
        md: sp.ModelData,
        qpos_out: wp.array2d(dtype=Float),  # (N, nq)
    ):
        """Q + h qd on the manifold: base quaternion rotated by the body-frame rate, normalised."""
        e = wp.tid()
        for b in range(1, md.nbody):
            a = md.body_qadr[b]
            d = md.body_dadr[b]
            if md.body_jtype[b] == FREE:
                for k in range(3):
                    qpos_out[e, a + k] = qpos[e, a + k] + h * qvel[e, d + k]
                quat = Quat(qpos[e, a + 4], qpos[e, a + 5], qpos[e, a + 6], qpos[e, a + 3])
                half = Vec3(qvel[e, d + 3], qvel[e, d + 4], qvel[e, d + 5]) * (h * Float(0.5))
                quat = wp.normalize(quat * sp.quat_exp(half))
                qpos_out[e, a + 3] = quat[3]
                qpos_out[e, a + 4] = quat[0]
                qpos_out[e, a + 5] = quat[1]
                qpos_out[e, a + 6] = quat[2]
            if md.body_jtype[b] == HINGE:
                qpos_out[e, a] = qpos[e, a] + h * qvel[e, d]

    @wp.kernel(module=module)
    def free_velocity(
        qvel: wp.array2d(dtype=Float),  # (N, nv)
        qacc: wp.array2d(dtype=Float),  # (N, nv) H^-1 f at the midpoint
        h: Float,  # time step (s)
        qvel_out: wp.array2d(dtype=Float),  # (N, nv) velocity before contact impulses
    ):
        """Contact-free velocity update v + h H^-1 f."""
        e, i = wp.tid()
        qvel_out[e, i] = qvel[e, i] + h * qacc[e, i]

    @wp.kernel(module=module, enable_backward=False)
    def state_invalid(
        qpos: wp.array2d(dtype=Float),  # (N, nq)
        qvel: wp.array2d(dtype=Float),  # (N, nv)
        limit: Float,  # largest plausible |qpos|, |qvel| entry
        invalid: wp.array(dtype=wp.int32),  # (N,) 1 where the state is non-finite or implausible
    ):
        """Flag environments whose state has NaN, inf or entries beyond `limit`."""
        e, i = wp.tid()
        if i < qpos.shape[1]:
            x = qpos[e, i]
            if not wp.isfinite(x) or wp.abs(x) > limit:
                invalid[e] = 1
        if i < qvel.shape[1]:
            x = qvel[e, i]
            if not wp.isfinite(x) or wp.abs(x) > limit:
                invalid[e] = 1

    return SimpleNamespace(
        integrate_positions=integrate_positions,
        free_velocity=free_velocity,
        state_invalid=state_invalid,
    )
