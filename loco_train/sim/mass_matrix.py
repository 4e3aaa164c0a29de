"""Joint-space mass matrix H(q) by the composite-rigid-body algorithm, armature on the diagonal."""

from types import SimpleNamespace

import warp as wp


def build(sp, module):
    """Kernels for one scalar type `sp`."""
    Float, Vec3, Vec6, Mat33 = sp.Float, sp.Vec3, sp.Vec6, sp.Mat33

    @wp.kernel(module=module)
    def composite_inertia(
        cin_i: wp.array2d(dtype=Mat33),  # (N, nbody) body spatial inertias (kinematics.py)
        cin_h: wp.array2d(dtype=Vec3),
        cin_m: wp.array2d(dtype=Float),
        md: sp.ModelData,
        crb_i: wp.array2d(dtype=Mat33),  # (N, nbody) composite inertia of each subtree
        crb_h: wp.array2d(dtype=Vec3),
        crb_m: wp.array2d(dtype=Float),
    ):
        """Composite rigid-body inertia of every subtree (sum of its bodies' spatial inertias)."""
        e = wp.tid()
        for b in range(1, md.nbody):
            inertia = cin_i[e, b]
            h = cin_h[e, b]
            m = cin_m[e, b]
            for d in range(b + 1, md.body_subtree_end[b]):
                inertia = inertia + cin_i[e, d]
                h = h + cin_h[e, d]
                m = m + cin_m[e, d]
            crb_i[e, b] = inertia
            crb_h[e, b] = h
            crb_m[e, b] = m

    @wp.kernel(module=module)
    def mass_matrix(
        crb_i: wp.array2d(dtype=Mat33),  # (N, nbody)
        crb_h: wp.array2d(dtype=Vec3),
        crb_m: wp.array2d(dtype=Float),
        cdof: wp.array2d(dtype=Vec6),  # (N, nv)
        md: sp.ModelData,
        armature: wp.array2d(dtype=Float),  # (N, nu) reflected rotor inertia (kg m^2)
        H: wp.array3d(dtype=Float),  # (N, nv, nv) symmetric; non-ancestor pairs stay zero
    ):
        """H[i, j] = cdof_j . (crb_body(i) cdof_i) for j an ancestor dof of i (MuJoCo's mj_crb)."""
        e = wp.tid()
        for i in range(md.nv):
            b = md.dof_body[i]
            f = sp.inertia_mul(crb_i[e, b], crb_h[e, b], crb_m[e, b], cdof[e, i])
            for k in range(md.dof_nanc[i]):
                j = md.dof_anc[i, k]
                value = wp.dot(cdof[e, j], f)
                if j == i:
                    value = value + md.dof_armature[i]
                    u = md.dof_act[i]
                    if u >= 0:
                        value = value + armature[e, u]
                H[e, i, j] = value
                if j != i:
                    H[e, j, i] = value

    @wp.kernel(module=module, enable_backward=False)
    def crba_adjoint(
        crb_i: wp.array2d(dtype=Mat33),  # (N, nbody) composite inertias of the forward pass
        crb_h: wp.array2d(dtype=Vec3),
        crb_m: wp.array2d(dtype=Float),
        cdof: wp.array2d(dtype=Vec6),  # (N, nv)
        H_grad: wp.array3d(dtype=Float),  # (N, nv, nv)
        md: sp.ModelData,
        armature_grad: wp.array2d(dtype=Float),  # (N, nu) accumulated
        cdof_grad: wp.array2d(dtype=Vec6),  # (N, nv) accumulated
        crb_i_grad: wp.array2d(dtype=Mat33),  # (N, nbody) zero on entry; used as work space
        crb_h_grad: wp.array2d(dtype=Vec3),
        crb_m_grad: wp.array2d(dtype=Float),
        cin_i_grad: wp.array2d(dtype=Mat33),  # (N, nbody) accumulated
        cin_h_grad: wp.array2d(dtype=Vec3),
        cin_m_grad: wp.array2d(dtype=Float),
    ):
        """Reverse of composite_inertia and mass_matrix (H[i, j] = cdof_j . f_i, f_i = I_b cdof_i).

        f_bar_i = sum_j Hb_ij cdof_j and cdof_bar_j += Hb_ij f_i over the ancestor pairs, with
        Hb_ij = H_bar[i, j] + H_bar[j, i] (one value fills both); then the composite inertia of
        body b, a sum over its subtree, hands its gradient to every body of the subtree.
        """
        e = wp.tid()
        for i in range(md.nv):
            b = md.dof_body[i]
            v = cdof[e, i]
            w = sp.top(v)
            u = sp.bottom(v)
            inertia = crb_i[e, b]
            h = crb_h[e, b]
            m = crb_m[e, b]
            f = sp.inertia_mul(inertia, h, m, v)
            fb = Vec6()
            for k in range(md.dof_nanc[i]):
                j = md.dof_anc[i, k]
                hb = H_grad[e, i, j]
                if j != i:
                    hb = hb + H_grad[e, j, i]
                else:
                    a = md.dof_act[i]
                    if a >= 0:
                        armature_grad[e, a] = armature_grad[e, a] + hb
                fb = fb + hb * cdof[e, j]
                cdof_grad[e, j] = cdof_grad[e, j] + hb * f
            # f = [I w + h x u; m u + w x h]
            ft = sp.top(fb)
            ff = sp.bottom(fb)
            crb_i_grad[e, b] = crb_i_grad[e, b] + wp.outer(ft, w)
            crb_h_grad[e, b] = crb_h_grad[e, b] + wp.cross(u, ft) + wp.cross(ff, w)
            crb_m_grad[e, b] = crb_m_grad[e, b] + wp.dot(ff, u)
            wb = wp.transpose(inertia) * ft + wp.cross(h, ff)
            ub = wp.cross(ft, h) + m * ff
            cdof_grad[e, i] = cdof_grad[e, i] + sp.stack(wb, ub)
        # cin_bar[d] = sum of crb_bar over d and its ancestors (parents come first)
        for b in range(1, md.nbody):
            p = md.body_parent[b]
            if p > 0:
                crb_i_grad[e, b] = crb_i_grad[e, b] + crb_i_grad[e, p]
                crb_h_grad[e, b] = crb_h_grad[e, b] + crb_h_grad[e, p]
                crb_m_grad[e, b] = crb_m_grad[e, b] + crb_m_grad[e, p]
            cin_i_grad[e, b] = cin_i_grad[e, b] + crb_i_grad[e, b]
            cin_h_grad[e, b] = cin_h_grad[e, b] + crb_h_grad[e, b]
            cin_m_grad[e, b] = cin_m_grad[e, b] + crb_m_grad[e, b]

    return SimpleNamespace(
        composite_inertia=composite_inertia, mass_matrix=mass_matrix, crba_adjoint=crba_adjoint
    )
