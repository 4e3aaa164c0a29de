"""Penalty (soft) contact: spring-damper normal force and regularised Coulomb friction.

Per contact, with penetration p = max(-phi, 0) and contact velocity [v_n, v_t] (frame n, t1, t2):
    F_n = k p - d [p > 0] v_n+
    F_t = -c_t v_t+,  c_t = mu k p / sqrt(|v_t|^2 + v_eps^2)   (regularised Coulomb friction)
The damping and friction act on the end-of-step velocity v+ (implicit: explicit friction this
stiff would need dt < 1e-4 s), i.e. with D = diag(d [p > 0], c_t, c_t) per contact:
    (H + dt J^T D J) qd+ = H qd + dt (f + J^T (k p e_n - D J qd))
The paper's baseline: smooth gradients, visible penetration (k p = weight).
"""

from types import SimpleNamespace

import warp as wp


def build(sp, module):
    """Kernels for one scalar type `sp`."""
    Float, Vec3 = sp.Float, sp.Vec3

    @wp.kernel(module=module)
    def soft_contact_force(
        phi: wp.array2d(dtype=Float),  # (N, nc) signed distances (m)
        J: wp.array3d(dtype=Vec3),  # (N, nc, nv)
        qvel: wp.array2d(dtype=Float),  # (N, nv)
        mu: wp.array(dtype=Float),  # (N,)
        md: sp.ModelData,
        stiffness: Float,  # N/m
        damping: Float,  # N s/m
        v_eps: Float,  # friction regularisation velocity (m/s)
        vc: wp.array2d(dtype=Vec3),  # (N, nc) contact velocity [v_n, v_t1, v_t2] (m/s)
        gain: wp.array2d(dtype=Vec3),  # (N, nc) D: implicit damping [d_n, c_t, c_t] (N s/m)
        local: wp.array2d(dtype=Vec3),  # (N, nc) contact force [F_n, F_t1, F_t2] (N)
        force: wp.array2d(dtype=Vec3),  # (N, nc) contact force, world (N)
        f_gen: wp.array2d(dtype=Float),  # (N, nv) J^T F
    ):
        """Penalty contact forces and their generalised force."""
        e = wp.tid()
        zero = Float(0.0)
        nc = J.shape[1]
        nv = J.shape[2]
        for c in range(nc):
            v = Vec3(zero, zero, zero)
            for j in range(nv):
                v = v + J[e, c, j] * qvel[e, j]
            vc[e, c] = v
            vn = vc[e, c][0]
            vt1 = vc[e, c][1]
            vt2 = vc[e, c][2]
            pen = wp.max(-phi[e, c], zero)
            fn = stiffness * pen
            ct = mu[e] * fn / wp.sqrt(vt1 * vt1 + vt2 * vt2 + v_eps * v_eps)
            gain[e, c] = Vec3(wp.where(pen > zero, damping, zero), ct, ct)
            d = gain[e, c]
            local[e, c] = Vec3(fn - d[0] * vn, -d[1] * vt1, -d[2] * vt2)
            f = local[e, c]
            force[e, c] = f[0] * md.ground_normal + f[1] * md.ground_t1 + f[2] * md.ground_t2
        for i in range(nv):
            s = zero
            for c in range(nc):
                s = s + wp.dot(J[e, c, i], local[e, c])
            f_gen[e, i] = s

    @wp.kernel(module=module)
    def soft_contact_inertia(
        H: wp.array3d(dtype=Float),  # (N, nv, nv) mass matrix
        J: wp.array3d(dtype=Vec3),  # (N, nc, nv)
        gain: wp.array2d(dtype=Vec3),  # (N, nc) implicit damping D
        dt: Float,  # time step (s)
        H_out: wp.array3d(dtype=Float),  # (N, nv, nv) H + dt J^T D J
    ):
        """Mass matrix of the implicit velocity update with contact damping and friction."""
        e, i = wp.tid()
        nc = J.shape[1]
        for j in range(H.shape[2]):
            s = Float(0.0)
            for c in range(nc):
                s = s + wp.dot(J[e, c, i], wp.cw_mul(gain[e, c], J[e, c, j]))
            H_out[e, i, j] = H[e, i, j] + dt * s

    return SimpleNamespace(
        soft_contact_force=soft_contact_force, soft_contact_inertia=soft_contact_inertia
    )
