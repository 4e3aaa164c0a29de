"""Bias forces h(q, qd) (gravity, Coriolis, centrifugal) by recursive Newton-Euler."""

from types import SimpleNamespace

import warp as wp

from loco_train.sim.model import FREE, HINGE


def build(sp, module):
    """Kernels for one scalar type `sp`."""
    Float, Vec3, Vec6, Mat33 = sp.Float, sp.Vec3, sp.Vec6, sp.Mat33

    @wp.kernel(module=module)
    def body_velocities(
        cdof: wp.array2d(dtype=Vec6),  # (N, nv)
        qvel: wp.array2d(dtype=Float),  # (N, nv)
        md: sp.ModelData,
        cvel: wp.array2d(dtype=Vec6),  # (N, nbody) body spatial velocities
        cacc: wp.array2d(dtype=Vec6),  # (N, nbody) velocity-product accelerations minus gravity
    ):
        """Forward pass of RNEA at zero joint acceleration (MuJoCo's mj_comVel and mj_rne)."""
        e = wp.tid()
        zero = Vec3(Float(0.0), Float(0.0), Float(0.0))
        cvel[e, 0] = sp.stack(zero, zero)
        cacc[e, 0] = sp.stack(zero, -md.gravity)
        for b in range(1, md.nbody):
            p = md.body_parent[b]
            d = md.body_dadr[b]
            v = cvel[e, p]
            a = cacc[e, p]
            if md.body_jtype[b] == FREE:
                # translation dofs are fixed in the world (cdof_dot = 0); the rotation dofs turn
                # with the body at the velocity reached after the translation
                v = v + cdof[e, d] * qvel[e, d] + cdof[e, d + 1] * qvel[e, d + 1]
                v = v + cdof[e, d + 2] * qvel[e, d + 2]
                for k in range(3, 6):
                    a = a + sp.cross_motion(v, cdof[e, d + k]) * qvel[e, d + k]
                for k in range(3, 6):
                    v = v + cdof[e, d + k] * qvel[e, d + k]
            if md.body_jtype[b] == HINGE:
                a = a + sp.cross_motion(v, cdof[e, d]) * qvel[e, d]
                v = v + cdof[e, d] * qvel[e, d]
            cvel[e, b] = v
            cacc[e, b] = a

    @wp.kernel(module=module)
    def bias_forces(
        cin_i: wp.array2d(dtype=Mat33),  # (N, nbody)
        cin_h: wp.array2d(dtype=Vec3),
        cin_m: wp.array2d(dtype=Float),
        cdof: wp.array2d(dtype=Vec6),  # (N, nv)
        cvel: wp.array2d(dtype=Vec6),  # (N, nbody)
        cacc: wp.array2d(dtype=Vec6),  # (N, nbody)
        md: sp.ModelData,
        fbody: wp.array2d(dtype=Vec6),  # (N, nbody) net force on each body
        cfrc: wp.array2d(dtype=Vec6),  # (N, nbody) force transmitted by each body's joint
        bias: wp.array2d(dtype=Float),  # (N, nv) h(q, qd) = MuJoCo's qfrc_bias (N, N m)
    ):
        """Backward pass of RNEA: body forces summed over subtrees, projected on the dofs."""
        e = wp.tid()
        for b in range(1, md.nbody):
            v = cvel[e, b]
            f = sp.inertia_mul(cin_i[e, b], cin_h[e, b], cin_m[e, b], cacc[e, b])
            momentum = sp.inertia_mul(cin_i[e, b], cin_h[e, b], cin_m[e, b], v)
            fbody[e, b] = f + sp.cross_force(v, momentum)
        for b in range(1, md.nbody):
            f = fbody[e, b]
            for d in range(b + 1, md.body_subtree_end[b]):
                f = f + fbody[e, d]
            cfrc[e, b] = f
        for i in range(md.nv):
            bias[e, i] = wp.dot(cdof[e, i], cfrc[e, md.dof_body[i]])

    return SimpleNamespace(body_velocities=body_velocities, bias_forces=bias_forces)
