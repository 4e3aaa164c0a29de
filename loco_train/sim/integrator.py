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

    @wp.kernel(module=module, enable_backward=False)
    def integrate_adjoint(
        qpos: wp.array2d(dtype=Float),  # (N, nq) forward values
        qvel: wp.array2d(dtype=Float),  # (N, nv)
        h: Float,  # duration of the position step (s)
        md: sp.ModelData,
        qpos_out_grad: wp.array2d(dtype=Float),  # (N, nq)
        qpos_grad: wp.array2d(dtype=Float),  # (N, nq) accumulated
        qvel_grad: wp.array2d(dtype=Float),  # (N, nv) accumulated
    ):
        """Reverse of integrate_positions (normalised quaternion product, exp map)."""
        e = wp.tid()
        for b in range(1, md.nbody):
            a = md.body_qadr[b]
            d = md.body_dadr[b]
            if md.body_jtype[b] == FREE:
                for k in range(3):
                    g = qpos_out_grad[e, a + k]
                    qpos_grad[e, a + k] = qpos_grad[e, a + k] + g
                    qvel_grad[e, d + k] = qvel_grad[e, d + k] + h * g
                quat = Quat(qpos[e, a + 4], qpos[e, a + 5], qpos[e, a + 6], qpos[e, a + 3])
                scale = h * Float(0.5)
                half = Vec3(qvel[e, d + 3], qvel[e, d + 4], qvel[e, d + 5]) * scale
                step = sp.quat_exp(half)
                raw = quat * step
                out_bar = Quat(qpos_out_grad[e, a + 4], qpos_out_grad[e, a + 5],
                               qpos_out_grad[e, a + 6], qpos_out_grad[e, a + 3])  # fmt: skip
                raw_bar = Quat(Float(0.0), Float(0.0), Float(0.0), Float(0.0))
                length = wp.length(raw)
                if length > Float(0.0):  # wp.normalize's threshold (kEps = 0)
                    inv = Float(1.0) / length
                    raw_bar = out_bar * inv - raw * (inv * inv * inv * wp.dot(raw, out_bar))
                quat_bar = raw_bar * sp.conjugate(step)
                half_bar = sp.quat_exp_adjoint(half, sp.conjugate(quat) * raw_bar)
                qpos_grad[e, a + 3] = qpos_grad[e, a + 3] + quat_bar[3]
                for k in range(3):
                    qpos_grad[e, a + 4 + k] = qpos_grad[e, a + 4 + k] + quat_bar[k]
                    qvel_grad[e, d + 3 + k] = qvel_grad[e, d + 3 + k] + scale * half_bar[k]
            if md.body_jtype[b] == HINGE:
                g = qpos_out_grad[e, a]
                qpos_grad[e, a] = qpos_grad[e, a] + g
                qvel_grad[e, d] = qvel_grad[e, d] + h * g

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
        integrate_adjoint=integrate_adjoint,
        free_velocity=free_velocity,
        state_invalid=state_invalid,
    )
