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

    return SimpleNamespace(forward_kinematics=forward_kinematics, com_quantities=com_quantities)
