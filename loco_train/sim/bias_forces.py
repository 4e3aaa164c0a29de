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

    @wp.kernel(module=module, enable_backward=False)
    def velocities_adjoint(
        cdof: wp.array2d(dtype=Vec6),  # (N, nv)
        qvel: wp.array2d(dtype=Float),  # (N, nv)
        cvel: wp.array2d(dtype=Vec6),  # (N, nbody) forward values
        md: sp.ModelData,
        cvel_grad: wp.array2d(dtype=Vec6),  # (N, nbody) in; parents accumulate their children's
        cacc_grad: wp.array2d(dtype=Vec6),  # (N, nbody) in; likewise
        cdof_grad: wp.array2d(dtype=Vec6),  # (N, nv) accumulated
        qvel_grad: wp.array2d(dtype=Float),  # (N, nv) accumulated
    ):
        """Reverse of body_velocities, leaves first (a body's velocity is its parent's plus)."""
        e = wp.tid()
        for r in range(1, md.nbody):
            b = md.nbody - r
            p = md.body_parent[b]
            d = md.body_dadr[b]
            vb = cvel_grad[e, b]
            ab = cacc_grad[e, b]
            v = cvel[e, p]
            if md.body_jtype[b] == FREE:
                for k in range(3):
                    v = v + cdof[e, d + k] * qvel[e, d + k]
                for k in range(3, 6):  # v_b = v1 + sum cdof_k qd_k
                    cdof_grad[e, d + k] = cdof_grad[e, d + k] + vb * qvel[e, d + k]
                    qvel_grad[e, d + k] = qvel_grad[e, d + k] + wp.dot(vb, cdof[e, d + k])
                for k in range(3, 6):  # a_b = a_p + sum cross_motion(v1, cdof_k) qd_k
                    x = cdof[e, d + k]
                    qvel_grad[e, d + k] = qvel_grad[e, d + k] + wp.dot(ab, sp.cross_motion(v, x))
                    v_bar, x_bar = sp.cross_motion_adjoint(v, x, ab * qvel[e, d + k])
                    vb = vb + v_bar
                    cdof_grad[e, d + k] = cdof_grad[e, d + k] + x_bar
                for k in range(3):  # v1 = v_p + sum cdof_k qd_k
                    cdof_grad[e, d + k] = cdof_grad[e, d + k] + vb * qvel[e, d + k]
                    qvel_grad[e, d + k] = qvel_grad[e, d + k] + wp.dot(vb, cdof[e, d + k])
            if md.body_jtype[b] == HINGE:
                x = cdof[e, d]
                s = qvel[e, d]
                v_bar, x_bar = sp.cross_motion_adjoint(v, x, ab * s)
                sb = wp.dot(vb, x) + wp.dot(ab, sp.cross_motion(v, x))
                qvel_grad[e, d] = qvel_grad[e, d] + sb
                cdof_grad[e, d] = cdof_grad[e, d] + vb * s + x_bar
                vb = vb + v_bar
            cvel_grad[e, p] = cvel_grad[e, p] + vb
            cacc_grad[e, p] = cacc_grad[e, p] + ab

    @wp.kernel(module=module, enable_backward=False)
    def bias_adjoint(
        cin_i: wp.array2d(dtype=Mat33),  # (N, nbody) forward values
        cin_h: wp.array2d(dtype=Vec3),
        cin_m: wp.array2d(dtype=Float),
        cdof: wp.array2d(dtype=Vec6),  # (N, nv)
        cvel: wp.array2d(dtype=Vec6),  # (N, nbody)
        cacc: wp.array2d(dtype=Vec6),  # (N, nbody)
        cfrc: wp.array2d(dtype=Vec6),  # (N, nbody)
        bias_grad: wp.array2d(dtype=Float),  # (N, nv)
        md: sp.ModelData,
        cfrc_grad: wp.array2d(dtype=Vec6),  # (N, nbody) zero on entry; used as work space
        cin_i_grad: wp.array2d(dtype=Mat33),  # (N, nbody) accumulated
        cin_h_grad: wp.array2d(dtype=Vec3),
        cin_m_grad: wp.array2d(dtype=Float),
        cdof_grad: wp.array2d(dtype=Vec6),  # (N, nv) accumulated
        cvel_grad: wp.array2d(dtype=Vec6),  # (N, nbody) accumulated
        cacc_grad: wp.array2d(dtype=Vec6),  # (N, nbody) accumulated
    ):
        """Reverse of bias_forces: dof projections, subtree sums, then each body's net force."""
        e = wp.tid()
        for i in range(md.nv):
            b = md.dof_body[i]
            cfrc_grad[e, b] = cfrc_grad[e, b] + bias_grad[e, i] * cdof[e, i]
            cdof_grad[e, i] = cdof_grad[e, i] + bias_grad[e, i] * cfrc[e, b]
        for b in range(1, md.nbody):
            p = md.body_parent[b]
            if p > 0:  # fbody_bar[d] = sum of cfrc_bar over d and its ancestors
                cfrc_grad[e, b] = cfrc_grad[e, b] + cfrc_grad[e, p]
            fb = cfrc_grad[e, b]
            inertia = cin_i[e, b]
            h = cin_h[e, b]
            m = cin_m[e, b]
            v = cvel[e, b]
            w = sp.top(v)
            u = sp.bottom(v)
            # fbody = M a + v x* (M v), v x* p = [w x p_t + u x p_f; w x p_f]
            p_mom = sp.inertia_mul(inertia, h, m, v)
            pt = sp.top(p_mom)
            pf = sp.bottom(p_mom)
            gt = sp.top(fb)
            gf = sp.bottom(fb)
            vb = sp.stack(wp.cross(pt, gt) + wp.cross(pf, gf), wp.cross(pf, gt))
            pb = sp.stack(wp.cross(gt, w), wp.cross(gt, u) + wp.cross(gf, w))
            ab, i_a, h_a, m_a = sp.inertia_mul_adjoint(inertia, h, m, cacc[e, b], fb)
            vb2, i_v, h_v, m_v = sp.inertia_mul_adjoint(inertia, h, m, v, pb)
            cacc_grad[e, b] = cacc_grad[e, b] + ab
            cvel_grad[e, b] = cvel_grad[e, b] + vb + vb2
            cin_i_grad[e, b] = cin_i_grad[e, b] + i_a + i_v
            cin_h_grad[e, b] = cin_h_grad[e, b] + h_a + h_v
            cin_m_grad[e, b] = cin_m_grad[e, b] + m_a + m_v

    return SimpleNamespace(
        body_velocities=body_velocities,
        bias_forces=bias_forces,
        velocities_adjoint=velocities_adjoint,
        bias_adjoint=bias_adjoint,
    )
