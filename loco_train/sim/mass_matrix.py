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

    return SimpleNamespace(composite_inertia=composite_inertia, mass_matrix=mass_matrix)
