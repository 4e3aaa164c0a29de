"""Contact impulses by projected Gauss-Seidel with a fixed iteration count, and their effect.

Per contact c (frame n, t1, t2) the impulse lambda_c = [lambda_n, lambda_t1, lambda_t2] (N s):
    u_c = b_c + sum_c2 G_c,c2 lambda_c2                         contact velocity after impulses
    x   = lambda_c - G_cc^-1 (u_c - target_c)                   block Gauss-Seidel step
    lambda_n = max(x_n, 0);  lambda_t = x_t min(1, mu lambda_n / |x_t|)   Coulomb disc projection
    lambda_c = w_c lambda_c                                     contact weight
and the contact weight w_c and normal velocity target per model:
    smooth: w_c = sigmoid(-kappa (phi - offset)),  target_n = erp max(-phi, 0) / dt
        contacts act slightly before touchdown (w = 1/2 at phi = offset, ~1 at phi = 0), so the
        impulse is a smooth function of the state and gradients are informative;
    hard:   w_c = [phi <= offset],  target_n = erp max(-phi, 0) / dt - 2 max(phi, 0) / dt
        the same solver, unsmoothed: a contact within `offset` only pushes if the point would
        otherwise cross the plane by the end of the step (no force at a distance, no chatter).
Each iteration writes its own slice of the impulse history, so the tape differentiates the
unrolled solver.
"""

from types import SimpleNamespace

import warp as wp


def build(sp, module):
    """Kernels for one scalar type `sp`."""
    Float, Vec3, Mat33 = sp.Float, sp.Vec3, sp.Mat33

    @wp.kernel(module=module)
    def pgs_solve(
        G: wp.array3d(dtype=Mat33),  # (N, nc, nc) Delassus blocks
        b: wp.array2d(dtype=Vec3),  # (N, nc) free contact velocities
        phi: wp.array2d(dtype=Float),  # (N, nc) signed distances at the midpoint (m)
        mu: wp.array(dtype=Float),  # (N,) friction coefficient
        smooth: int,  # 1: smooth weights and targets; 0: hard
        kappa: Float,  # sigmoid sharpness (1/m)
        offset: Float,  # distance at which the smooth weight is 1/2 (m)
        erp: Float,  # penetration fraction removed per step
        dt: Float,  # time step (s)
        weight: wp.array2d(dtype=Float),  # (N, nc) contact weights w_c
        dinv: wp.array2d(dtype=Mat33),  # (N, nc) inverse diagonal blocks G_cc^-1
        U: wp.array3d(dtype=Vec3),  # (N, iterations, nc) contact velocities seen by each update
        lam: wp.array3d(dtype=Vec3),  # (N, iterations + 1, nc) impulse history, [0] = 0
    ):
        """Fixed-iteration projected block Gauss-Seidel on the Coulomb disc, weighted."""
        e = wp.tid()
        zero = Float(0.0)
        nc = G.shape[1]
        iterations = U.shape[1]
        for c in range(nc):
            w = wp.where(phi[e, c] <= offset, Float(1.0), zero)
            if smooth == 1:
                w = Float(1.0) / (Float(1.0) + wp.exp(kappa * (phi[e, c] - offset)))
            weight[e, c] = w
            dinv[e, c] = wp.inverse(G[e, c, c])
            lam[e, 0, c] = Vec3(zero, zero, zero)
        for it in range(iterations):
            for c in range(nc):
                u = b[e, c]
                for c2 in range(nc):
                    if c2 < c:
                        u = u + G[e, c, c2] * lam[e, it + 1, c2]
                    else:
                        u = u + G[e, c, c2] * lam[e, it, c2]
                U[e, it, c] = u
                gap = wp.where(smooth == 1, zero, Float(-2.0) * wp.max(phi[e, c], zero) / dt)
                target = Vec3(erp * wp.max(-phi[e, c], zero) / dt + gap, zero, zero)
                x = lam[e, it, c] - dinv[e, c] * (U[e, it, c] - target)
                n = wp.max(x[0], zero)
                t = wp.sqrt(x[1] * x[1] + x[2] * x[2] + Float(1.0e-20))
                scale = wp.min(Float(1.0), mu[e] * n / t)
                lam[e, it + 1, c] = weight[e, c] * Vec3(n, x[1] * scale, x[2] * scale)

    @wp.kernel(module=module)
    def apply_impulses(
        L: wp.array3d(dtype=Float),  # (N, nv, nv) Cholesky factor of H
        Y: wp.array3d(dtype=Vec3),  # (N, nv, nc) L^-1 J^T
        lam: wp.array3d(dtype=Vec3),  # (N, iterations + 1, nc) impulse history
        qvel_free: wp.array2d(dtype=Float),  # (N, nv)
        md: sp.ModelData,
        dt: Float,  # time step (s)
        sdv: wp.array2d(dtype=Float),  # (N, nv) scratch: Y lambda - sum_k>i L[k, i] dv[k]
        dv: wp.array2d(dtype=Float),  # (N, nv) H^-1 J^T lambda
        qvel_out: wp.array2d(dtype=Float),  # (N, nv) velocity at the end of the step
        force: wp.array2d(dtype=Vec3),  # (N, nc) contact force lambda / dt, world (N)
    ):
        """qd+ = qd_free + L^-T (Y lambda); also the mean contact force over the step."""
        e = wp.tid()
        nv = L.shape[1]
        nc = Y.shape[2]
        last = lam.shape[1] - 1
        for r in range(nv):
            i = nv - 1 - r
            s = Float(0.0)
            for c in range(nc):
                s = s + wp.dot(Y[e, i, c], lam[e, last, c])
            for k in range(i + 1, nv):
                s = s - L[e, k, i] * dv[e, k]
            sdv[e, i] = s
            dv[e, i] = sdv[e, i] / L[e, i, i]
            qvel_out[e, i] = qvel_free[e, i] + dv[e, i]
        for c in range(nc):
            x = lam[e, last, c] / dt
            force[e, c] = x[0] * md.ground_normal + x[1] * md.ground_t1 + x[2] * md.ground_t2

    return SimpleNamespace(pgs_solve=pgs_solve, apply_impulses=apply_impulses)
