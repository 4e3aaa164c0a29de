"""Point contacts of spheres on the ground plane: distances, Jacobian, Delassus operator.

Each contact c has a frame (n, t1, t2) of the plane; its Jacobian row block J_c (3 x nv) maps
generalised velocity to the contact point's velocity in that frame. With H = L^T L (cholesky.py),
Y = L^-T J^T and the Delassus operator G = J H^-1 J^T = Y^T Y, never forming H^-1. J_c is non-zero
only on the dofs that move contact c (a chain from the root), and so is column c of Y: the
columns cost 36 multiply-adds of the 9 dofs of a leg's foot, not 153, and G's blocks 6 to 9 terms.
"""

from types import SimpleNamespace

import warp as wp

from loco_train.sim.model import SHAPE_BOX, SHAPE_CAPSULE, SHAPE_CYLINDER


def build(sp, module):
    """Kernels for one scalar type `sp`."""
    Float, Vec3, Vec6, Mat33, Quat = sp.Float, sp.Vec3, sp.Vec6, sp.Mat33, sp.Quat

    @wp.kernel(module=module)
    def contact_jacobian(
        xpos: wp.array2d(dtype=Vec3),  # (N, nbody)
        xquat: wp.array2d(dtype=Quat),  # (N, nbody)
        cdof: wp.array2d(dtype=Vec6),  # (N, nv)
        md: sp.ModelData,
        phi: wp.array2d(dtype=Float),  # (N, nc) signed distance sphere to plane (m)
        J: wp.array3d(dtype=Vec3),  # (N, nc, nv) [n; t1; t2] . d(point velocity)/d(qd)
    ):
        """Signed distances and contact Jacobians; entries of dofs not moving c stay zero."""
        e = wp.tid()
        n = md.ground_normal
        for c in range(md.nc):
            b = md.contact_body[c]
            center = xpos[e, b] + wp.quat_rotate(xquat[e, b], md.contact_pos[c])
            phi[e, c] = wp.dot(n, center - md.ground_point) - md.contact_radius[c]
            offset = center - md.contact_radius[c] * n - xpos[e, md.body_root[b]]
            for k in range(md.contact_ndof[c]):
                j = md.contact_dofs[c, k]
                v = sp.point_velocity(cdof[e, j], offset)
                J[e, c, j] = Vec3(wp.dot(n, v), wp.dot(md.ground_t1, v), wp.dot(md.ground_t2, v))

    @wp.kernel(module=module)
    def delassus_columns(
        L: wp.array3d(dtype=Float),  # (N, nv, nv) factor of H = L^T L
        J: wp.array3d(dtype=Vec3),  # (N, nc, nv)
        qvel: wp.array2d(dtype=Float),  # (N, nv) contact-free velocity
        phi: wp.array2d(dtype=Float),  # (N, nc) signed distances (m)
        reach: Float,  # distance beyond which a contact's PGS weight is 0 (m)
        md: sp.ModelData,
        SY: wp.array3d(dtype=Vec3),  # (N, nv, nc) scratch sums of the substitution
        Y: wp.array3d(dtype=Vec3),  # (N, nv, nc) L^-T J^T; 0 off c's dofs and out of reach
        b: wp.array2d(dtype=Vec3),  # (N, nc) contact velocity J qd without impulses (m/s)
    ):
        """Column c of Y = L^-T J^T over the dofs moving c, and the free contact velocity.

        A contact out of reach gets no impulse (PGS weight 0): its column is left 0.
        """
        e, c = wp.tid()
        nv = L.shape[1]
        nd = md.contact_ndof[c]
        zero = Vec3(Float(0.0), Float(0.0), Float(0.0))
        u = zero
        for kk in range(nd):
            j = md.contact_dofs[c, kk]
            u = u + J[e, c, j] * qvel[e, j]
        b[e, c] = u
        out = phi[e, c] > reach
        p = int(0)  # dofs not moving c (contact_dofs ascending) and contacts out of reach: 0
        for i in range(nv):
            if p < nd and md.contact_dofs[c, p] == i:
                p = p + 1
                if out:
                    SY[e, i, c] = zero
                    Y[e, i, c] = zero
            else:
                SY[e, i, c] = zero
                Y[e, i, c] = zero
        if not out:
            for r in range(nd):  # L^T y = J_c^T from the leaf; the later dofs are descendants
                kk = nd - 1 - r
                i = md.contact_dofs[c, kk]
                s = zero
                for q in range(kk + 1, nd):
                    m = md.contact_dofs[c, q]
                    s = s + L[e, m, i] * Y[e, m, c]
                SY[e, i, c] = s
                Y[e, i, c] = (J[e, c, i] - SY[e, i, c]) / L[e, i, i]

    @wp.kernel(module=module)
    def delassus_blocks(
        Y: wp.array3d(dtype=Vec3),  # (N, nv, nc) L^-T J^T
        phi: wp.array2d(dtype=Float),  # (N, nc) signed distances (m)
        reach: Float,  # distance beyond which a contact's PGS weight is 0 (m)
        md: sp.ModelData,
        G: wp.array3d(dtype=Mat33),  # (N, nc, nc) 3x3 blocks of J H^-1 J^T = Y^T Y
    ):
        """Delassus block (c, c2) = sum_i Y[i, c] Y[i, c2]^T; 0 where either is out of reach."""
        e, c, c2 = wp.tid()
        g = Mat33()
        if phi[e, c] <= reach and phi[e, c2] <= reach:
            for kk in range(md.contact_ndof[c]):  # Y[:, c] is 0 off these
                i = md.contact_dofs[c, kk]
                g = g + wp.outer(Y[e, i, c], Y[e, i, c2])
        G[e, c, c2] = g

    @wp.kernel(module=module)
    def contact_points(
        xpos: wp.array2d(dtype=Vec3),  # (N, nbody)
        xquat: wp.array2d(dtype=Quat),  # (N, nbody)
        cdof: wp.array2d(dtype=Vec6),  # (N, nv)
        qvel: wp.array2d(dtype=Float),  # (N, nv)
        md: sp.ModelData,
        pos: wp.array2d(dtype=Vec3),  # (N, nc) sphere centres, world (m)
        vel: wp.array2d(dtype=Vec3),  # (N, nc) sphere-centre velocities, world (m/s)
    ):
        """Positions and velocities of the contact spheres' centres (feet)."""
        e = wp.tid()
        for c in range(md.nc):
            b = md.contact_body[c]
            center = xpos[e, b] + wp.quat_rotate(xquat[e, b], md.contact_pos[c])
            offset = center - xpos[e, md.body_root[b]]
            v = Vec3(Float(0.0), Float(0.0), Float(0.0))
            for k in range(md.contact_ndof[c]):
                j = md.contact_dofs[c, k]
                v = v + sp.point_velocity(cdof[e, j], offset) * qvel[e, j]
            pos[e, c] = center
            vel[e, c] = v

    @wp.func
    def point_adjoint(
        xpos: wp.array2d(dtype=Vec3),
        xquat: wp.array2d(dtype=Quat),
        md: sp.ModelData,
        c: int,
        offset: Vec3,
        offset_grad: Vec3,
        center_grad: Vec3,
        xpos_grad: wp.array2d(dtype=Vec3),
        xquat_grad: wp.array2d(dtype=Quat),
        e: int,
    ):
        """Reverse of center = xpos[b] + R(xquat[b]) p_c and offset = center - xpos[root] + k."""
        b = md.contact_body[c]
        g = center_grad + offset_grad
        xpos_grad[e, md.body_root[b]] = xpos_grad[e, md.body_root[b]] - offset_grad
        xpos_grad[e, b] = xpos_grad[e, b] + g
        q_r, x_r = sp.quat_rotate_adjoint(xquat[e, b], md.contact_pos[c], g)
        xquat_grad[e, b] = xquat_grad[e, b] + q_r

    @wp.kernel(module=module, enable_backward=False)
    def contact_jacobian_adjoint(
        xpos: wp.array2d(dtype=Vec3),  # (N, nbody) forward values
        xquat: wp.array2d(dtype=Quat),  # (N, nbody)
        cdof: wp.array2d(dtype=Vec6),  # (N, nv)
        md: sp.ModelData,
        phi_grad: wp.array2d(dtype=Float),  # (N, nc)
        J_grad: wp.array3d(dtype=Vec3),  # (N, nc, nv)
        xpos_grad: wp.array2d(dtype=Vec3),  # (N, nbody) accumulated
        xquat_grad: wp.array2d(dtype=Quat),  # (N, nbody) accumulated
        cdof_grad: wp.array2d(dtype=Vec6),  # (N, nv) accumulated
    ):
        """Reverse of contact_jacobian (v = bottom + top x offset per dof, in the ground frame)."""
        e = wp.tid()
        n = md.ground_normal
        for c in range(md.nc):
            b = md.contact_body[c]
            center = xpos[e, b] + wp.quat_rotate(xquat[e, b], md.contact_pos[c])
            offset = center - md.contact_radius[c] * n - xpos[e, md.body_root[b]]
            ob = Vec3(Float(0.0), Float(0.0), Float(0.0))
            for k in range(md.contact_ndof[c]):
                j = md.contact_dofs[c, k]
                g = J_grad[e, c, j]
                vb = g[0] * n + g[1] * md.ground_t1 + g[2] * md.ground_t2
                cdof_grad[e, j] = cdof_grad[e, j] + sp.stack(wp.cross(offset, vb), vb)
                ob = ob + wp.cross(vb, sp.top(cdof[e, j]))
            point_adjoint(xpos, xquat, md, c, offset, ob, phi_grad[e, c] * n, xpos_grad,
                          xquat_grad, e)  # fmt: skip

    @wp.kernel(module=module, enable_backward=False)
    def contact_points_adjoint(
        xpos: wp.array2d(dtype=Vec3),  # (N, nbody) forward values
        xquat: wp.array2d(dtype=Quat),  # (N, nbody)
        cdof: wp.array2d(dtype=Vec6),  # (N, nv)
        qvel: wp.array2d(dtype=Float),  # (N, nv)
        md: sp.ModelData,
        pos_grad: wp.array2d(dtype=Vec3),  # (N, nc)
        vel_grad: wp.array2d(dtype=Vec3),  # (N, nc)
        xpos_grad: wp.array2d(dtype=Vec3),  # (N, nbody) accumulated
        xquat_grad: wp.array2d(dtype=Quat),  # (N, nbody) accumulated
        cdof_grad: wp.array2d(dtype=Vec6),  # (N, nv) accumulated
        qvel_grad: wp.array2d(dtype=Float),  # (N, nv) accumulated
    ):
        """Reverse of contact_points."""
        e = wp.tid()
        for c in range(md.nc):
            b = md.contact_body[c]
            center = xpos[e, b] + wp.quat_rotate(xquat[e, b], md.contact_pos[c])
            offset = center - xpos[e, md.body_root[b]]
            g = vel_grad[e, c]
            ob = Vec3(Float(0.0), Float(0.0), Float(0.0))
            for k in range(md.contact_ndof[c]):
                j = md.contact_dofs[c, k]
                v = sp.point_velocity(cdof[e, j], offset)
                qvel_grad[e, j] = qvel_grad[e, j] + wp.dot(v, g)
                vb = g * qvel[e, j]
                cdof_grad[e, j] = cdof_grad[e, j] + sp.stack(wp.cross(offset, vb), vb)
                ob = ob + wp.cross(vb, sp.top(cdof[e, j]))
            point_adjoint(xpos, xquat, md, c, offset, ob, pos_grad[e, c], xpos_grad, xquat_grad, e)

    @wp.kernel(module=module, enable_backward=False)
    def shape_clearance(
        xpos: wp.array2d(dtype=Vec3),  # (N, nbody)
        xquat: wp.array2d(dtype=Quat),  # (N, nbody)
        md: sp.ModelData,
        clearance: wp.array2d(dtype=Float),  # (N, nshape) lowest point above the plane (m)
    ):
        """Distance from each box/cylinder/capsule shape to the ground (negative: penetrating)."""
        e = wp.tid()
        n = md.ground_normal
        for s in range(md.ns):
            b = md.shape_body[s]
            kind = md.shape_type[s]
            center = xpos[e, b] + wp.quat_rotate(xquat[e, b], md.shape_pos[s])
            quat = xquat[e, b] * md.shape_quat[s]
            size = md.shape_size[s]
            height = wp.dot(n, center - md.ground_point)
            ax = wp.abs(wp.dot(n, wp.quat_rotate(quat, Vec3(Float(1.0), Float(0.0), Float(0.0)))))
            ay = wp.abs(wp.dot(n, wp.quat_rotate(quat, Vec3(Float(0.0), Float(1.0), Float(0.0)))))
            az = wp.abs(wp.dot(n, wp.quat_rotate(quat, Vec3(Float(0.0), Float(0.0), Float(1.0)))))
            if kind == SHAPE_BOX:
                height = height - ax * size[0] - ay * size[1] - az * size[2]
            if kind == SHAPE_CAPSULE:
                height = height - az * size[1] - size[0]
            if kind == SHAPE_CYLINDER:
                radial = wp.sqrt(wp.max(Float(1.0) - az * az, Float(0.0)))
                height = height - az * size[1] - radial * size[0]
            clearance[e, s] = height

    return SimpleNamespace(
        contact_jacobian=contact_jacobian,
        contact_jacobian_adjoint=contact_jacobian_adjoint,
        contact_points_adjoint=contact_points_adjoint,
        delassus_columns=delassus_columns,
        delassus_blocks=delassus_blocks,
        contact_points=contact_points,
        shape_clearance=shape_clearance,
    )
