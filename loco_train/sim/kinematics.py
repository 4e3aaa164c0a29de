"""Forward kinematics and the com-frame quantities: body poses, spatial inertias, dof motions."""

from types import SimpleNamespace

import warp as wp

from loco_train.sim.model import FREE, HINGE


def build(sp, module):
    """Kernels for one scalar type `sp` (spatial(Float))."""
    Float, Vec3, Vec6, Mat33, Quat = sp.Float, sp.Vec3, sp.Vec6, sp.Mat33, sp.Quat

    @wp.kernel(module=module)
    def forward_kinematics(
        qpos: wp.array2d(dtype=Float),  # (N, nq) MuJoCo order
        md: sp.ModelData,
        xpos: wp.array2d(dtype=Vec3),  # (N, nbody) body origins, world (m)
        xquat: wp.array2d(dtype=Quat),  # (N, nbody) body orientations, world
    ):
        """Body poses from generalised positions (MuJoCo's mj_kinematics for free/hinge trees)."""
        e = wp.tid()
        xpos[e, 0] = Vec3(Float(0.0), Float(0.0), Float(0.0))
        xquat[e, 0] = Quat(Float(0.0), Float(0.0), Float(0.0), Float(1.0))
        for b in range(1, md.nbody):
            p = md.body_parent[b]
            a = md.body_qadr[b]
            kind = md.body_jtype[b]
            pos = xpos[e, p] + wp.quat_rotate(xquat[e, p], md.body_pos[b])
            quat = xquat[e, p] * md.body_quat[b]
            if kind == HINGE:
                anchor = pos + wp.quat_rotate(quat, md.jnt_pos[b])
                quat = quat * sp.quat_axis_angle(md.jnt_axis[b], qpos[e, a] - md.qpos0[a])
                pos = anchor - wp.quat_rotate(quat, md.jnt_pos[b])
            if kind == FREE:
                pos = Vec3(qpos[e, a], qpos[e, a + 1], qpos[e, a + 2])
                quat = sp.quat_from_wxyz(
                    qpos[e, a + 3], qpos[e, a + 4], qpos[e, a + 5], qpos[e, a + 6]
                )
            xpos[e, b] = pos
            xquat[e, b] = quat

    @wp.kernel(module=module)
    def com_quantities(
        xpos: wp.array2d(dtype=Vec3),  # (N, nbody)
        xquat: wp.array2d(dtype=Quat),  # (N, nbody)
        md: sp.ModelData,
        mass_offset: wp.array(dtype=Float),  # (N,) kg added at each root body's centre of mass
        cin_i: wp.array2d(dtype=Mat33),  # (N, nbody) rotational inertia about the reference
        cin_h: wp.array2d(dtype=Vec3),  # (N, nbody) m * (com - reference)
        cin_m: wp.array2d(dtype=Float),  # (N, nbody) mass (kg)
        cdof: wp.array2d(dtype=Vec6),  # (N, nv) dof motion subspaces [axis; reference velocity]
    ):
        """Spatial inertias and dof motions about each tree's reference point (root origin)."""
        e = wp.tid()
        zero = Vec3(Float(0.0), Float(0.0), Float(0.0))
        for b in range(1, md.nbody):
            ref = xpos[e, md.body_root[b]]
            quat = xquat[e, b]
            m = md.body_mass[b]
            if md.body_parent[b] == 0:
                m = m + mass_offset[e]
            rot = wp.quat_to_matrix(quat * md.body_iquat[b])
            c = xpos[e, b] + wp.quat_rotate(quat, md.body_ipos[b]) - ref
            inertia = rot * wp.diag(md.body_inertia[b]) * wp.transpose(rot)
            eye = wp.identity(3, dtype=Float)
            cin_i[e, b] = inertia + m * (wp.dot(c, c) * eye - wp.outer(c, c))
            cin_h[e, b] = m * c
            cin_m[e, b] = m
            d = md.body_dadr[b]
            if md.body_jtype[b] == FREE:
                offset = ref - xpos[e, b]
                for k in range(3):
                    unit = Vec3(Float(0.0), Float(0.0), Float(0.0))
                    unit[k] = Float(1.0)
                    cdof[e, d + k] = sp.stack(zero, unit)
                    axis = wp.quat_rotate(quat, unit)
                    cdof[e, d + 3 + k] = sp.stack(axis, wp.cross(axis, offset))
            if md.body_jtype[b] == HINGE:
                axis = wp.quat_rotate(quat, md.jnt_axis[b])
                anchor = xpos[e, b] + wp.quat_rotate(quat, md.jnt_pos[b])
                cdof[e, d] = sp.stack(axis, wp.cross(axis, ref - anchor))

    @wp.kernel(module=module, enable_backward=False)
    def kinematics_adjoint(
        qpos: wp.array2d(dtype=Float),  # (N, nq)
        xpos: wp.array2d(dtype=Vec3),  # (N, nbody) forward values
        xquat: wp.array2d(dtype=Quat),  # (N, nbody)
        md: sp.ModelData,
        xpos_grad: wp.array2d(dtype=Vec3),  # (N, nbody) in; parents accumulate their children's
        xquat_grad: wp.array2d(dtype=Quat),  # (N, nbody) in; likewise
        qpos_grad: wp.array2d(dtype=Float),  # (N, nq) accumulated
    ):
        """Reverse of forward_kinematics, leaves first."""
        e = wp.tid()
        for r in range(1, md.nbody):
            b = md.nbody - r
            p = md.body_parent[b]
            a = md.body_qadr[b]
            kind = md.body_jtype[b]
            pb = xpos_grad[e, b]
            qb = xquat_grad[e, b]
            if kind == FREE:
                raw = Quat(qpos[e, a + 4], qpos[e, a + 5], qpos[e, a + 6], qpos[e, a + 3])
                length = wp.length(raw)
                rb = Quat(Float(0.0), Float(0.0), Float(0.0), Float(0.0))
                if length > Float(1.0e-6):
                    inv = Float(1.0) / length
                    rb = qb * inv - raw * (inv * inv * inv * wp.dot(raw, qb))
                for k in range(3):
                    qpos_grad[e, a + k] = qpos_grad[e, a + k] + pb[k]
                qpos_grad[e, a + 3] = qpos_grad[e, a + 3] + rb[3]
                qpos_grad[e, a + 4] = qpos_grad[e, a + 4] + rb[0]
                qpos_grad[e, a + 5] = qpos_grad[e, a + 5] + rb[1]
                qpos_grad[e, a + 6] = qpos_grad[e, a + 6] + rb[2]
            else:
                q1 = xquat[e, p] * md.body_quat[b]
                if kind == HINGE:
                    # anchor = pos1 + R(q1) j; q2 = q1 aa(theta); pos = anchor - R(q2) j
                    half = Float(0.5) * (qpos[e, a] - md.qpos0[a])
                    axis = md.jnt_axis[b]
                    aa = Quat(axis[0] * wp.sin(half), axis[1] * wp.sin(half),
                              axis[2] * wp.sin(half), wp.cos(half))  # fmt: skip
                    q2 = q1 * aa
                    q_r, x_r = sp.quat_rotate_adjoint(q2, md.jnt_pos[b], -pb)
                    q2b = qb + q_r
                    aab = sp.conjugate(q1) * q2b
                    thetab = Float(0.5) * (
                        wp.cos(half) * (aab[0] * axis[0] + aab[1] * axis[1] + aab[2] * axis[2])
                        - wp.sin(half) * aab[3]
                    )
                    qpos_grad[e, a] = qpos_grad[e, a] + thetab
                    q_a, x_a = sp.quat_rotate_adjoint(q1, md.jnt_pos[b], pb)
                    qb = q2b * sp.conjugate(aa) + q_a
                # pos1 = xpos[p] + R(xquat[p]) body_pos, q1 = xquat[p] body_quat
                q_p, x_p = sp.quat_rotate_adjoint(xquat[e, p], md.body_pos[b], pb)
                xpos_grad[e, p] = xpos_grad[e, p] + pb
                xquat_grad[e, p] = xquat_grad[e, p] + q_p + qb * sp.conjugate(md.body_quat[b])

    @wp.kernel(module=module, enable_backward=False)
    def com_adjoint(
        xpos: wp.array2d(dtype=Vec3),  # (N, nbody) forward values
        xquat: wp.array2d(dtype=Quat),  # (N, nbody)
        md: sp.ModelData,
        mass_offset: wp.array(dtype=Float),  # (N,)
        cin_i_grad: wp.array2d(dtype=Mat33),  # (N, nbody)
        cin_h_grad: wp.array2d(dtype=Vec3),
        cin_m_grad: wp.array2d(dtype=Float),
        cdof_grad: wp.array2d(dtype=Vec6),  # (N, nv)
        xpos_grad: wp.array2d(dtype=Vec3),  # (N, nbody) accumulated
        xquat_grad: wp.array2d(dtype=Quat),  # (N, nbody) accumulated
        mass_offset_grad: wp.array(dtype=Float),  # (N,) accumulated
    ):
        """Reverse of com_quantities, body by body."""
        e = wp.tid()
        for b in range(1, md.nbody):
            root = md.body_root[b]
            ref = xpos[e, root]
            quat = xquat[e, b]
            m = md.body_mass[b]
            if md.body_parent[b] == 0:
                m = m + mass_offset[e]
            pq = quat * md.body_iquat[b]
            rot = wp.quat_to_matrix(pq)
            c = xpos[e, b] + wp.quat_rotate(quat, md.body_ipos[b]) - ref
            ib = cin_i_grad[e, b]
            trace = ib[0, 0] + ib[1, 1] + ib[2, 2]
            # cin_i = R D R^T + m (c.c E - c c^T), cin_h = m c, cin_m = m
            mb = cin_m_grad[e, b] + wp.dot(cin_h_grad[e, b], c)
            mb = mb + wp.dot(c, c) * trace - wp.dot(c, ib * c)
            cb = m * cin_h_grad[e, b] + m * (Float(2.0) * trace * c - (ib + wp.transpose(ib)) * c)
            rb = (ib + wp.transpose(ib)) * rot * wp.diag(md.body_inertia[b])
            qb = sp.quat_to_matrix_adjoint(pq, rb) * sp.conjugate(md.body_iquat[b])
            q_c, x_c = sp.quat_rotate_adjoint(quat, md.body_ipos[b], cb)
            qb = qb + q_c
            if md.body_parent[b] == 0:
                mass_offset_grad[e] = mass_offset_grad[e] + mb
            xpos_grad[e, b] = xpos_grad[e, b] + cb
            xpos_grad[e, root] = xpos_grad[e, root] - cb
            d = md.body_dadr[b]
            if md.body_jtype[b] == FREE:
                offset = ref - xpos[e, b]
                ob = Vec3(Float(0.0), Float(0.0), Float(0.0))
                for k in range(3):
                    unit = Vec3(Float(0.0), Float(0.0), Float(0.0))
                    unit[k] = Float(1.0)
                    axis = wp.quat_rotate(quat, unit)
                    g = cdof_grad[e, d + 3 + k]
                    ab = sp.top(g) + wp.cross(offset, sp.bottom(g))
                    ob = ob + wp.cross(sp.bottom(g), axis)
                    q_a, x_a = sp.quat_rotate_adjoint(quat, unit, ab)
                    qb = qb + q_a
                xpos_grad[e, root] = xpos_grad[e, root] + ob
                xpos_grad[e, b] = xpos_grad[e, b] - ob
            if md.body_jtype[b] == HINGE:
                axis = wp.quat_rotate(quat, md.jnt_axis[b])
                anchor = xpos[e, b] + wp.quat_rotate(quat, md.jnt_pos[b])
                r = ref - anchor
                g = cdof_grad[e, d]
                ab = sp.top(g) + wp.cross(r, sp.bottom(g))
                rb2 = wp.cross(sp.bottom(g), axis)
                xpos_grad[e, root] = xpos_grad[e, root] + rb2
                xpos_grad[e, b] = xpos_grad[e, b] - rb2
                q_r, x_r = sp.quat_rotate_adjoint(quat, md.jnt_pos[b], -rb2)
                q_a, x_a = sp.quat_rotate_adjoint(quat, md.jnt_axis[b], ab)
                qb = qb + q_r + q_a
            xquat_grad[e, b] = xquat_grad[e, b] + qb

    return SimpleNamespace(
        forward_kinematics=forward_kinematics,
        com_quantities=com_quantities,
        kinematics_adjoint=kinematics_adjoint,
        com_adjoint=com_adjoint,
    )
