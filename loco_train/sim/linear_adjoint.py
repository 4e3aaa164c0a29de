"""Hand-written adjoints of everything that solves with the factor L of H = L^T L (cholesky.py).

The forward kernels (factor, solve, Delassus columns and blocks, impulse update) run off the tape;
their reverse is written here in terms of H itself, so no gradient ever reaches L and the
factorisation needs no adjoint at all. With M = H^-1 J^T and S = G_bar + G_bar^T (blockwise):
    x = H^-1 f:            z = H^-1 x_bar,   f_bar += z,            H_bar -= z x^T
    G = J H^-1 J^T:        W = M S,          J_bar += W^T,          H_bar -= 1/2 M W^T
    b = J qd_free:         J_bar += b_bar qd_free^T,  qd_free_bar += J^T b_bar
    dv = H^-1 J^T lambda:  z = H^-1 dv_bar,  lambda_bar += J z,     J_bar += lambda z^T,
                                             H_bar -= z dv^T
With contacts, the solve for qacc reuses these: H^-1 qacc_bar = dt (H^-1 qd+_bar + M b_bar).
H_bar is accumulated only on the ancestor pairs (i, j) where H can be non-zero (both triangles):
the kernels that build H read nothing else back. Only the symmetric part of H_bar matters there,
because H[i, j] and H[j, i] are always written from one value.
"""

from types import SimpleNamespace

import warp as wp


def build(sp, module, Drive, drive_adjoint):
    """Kernels for one scalar type `sp`; the drive's reverse (actuator.py) runs inside them."""
    Float, Vec3, Mat33 = sp.Float, sp.Vec3, sp.Mat33

    @wp.func
    def solve_into(
        L: wp.array3d(dtype=Float),
        rhs: wp.array2d(dtype=Float),
        md: sp.ModelData,
        z: wp.array2d(dtype=Float),
        e: int,
    ):
        """z[e] = H^-1 rhs[e] = L^-1 L^-T rhs[e], in place in z (cholesky.py's sparse factor)."""
        n = L.shape[1]
        for r in range(n):
            i = n - 1 - r
            s = rhs[e, i]
            for d in range(md.dof_ndesc[i]):
                m = md.dof_desc[i, d]
                s = s - L[e, m, i] * z[e, m]
            z[e, i] = s / L[e, i, i]
        for i in range(n):
            s = z[e, i]
            for a in range(md.dof_nanc[i] - 1):
                j = md.dof_anc[i, a]
                s = s - L[e, i, j] * z[e, j]
            z[e, i] = s / L[e, i, i]

    @wp.func
    def subtract_outer(
        H_grad: wp.array3d(dtype=Float),
        z: wp.array2d(dtype=Float),
        x: wp.array2d(dtype=Float),
        md: sp.ModelData,
        e: int,
    ):
        """H_bar[i, j] -= z_i x_j on every ancestor pair, both triangles."""
        for i in range(md.nv):
            for k in range(md.dof_nanc[i]):
                j = md.dof_anc[i, k]
                H_grad[e, i, j] = H_grad[e, i, j] - z[e, i] * x[e, j]
                if j != i:
                    H_grad[e, j, i] = H_grad[e, j, i] - z[e, j] * x[e, i]

    @wp.kernel(module=module, enable_backward=False)
    def solve_adjoint(
        L: wp.array3d(dtype=Float),  # (N, nv, nv) factor of H = L^T L
        x: wp.array2d(dtype=Float),  # (N, nv) the solve's result H^-1 f
        x_grad: wp.array2d(dtype=Float),  # (N, nv)
        md: sp.ModelData,
        drive: Drive,  # the net force's inputs and their gradients
        z: wp.array2d(dtype=Float),  # (N, nv) scratch: H^-1 x_bar = f_bar
        H_grad: wp.array3d(dtype=Float),  # (N, nv, nv) accumulated
    ):
        """Reverse of x = H^-1 f, then of the net force f (drive_adjoint)."""
        e = wp.tid()
        solve_into(L, x_grad, md, z, e)
        drive_adjoint(drive, md, z, e)
        subtract_outer(H_grad, z, x, md, e)

    @wp.kernel(module=module, enable_backward=False)
    def free_solve_adjoint(
        x: wp.array2d(dtype=Float),  # (N, nv) qacc = H^-1 f
        z_out: wp.array2d(dtype=Float),  # (N, nv) H^-1 qd+_bar, from impulse_adjoint
        M: wp.array3d(dtype=Vec3),  # (N, nv, nc) H^-1 J^T, 0 for inactive contacts (delassus)
        W: wp.array3d(dtype=Vec3),  # (N, nv, nc) M S, likewise
        dv: wp.array2d(dtype=Float),  # (N, nv) H^-1 J^T lambda
        b_grad: wp.array2d(dtype=Vec3),  # (N, nc)
        weight: wp.array2d(dtype=Float),  # (N, nc) PGS contact weights
        md: sp.ModelData,
        dt: Float,  # time step (s)
        qvel_free_grad: wp.array2d(dtype=Float),  # (N, nv) complete (impulse, Delassus)
        drive: Drive,  # the net force's inputs and their gradients
        z: wp.array2d(dtype=Float),  # (N, nv) scratch: H^-1 qacc_bar = f_bar
        H_grad: wp.array3d(dtype=Float),  # (N, nv, nv) accumulated
    ):
        """Reverse of qd_free = qd + dt H^-1 f when contacts follow, without a solve.

        qd_free is read only by the impulse update and b = J qd_free, so
        qacc_bar = dt (qd+_bar + J^T b_bar) and H^-1 qacc_bar = dt (z_out + M b_bar). Then the
        net force's reverse (drive_adjoint), and all of the step's H_bar in one pass: the
        impulse and Delassus reverses leave theirs to it,
            H_bar -= z_out dv^T + 1/2 M W^T + z qacc^T.
        """
        e = wp.tid()
        nc = M.shape[2]
        for i in range(md.nv):
            s = z_out[e, i]
            for c in range(nc):  # M and W are 0 in the columns of inactive contacts
                s = s + wp.dot(M[e, i, c], b_grad[e, c])
            z[e, i] = dt * s
            drive.qvel_grad[e, i] = drive.qvel_grad[e, i] + qvel_free_grad[e, i]
        drive_adjoint(drive, md, z, e)
        half = Float(0.5)
        for i in range(md.nv):
            for kk in range(md.dof_nanc[i]):
                j = md.dof_anc[i, kk]
                v = Float(0.0)
                for c in range(nc):
                    v = v + wp.dot(M[e, i, c], W[e, j, c])
                v = half * v  # symmetric: M S M^T
                H_grad[e, i, j] = H_grad[e, i, j] - v - z_out[e, i] * dv[e, j] - z[e, i] * x[e, j]
                if j != i:
                    H_grad[e, j, i] = (
                        H_grad[e, j, i] - v - z_out[e, j] * dv[e, i] - z[e, j] * x[e, i]
                    )

    @wp.kernel(module=module, enable_backward=False)
    def delassus_adjoint(
        L: wp.array3d(dtype=Float),  # (N, nv, nv) factor of H = L^T L
        Y: wp.array3d(dtype=Vec3),  # (N, nv, nc) L^-T J^T
        J: wp.array3d(dtype=Vec3),  # (N, nc, nv)
        qvel_free: wp.array2d(dtype=Float),  # (N, nv)
        G_grad: wp.array3d(dtype=Mat33),  # (N, nc, nc)
        b_grad: wp.array2d(dtype=Vec3),  # (N, nc)
        weight: wp.array2d(dtype=Float),  # (N, nc) PGS contact weights; 0: no gradient reads
        md: sp.ModelData,
        M: wp.array3d(dtype=Vec3),  # (N, nv, nc) scratch: H^-1 J^T = L^-1 Y
        S: wp.array3d(dtype=Mat33),  # (N, nc, nc) scratch: G_bar + G_bar^T, blockwise
        W: wp.array3d(dtype=Vec3),  # (N, nv, nc) scratch: M S
        J_grad: wp.array3d(dtype=Vec3),  # (N, nc, nv) accumulated
        qvel_free_grad: wp.array2d(dtype=Float),  # (N, nv) accumulated
    ):
        """Reverse of G = J H^-1 J^T and b = J qd_free; its H_bar = -1/2 M W^T is left in M, W.

        PGS reads no G block or b of a contact with weight 0, so their gradients are 0: only
        the active contacts' columns of M and W are worked, the others are set to 0.
        """
        e = wp.tid()
        nv = L.shape[1]
        nc = J.shape[1]
        zero = Vec3(Float(0.0), Float(0.0), Float(0.0))
        for i in range(nv):  # M = L^-1 Y from the root
            inv = Float(1.0) / L[e, i, i]
            for c in range(nc):
                s = zero
                if weight[e, c] != Float(0.0):
                    s = Y[e, i, c]
                    for a in range(md.dof_nanc[i] - 1):
                        j = md.dof_anc[i, a]
                        s = s - L[e, i, j] * M[e, j, c]
                M[e, i, c] = s * inv
        for c in range(nc):
            for c2 in range(nc):
                S[e, c, c2] = G_grad[e, c, c2] + wp.transpose(G_grad[e, c2, c])
        for k in range(nv):
            for c in range(nc):
                w = zero
                if weight[e, c] != Float(0.0):
                    for c2 in range(nc):  # M's column is 0 for an inactive c2
                        w = w + S[e, c, c2] * M[e, k, c2]
                W[e, k, c] = w
        for c in range(nc):
            if weight[e, c] != Float(0.0):
                for kk in range(md.contact_ndof[c]):
                    j = md.contact_dofs[c, kk]
                    J_grad[e, c, j] = J_grad[e, c, j] + W[e, j, c] + b_grad[e, c] * qvel_free[e, j]
                    qvel_free_grad[e, j] = qvel_free_grad[e, j] + wp.dot(J[e, c, j], b_grad[e, c])

    @wp.kernel(module=module, enable_backward=False)
    def impulse_adjoint(
        L: wp.array3d(dtype=Float),  # (N, nv, nv) factor of H = L^T L
        J: wp.array3d(dtype=Vec3),  # (N, nc, nv)
        lam: wp.array3d(dtype=Vec3),  # (N, iterations + 1, nc) impulse history
        dv: wp.array2d(dtype=Float),  # (N, nv) H^-1 J^T lambda
        qvel_out_grad: wp.array2d(dtype=Float),  # (N, nv)
        force_grad: wp.array2d(dtype=Vec3),  # (N, nc)
        md: sp.ModelData,
        dt: Float,  # time step (s)
        z: wp.array2d(dtype=Float),  # (N, nv) H^-1 qd+_bar (free_solve_adjoint reads it too)
        qvel_free_grad: wp.array2d(dtype=Float),  # (N, nv) accumulated
        lam_grad: wp.array3d(dtype=Vec3),  # (N, iterations + 1, nc) accumulated (last slice)
        J_grad: wp.array3d(dtype=Vec3),  # (N, nc, nv) accumulated
    ):
        """Reverse of qd+ = qd_free + H^-1 J^T lambda and force = lambda / dt (world).

        Its H_bar = -z dv^T is added by free_solve_adjoint, from z.
        """
        e = wp.tid()
        nc = J.shape[1]
        last = lam.shape[1] - 1
        solve_into(L, qvel_out_grad, md, z, e)
        for i in range(md.nv):
            qvel_free_grad[e, i] = qvel_free_grad[e, i] + qvel_out_grad[e, i]
        for c in range(nc):
            g = force_grad[e, c] / dt
            a = Vec3(wp.dot(g, md.ground_normal), wp.dot(g, md.ground_t1), wp.dot(g, md.ground_t2))
            for kk in range(md.contact_ndof[c]):
                j = md.contact_dofs[c, kk]
                a = a + J[e, c, j] * z[e, j]
                J_grad[e, c, j] = J_grad[e, c, j] + lam[e, last, c] * z[e, j]
            lam_grad[e, last, c] = lam_grad[e, last, c] + a

    return SimpleNamespace(
        solve_adjoint=solve_adjoint,
        free_solve_adjoint=free_solve_adjoint,
        delassus_adjoint=delassus_adjoint,
        impulse_adjoint=impulse_adjoint,
    )
