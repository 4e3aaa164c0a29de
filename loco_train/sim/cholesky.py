"""Dense Cholesky factorisation H = L L^T per environment and solves through the factors."""

from types import SimpleNamespace

import warp as wp


def build(sp, module):
    """Kernels for one scalar type `sp`."""
    Float = sp.Float

    @wp.kernel(module=module)
    def cholesky_factor(
        H: wp.array3d(dtype=Float),  # (N, nv, nv) symmetric positive definite
        S: wp.array3d(dtype=Float),  # (N, nv, nv) scratch: sum_k<j L[i, k] L[j, k]
        L: wp.array3d(dtype=Float),  # (N, nv, nv) lower factor; upper triangle left untouched
    ):
        """Lower Cholesky factor of H (Cholesky-Banachiewicz, column by column)."""
        e = wp.tid()
        n = H.shape[1]
        for j in range(n):
            s = Float(0.0)
            for k in range(j):
                s = s + L[e, j, k] * L[e, j, k]
            S[e, j, j] = s
            L[e, j, j] = wp.sqrt(H[e, j, j] - S[e, j, j])
            for i in range(j + 1, n):
                # two partial sums: half the dependent chain of multiply-adds (latency-bound)
                t0 = Float(0.0)
                t1 = Float(0.0)
                for h in range(j // 2):
                    k = 2 * h
                    t0 = t0 + L[e, i, k] * L[e, j, k]
                    t1 = t1 + L[e, i, k + 1] * L[e, j, k + 1]
                if j % 2 == 1:
                    t0 = t0 + L[e, i, j - 1] * L[e, j, j - 1]
                S[e, i, j] = t0 + t1
                L[e, i, j] = (H[e, i, j] - S[e, i, j]) / L[e, j, j]

    @wp.kernel(module=module)
    def cholesky_solve(
        L: wp.array3d(dtype=Float),  # (N, nv, nv) lower factor of H
        rhs: wp.array2d(dtype=Float),  # (N, nv)
        sy: wp.array2d(dtype=Float),  # (N, nv) scratch sums of the forward substitution
        y: wp.array2d(dtype=Float),  # (N, nv) L^-1 rhs
        sx: wp.array2d(dtype=Float),  # (N, nv) scratch sums of the backward substitution
        x: wp.array2d(dtype=Float),  # (N, nv) H^-1 rhs
    ):
        """X = H^-1 rhs by forward then backward substitution."""
        e = wp.tid()
        n = L.shape[1]
        for i in range(n):
            s = Float(0.0)
            for k in range(i):
                s = s + L[e, i, k] * y[e, k]
            sy[e, i] = s
            y[e, i] = (rhs[e, i] - sy[e, i]) / L[e, i, i]
        for r in range(n):
            i = n - 1 - r
            s = Float(0.0)
            for k in range(i + 1, n):
                s = s + L[e, k, i] * x[e, k]
            sx[e, i] = s
            x[e, i] = (y[e, i] - sx[e, i]) / L[e, i, i]

    return SimpleNamespace(cholesky_factor=cholesky_factor, cholesky_solve=cholesky_solve)
