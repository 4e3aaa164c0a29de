"""Contact impulses by projected Gauss-Seidel with a fixed iteration count, and their effect.

Per contact c (frame n, t1, t2) the impulse lambda_c = [lambda_n, lambda_t1, lambda_t2] (N s):
    u_c = b_c + sum_c2 G_c,c2 lambda_c2                         contact velocity after impulses
    lambda_n = w_c max(lambda_n - (u_n - target_n) / G_nn, 0)   weighted normal step
    u_t += G_tn (lambda_n - lambda_n_old)                        tangential velocity at it
    x_t = lambda_t - G_tt^-1 u_t   if |x_t| <= mu lambda_n       2x2 block step: exact sticking
    x_t = lambda_t - u_t / g_t     otherwise                     isotropic step: sliding
    lambda_t = x_t min(1, mu lambda_n / |x_t|)                   Coulomb disc projection
with g_t the mean tangential diagonal of G_cc: the isotropic step keeps sliding friction opposite
to the sliding velocity (the block's would tilt it and spin a sliding body). The weight scales
the normal impulse and through it the friction disc; the tangential rows are solved at the
weighted normal impulse, so a sticking contact with w < 1 still sticks (no creep).
The contact weight w_c and normal velocity target per model:
    smooth: w_c = max(sigmoid(-z) - W_CUT, 0) / (1 - W_CUT),  z = kappa (phi - offset),
            target_n = erp max(-phi, 0) / dt
        contacts act slightly before touchdown (w ~ 1/2 at phi = offset, ~1 at phi = 0), so the
        impulse is a smooth function of the state and gradients are informative; the sigmoid is
        lowered by W_CUT = 1e-6 so that it reaches exactly 0 (continuously) at z = ln(1/W_CUT - 1):
        farther contacts cost nothing, and the reverse pass never multiplies weights so small
        that float32 turns denormal (tens of times slower on CPUs);
    hard:   w_c = [phi <= offset],  target_n = erp max(-phi, 0) / dt - 2 max(phi, 0) / dt
        the same solver, unsmoothed: a contact within `offset` only pushes if the point would
        otherwise cross the plane by the end of the step (no force at a distance, no chatter).
Each iteration writes its own slice of the impulse history, so the tape differentiates the
unrolled solver.
"""

import math
from types import SimpleNamespace

import warp as wp

W_CUT = 1.0e-6
"""Smooth model: the sigmoid is lowered by this much, so the weight is exactly 0 beyond Z_CUT."""
Z_CUT = math.log(1.0 / W_CUT - 1.0)
"""kappa (phi - offset) at which the smooth weight reaches 0 (13.8)."""


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
        reach: Float,  # distance beyond which the weight is 0 (m); the Delassus kernels' test
        erp: Float,  # penetration fraction removed per step
        dt: Float,  # time step (s)
        weight: wp.array2d(dtype=Float),  # (N, nc) contact weights w_c
        rinv: wp.array2d(dtype=Vec3),  # (N, nc) step sizes [1/G_nn, 1/g_t, 1/g_t]
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
                # exp of the clamped z: exp(z) = inf far from the ground would give inf * 0 = NaN
                # in the generated adjoint; beyond Z_CUT the weight is 0 anyway
                z = wp.min(kappa * (phi[e, c] - offset), Float(Z_CUT))
                sig = Float(1.0) / (Float(1.0) + wp.exp(z))
                cut = Float(1.0) / (Float(1.0) + wp.exp(Float(Z_CUT)))  # W_CUT, rounded as sig
                w = wp.max(sig - cut, zero) / (Float(1.0) - cut)
            if phi[e, c] > reach or not (G[e, c, c][0, 0] > zero):
                w = zero  # out of reach (blocks left 0), or on a body no dof moves
            weight[e, c] = w
            rinv[e, c] = Vec3(zero, zero, zero)
            if w != zero:
                block = G[e, c, c]
                tangent = Float(2.0) / (block[1, 1] + block[2, 2])
                rinv[e, c] = Vec3(Float(1.0) / block[0, 0], tangent, tangent)
            lam[e, 0, c] = Vec3(zero, zero, zero)
        for it in range(iterations):
            for c in range(nc):
                if weight[e, c] == zero:  # off the ground: the update gives exactly 0
                    lam[e, it + 1, c] = Vec3(zero, zero, zero)
                else:
                    u = b[e, c]
                    for c2 in range(nc):
                        if c2 < c:
                            u = u + G[e, c, c2] * lam[e, it + 1, c2]
                        else:
                            u = u + G[e, c, c2] * lam[e, it, c2]
                    U[e, it, c] = u
                    lam_old = lam[e, it, c]
                    gcc = G[e, c, c]
                    # normal row: scalar step, then the weight
                    target = erp * wp.max(-phi[e, c], zero) / dt
                    if smooth == 0:
                        target = target - Float(2.0) * wp.max(phi[e, c], zero) / dt
                    x_n = lam_old[0] - rinv[e, c][0] * (U[e, it, c][0] - target)
                    n = weight[e, c] * wp.max(x_n, zero)
                    # tangential rows at the new normal impulse: 2x2 gcc step if it sticks
                    dn = n - lam_old[0]
                    u1 = U[e, it, c][1] + gcc[1, 0] * dn
                    u2 = U[e, it, c][2] + gcc[2, 0] * dn
                    det = gcc[1, 1] * gcc[2, 2] - gcc[1, 2] * gcc[2, 1]
                    x1 = lam_old[1] - (gcc[2, 2] * u1 - gcc[1, 2] * u2) / det
                    x2 = lam_old[2] - (gcc[1, 1] * u2 - gcc[2, 1] * u1) / det
                    if x1 * x1 + x2 * x2 > mu[e] * mu[e] * n * n:
                        x1 = lam_old[1] - rinv[e, c][1] * u1
                        x2 = lam_old[2] - rinv[e, c][2] * u2
                    t = wp.sqrt(x1 * x1 + x2 * x2 + Float(1.0e-20))
                    scale = wp.min(Float(1.0), mu[e] * n / t)
                    lam[e, it + 1, c] = Vec3(n, x1 * scale, x2 * scale)

    @wp.kernel(module=module)
    def apply_impulses(
        L: wp.array3d(dtype=Float),  # (N, nv, nv) factor of H = L^T L
        Y: wp.array3d(dtype=Vec3),  # (N, nv, nc) L^-T J^T
        lam: wp.array3d(dtype=Vec3),  # (N, iterations + 1, nc) impulse history
        qvel_free: wp.array2d(dtype=Float),  # (N, nv)
        md: sp.ModelData,
        dt: Float,  # time step (s)
        sdv: wp.array2d(dtype=Float),  # (N, nv) scratch: Y lambda - sum_j<i L[i, j] dv[j]
        dv: wp.array2d(dtype=Float),  # (N, nv) H^-1 J^T lambda
        qvel_out: wp.array2d(dtype=Float),  # (N, nv) velocity at the end of the step
        force: wp.array2d(dtype=Vec3),  # (N, nc) contact force lambda / dt, world (N)
    ):
        """qd+ = qd_free + L^-1 (Y lambda) from the root; also the mean contact force."""
        e = wp.tid()
        nv = L.shape[1]
        nc = Y.shape[2]
        last = lam.shape[1] - 1
        for i in range(nv):
            s = Float(0.0)
            for c in range(nc):
                s = s + wp.dot(Y[e, i, c], lam[e, last, c])
            for a in range(md.dof_nanc[i] - 1):
                j = md.dof_anc[i, a]
                s = s - L[e, i, j] * dv[e, j]
            sdv[e, i] = s
            dv[e, i] = sdv[e, i] / L[e, i, i]
            qvel_out[e, i] = qvel_free[e, i] + dv[e, i]
        for c in range(nc):
            x = lam[e, last, c] / dt
            force[e, c] = x[0] * md.ground_normal + x[1] * md.ground_t1 + x[2] * md.ground_t2

    @wp.kernel(module=module, enable_backward=False)
    def pgs_adjoint(
        G: wp.array3d(dtype=Mat33),  # (N, nc, nc) Delassus blocks
        phi: wp.array2d(dtype=Float),  # (N, nc) signed distances (m)
        mu: wp.array(dtype=Float),  # (N,) friction coefficient
        smooth: int,  # 1: smooth weights and targets; 0: hard
        kappa: Float,  # sigmoid sharpness (1/m)
        erp: Float,  # penetration fraction removed per step
        dt: Float,  # time step (s)
        weight: wp.array2d(dtype=Float),  # (N, nc) contact weights of the forward pass
        rinv: wp.array2d(dtype=Vec3),  # (N, nc) step sizes of the forward pass
        U: wp.array3d(dtype=Vec3),  # (N, iterations, nc) contact velocities of the forward pass
        lam: wp.array3d(dtype=Vec3),  # (N, iterations + 1, nc) impulse history
        lam_grad: wp.array3d(dtype=Vec3),  # (N, iterations + 1, nc) in: last slice; overwritten
        u_grad: wp.array3d(dtype=Vec3),  # (N, iterations, nc) scratch: adjoint of each U
        G_grad: wp.array3d(dtype=Mat33),  # (N, nc, nc) accumulated
        b_grad: wp.array2d(dtype=Vec3),  # (N, nc) accumulated
        phi_grad: wp.array2d(dtype=Float),  # (N, nc) accumulated
        mu_grad: wp.array(dtype=Float),  # (N,) accumulated
    ):
        """Reverse of pgs_solve: the unrolled updates in reverse order from the stored history."""
        e = wp.tid()
        zero = Float(0.0)
        one = Float(1.0)
        nc = G.shape[1]
        iterations = U.shape[1]
        for r in range(iterations):
            it = iterations - 1 - r
            for rc in range(nc):
                c = nc - 1 - rc
                if weight[e, c] == zero:  # skipped in the forward pass: no dependence
                    u_grad[e, it, c] = Vec3(zero, zero, zero)
                    continue
                # replay the update (it, c) from its stored inputs
                u = U[e, it, c]
                lo = lam[e, it, c]
                g = G[e, c, c]
                ri = rinv[e, c]
                w = weight[e, c]
                target = erp * wp.max(-phi[e, c], zero) / dt
                if smooth == 0:
                    target = target - Float(2.0) * wp.max(phi[e, c], zero) / dt
                x_n = lo[0] - ri[0] * (u[0] - target)
                n = w * wp.max(x_n, zero)
                dn = n - lo[0]
                u1 = u[1] + g[1, 0] * dn
                u2 = u[2] + g[2, 0] * dn
                det = g[1, 1] * g[2, 2] - g[1, 2] * g[2, 1]
                p1 = g[2, 2] * u1 - g[1, 2] * u2
                p2 = g[1, 1] * u2 - g[2, 1] * u1
                inv_det = one / det
                x1 = lo[1] - p1 * inv_det
                x2 = lo[2] - p2 * inv_det
                slide = x1 * x1 + x2 * x2 > mu[e] * mu[e] * n * n
                if slide:
                    x1 = lo[1] - ri[1] * u1
                    x2 = lo[2] - ri[2] * u2
                inv_t = one / wp.sqrt(x1 * x1 + x2 * x2 + Float(1.0e-20))
                a = mu[e] * n * inv_t
                s = wp.min(one, a)
                # reverse of lambda = (n, x1 s, x2 s)
                out = lam_grad[e, it + 1, c]
                x1b = out[1] * s
                x2b = out[2] * s
                nb = out[0]
                if a < one:  # s = mu n / t
                    sb = out[1] * x1 + out[2] * x2
                    mu_grad[e] = mu_grad[e] + sb * n * inv_t
                    nb = nb + sb * mu[e] * inv_t
                    tb = -sb * a * inv_t * inv_t  # d/dt, then t = |x|: dt/dx = x / t
                    x1b = x1b + tb * x1
                    x2b = x2b + tb * x2
                lob = Vec3(zero, x1b, x2b)
                gb = Mat33()
                rib = Vec3(zero, zero, zero)
                if slide:
                    u1b = -ri[1] * x1b
                    u2b = -ri[2] * x2b
                    rib = Vec3(zero, -x1b * u1, -x2b * u2)
                else:
                    p1b = -x1b * inv_det
                    p2b = -x2b * inv_det
                    detb = (x1b * p1 + x2b * p2) * inv_det * inv_det
                    u1b = g[2, 2] * p1b - g[2, 1] * p2b
                    u2b = g[1, 1] * p2b - g[1, 2] * p1b
                    gb[2, 2] = p1b * u1 + detb * g[1, 1]
                    gb[1, 1] = p2b * u2 + detb * g[2, 2]
                    gb[1, 2] = -p1b * u2 - detb * g[2, 1]
                    gb[2, 1] = -p2b * u1 - detb * g[1, 2]
                # u1 = u_1 + g10 dn, u2 = u_2 + g20 dn, dn = n - lo_n
                gb[1, 0] = u1b * dn
                gb[2, 0] = u2b * dn
                dnb = u1b * g[1, 0] + u2b * g[2, 0]
                nb = nb + dnb
                # n = w max(x_n, 0), x_n = lo_n - r_n (u_n - target)
                xnb = wp.where(x_n > zero, nb * w, zero)
                wb = nb * wp.max(x_n, zero)
                lob = lob + Vec3(xnb - dnb, zero, zero)
                rib = rib + Vec3(-xnb * (u[0] - target), zero, zero)
                ub = Vec3(-ri[0] * xnb, u1b, u2b)
                targetb = ri[0] * xnb
                phib = zero
                if phi[e, c] < zero:
                    phib = phib - targetb * erp / dt
                if smooth == 0 and phi[e, c] > zero:
                    phib = phib - targetb * Float(2.0) / dt
                if smooth == 1:  # w = (sig - W_CUT) / (1 - W_CUT) where w > 0
                    cut = one / (one + wp.exp(Float(Z_CUT)))
                    sig = w * (one - cut) + cut
                    phib = phib - wb * kappa * sig * (one - sig) / (one - cut)
                phi_grad[e, c] = phi_grad[e, c] + phib
                # step sizes: r_n = 1 / g00, r_t = 2 / (g11 + g22)
                gb[0, 0] = -rib[0] * ri[0] * ri[0]
                rt = -(rib[1] + rib[2]) * ri[1] * ri[1] / Float(2.0)
                gb[1, 1] = gb[1, 1] + rt
                gb[2, 2] = gb[2, 2] + rt
                G_grad[e, c, c] = G_grad[e, c, c] + gb
                # u = b_c + sum_c2 G[c, c2] lambda_c2 (new impulses before c, old from c on)
                b_grad[e, c] = b_grad[e, c] + ub
                u_grad[e, it, c] = ub
                lam_grad[e, it, c] = lam_grad[e, it, c] + lob
                for c2 in range(nc):
                    if weight[e, c2] != zero:  # an inactive impulse stays 0: nothing to feed
                        k = it
                        if c2 < c:
                            k = it + 1
                        lam_grad[e, k, c2] = lam_grad[e, k, c2] + ub * G[e, c, c2]  # G^T ub
        # G[c, c2] multiplied the impulse of c2 in every update of c: one sum per block
        # (0 unless both are active: u_grad of an inactive c and its impulses are 0)
        for c in range(nc):
            if weight[e, c] != zero:
                for c2 in range(nc):
                    if weight[e, c2] != zero:
                        acc = Mat33()
                        for it in range(iterations):
                            k = it
                            if c2 < c:
                                k = it + 1
                            acc = acc + wp.outer(u_grad[e, it, c], lam[e, k, c2])
                        G_grad[e, c, c2] = G_grad[e, c, c2] + acc

    return SimpleNamespace(
        pgs_solve=pgs_solve, apply_impulses=apply_impulses, pgs_adjoint=pgs_adjoint
    )
