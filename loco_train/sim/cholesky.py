"""Sparse factorisation H = L^T L per environment and solves through the factor.

Featherstone's LTL factorisation (Rigid Body Dynamics Algorithms, 6.5): with dofs numbered
parents first, H[k, i] is non-zero only where i is an ancestor of k (or k of i), and factoring
from the leaves keeps that pattern in L: no fill-in. For ANYmal that is ~380 multiply-adds
against ~970 for a dense Cholesky, and each triangular solve touches 117 entries, not 171.
L is lower triangular and only its ancestor pairs are read or written. H^-1 = L^-1 L^-T.
Every entry is written once and its partial sum is kept, so Warp's generated adjoints apply.
"""

from types import SimpleNamespace

import warp as wp


def build(sp, module):
    """Kernels for one scalar type `sp`."""
    Float = sp.Float

    @wp.kernel(module=module)
    def cholesky_factor(
        H: wp.array3d(dtype=Float),  # (N, nv, nv) symmetric positive definite, tree-sparse
        md: sp.ModelData,
        S: wp.array3d(dtype=Float),  # (N, nv, nv) scratch: sum_m L[m, k] L[m, i], m below k
        L: wp.array3d(dtype=Float),  # (N, nv, nv) lower factor, H = L^T L; ancestor pairs only
    ):
        """L[k, i] = (H[k, i] - sum over descendants m of k of L[m, k] L[m, i]) / L[k, k]."""
        e = wp.tid()
        n = H.shape[1]
        for r in range(n):
            k = n - 1 - r  # leaves first: every descendant row is done
            nd = md.dof_ndesc[k]
            s = Float(0.0)
            for d in range(nd):
                m = md.dof_desc[k, d]
                s = s + L[e, m, k] * L[e, m, k]
            S[e, k, k] = s
            L[e, k, k] = wp.sqrt(H[e, k, k] - S[e, k, k])
            for a in range(md.dof_nanc[k] - 1):  # proper ancestors (the list ends with k)
                i = md.dof_anc[k, a]
                t = Float(0.0)
                for d in range(nd):
                    m = md.dof_desc[k, d]
                    t = t + L[e, m, k] * L[e, m, i]
                S[e, k, i] = t
                L[e, k, i] = (H[e, k, i] - S[e, k, i]) / L[e, k, k]

    @wp.kernel(module=module)
    def cholesky_solve(
        L: wp.array3d(dtype=Float),  # (N, nv, nv) factor, H = L^T L
        rhs: wp.array2d(dtype=Float),  # (N, nv)
        md: sp.ModelData,
        sy: wp.array2d(dtype=Float),  # (N, nv) scratch sums of the first solve
        y: wp.array2d(dtype=Float),  # (N, nv) L^-T rhs
        sx: wp.array2d(dtype=Float),  # (N, nv) scratch sums of the second solve
        x: wp.array2d(dtype=Float),  # (N, nv) H^-1 rhs
    ):
        """Solve H x = rhs: L^T y = rhs from the leaves, then L x = y from the root."""
        e = wp.tid()
        n = L.shape[1]
        for r in range(n):
            i = n - 1 - r
            s = Float(0.0)
            for d in range(md.dof_ndesc[i]):
                m = md.dof_desc[i, d]
                s = s + L[e, m, i] * y[e, m]
            sy[e, i] = s
            y[e, i] = (rhs[e, i] - sy[e, i]) / L[e, i, i]
        for i in range(n):
            s = Float(0.0)
            for a in range(md.dof_nanc[i] - 1):
                j = md.dof_anc[i, a]
                s = s + L[e, i, j] * x[e, j]
            sx[e, i] = s
            x[e, i] = (y[e, i] - sx[e, i]) / L[e, i, i]

    return SimpleNamespace(cholesky_factor=cholesky_factor, cholesky_solve=cholesky_solve)
