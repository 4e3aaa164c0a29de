"""Scalar-typed Warp types and spatial-algebra helpers shared by the kernels.

Spatial vectors are MuJoCo's: 6-vectors [angular; linear] expressed in world axes at a reference
point (the origin of the body tree's root body), motion [w; u] and force [torque; force].
A body's spatial inertia about that point is (I, h, m): I (3x3) rotational inertia about the
point, h = m c (c: centre of mass relative to the point), m the mass.

Kernels loop over the model with dynamic loops (one compiled module per scalar type, whatever the
model). Warp's adjoint replays a dynamic loop body without its inner loops, so every kernel keeps
this rule: a value accumulated across loop iterations is only summed and stored; any nonlinear use
reads it back from the array it was stored in.
"""

import functools
from types import SimpleNamespace

import warp as wp


@functools.lru_cache(maxsize=None)
def spatial(Float):
    """Types and @wp.func helpers for one scalar type (wp.float32 or wp.float64)."""
    Vec3 = wp.types.vector(3, Float)
    Vec6 = wp.types.vector(6, Float)
    Mat33 = wp.types.matrix((3, 3), Float)
    Quat = wp.types.quaternion(Float)

    @wp.func
    def top(v: Vec6):
        """Angular part of a spatial vector."""
        return Vec3(v[0], v[1], v[2])

    @wp.func
    def bottom(v: Vec6):
        """Linear part of a spatial vector."""
        return Vec3(v[3], v[4], v[5])

    @wp.func
    def stack(a: Vec3, b: Vec3):
        """Spatial vector [a; b]."""
        return Vec6(a[0], a[1], a[2], b[0], b[1], b[2])

    @wp.func
    def inertia_mul(inertia: Mat33, h: Vec3, m: Float, v: Vec6):
        """Spatial inertia times motion: [I w + h x u; m u + w x h]."""
        w = top(v)
        u = bottom(v)
        return stack(inertia * w + wp.cross(h, u), m * u + wp.cross(w, h))

    @wp.func
    def inertia_mul_adjoint(inertia: Mat33, h: Vec3, m: Float, v: Vec6, fb: Vec6):
        """Reverse of f = inertia_mul(inertia, h, m, v) for f_bar = fb.

        Returns (v_bar, I_bar, h_bar, m_bar).
        """
        w = top(v)
        u = bottom(v)
        ft = top(fb)
        ff = bottom(fb)
        vb = stack(wp.transpose(inertia) * ft + wp.cross(h, ff), wp.cross(ft, h) + m * ff)
        return vb, wp.outer(ft, w), wp.cross(u, ft) + wp.cross(ff, w), wp.dot(ff, u)

    @wp.func
    def cross_motion(v: Vec6, a: Vec6):
        """Motion cross product v x a = [w x a_w; w x a_u + u x a_w]."""
        w = top(v)
        return stack(wp.cross(w, top(a)), wp.cross(w, bottom(a)) + wp.cross(bottom(v), top(a)))

    @wp.func
    def cross_motion_adjoint(v: Vec6, a: Vec6, gb: Vec6):
        """Reverse of g = cross_motion(v, a) for g_bar = gb: (v_bar, a_bar)."""
        w = top(v)
        u = bottom(v)
        aw = top(a)
        au = bottom(a)
        gt = top(gb)
        gf = bottom(gb)
        vb = stack(wp.cross(aw, gt) + wp.cross(au, gf), wp.cross(aw, gf))
        ab = stack(wp.cross(gt, w) + wp.cross(gf, u), wp.cross(gf, w))
        return vb, ab

    @wp.func
    def cross_force(v: Vec6, f: Vec6):
        """Force cross product v x* f = [w x f_t + u x f_f; w x f_f]."""
        w = top(v)
        return stack(wp.cross(w, top(f)) + wp.cross(bottom(v), bottom(f)), wp.cross(w, bottom(f)))

    @wp.func
    def point_velocity(cdof: Vec6, offset: Vec3):
        """World velocity of the point at reference + offset per unit motion cdof (m/s)."""
        return bottom(cdof) + wp.cross(top(cdof), offset)

    @wp.func
    def quat_rotate_adjoint(q: Quat, x: Vec3, g: Vec3):
        """Reverse of wp.quat_rotate(q, x) = x (2w^2 - 1) + 2 q_v (q_v . x) + 2w (q_v x x).

        Returns (q_bar, x_bar) for out_bar = g, differentiating that formula as written (so also
        off the unit sphere, like Warp's generated adjoint).
        """
        qv = Vec3(q[0], q[1], q[2])
        w = q[3]
        two = Float(2.0)
        c = two * w * w - Float(1.0)
        qg = wp.dot(qv, g)
        xb = c * g + two * qg * qv + two * w * wp.cross(g, qv)
        vb = two * wp.dot(qv, x) * g + two * qg * x + two * w * wp.cross(x, g)
        wb = Float(4.0) * w * wp.dot(x, g) + two * wp.dot(wp.cross(qv, x), g)
        return Quat(vb[0], vb[1], vb[2], wb), xb

    @wp.func
    def quat_to_matrix_adjoint(q: Quat, rb: Mat33):
        """Reverse of wp.quat_to_matrix(q) (columns quat_rotate(q, e_k)) for R_bar = rb."""
        zero = Float(0.0)
        one = Float(1.0)
        q0, x0 = quat_rotate_adjoint(q, Vec3(one, zero, zero), Vec3(rb[0, 0], rb[1, 0], rb[2, 0]))
        q1, x1 = quat_rotate_adjoint(q, Vec3(zero, one, zero), Vec3(rb[0, 1], rb[1, 1], rb[2, 1]))
        q2, x2 = quat_rotate_adjoint(q, Vec3(zero, zero, one), Vec3(rb[0, 2], rb[1, 2], rb[2, 2]))
        return q0 + q1 + q2

    @wp.func
    def conjugate(q: Quat):
        """q* (the adjoint of a product a b is a_bar = out_bar b*, b_bar = a* out_bar)."""
        return Quat(-q[0], -q[1], -q[2], q[3])

    @wp.func
    def quat_from_wxyz(w: Float, x: Float, y: Float, z: Float):
        """Warp quaternion from MuJoCo's w-x-y-z components, normalised."""
        return wp.normalize(Quat(x, y, z, w))

    @wp.func
    def quat_axis_angle(axis: Vec3, angle: Float):
        """Rotation of angle (rad) about a unit axis."""
        s = wp.sin(angle * Float(0.5))
        return Quat(axis[0] * s, axis[1] * s, axis[2] * s, wp.cos(angle * Float(0.5)))

    @wp.func
    def quat_exp(half: Vec3):
        """Unit quaternion exp([0, half]): rotation by 2 |half| about half, smooth at zero."""
        a2 = wp.dot(half, half)
        c = Float(1.0) - a2 * Float(0.5)
        s = Float(1.0) - a2 / Float(6.0)
        if a2 > Float(1.0e-8):
            a = wp.sqrt(a2)
            c = wp.cos(a)
            s = wp.sin(a) / a
        return Quat(half[0] * s, half[1] * s, half[2] * s, c)

    @wp.func
    def quat_exp_adjoint(half: Vec3, g: Quat):
        """Reverse of quat_exp: half_bar for out_bar = g, on the branch quat_exp takes."""
        a2 = wp.dot(half, half)
        s = Float(1.0) - a2 / Float(6.0)
        dc = Float(-0.5)  # d cos / d a2, d (sin a / a) / d a2 (series below 1e-8)
        ds = Float(-1.0) / Float(6.0)
        if a2 > Float(1.0e-8):
            a = wp.sqrt(a2)
            s = wp.sin(a) / a
            dc = -wp.sin(a) / (Float(2.0) * a)
            ds = (a * wp.cos(a) - wp.sin(a)) / (Float(2.0) * a2 * a)
        gv = Vec3(g[0], g[1], g[2])
        a2_bar = wp.dot(gv, half) * ds + g[3] * dc
        return gv * s + half * (Float(2.0) * a2_bar)

    @wp.struct
    class ModelData:
        """Constant model arrays on the device (see ModelSpec.arrays for shapes and units)."""

        body_pos: wp.array(dtype=Vec3)
        body_quat: wp.array(dtype=Quat)
        body_ipos: wp.array(dtype=Vec3)
        body_iquat: wp.array(dtype=Quat)
        body_mass: wp.array(dtype=Float)
        body_inertia: wp.array(dtype=Vec3)
        jnt_axis: wp.array(dtype=Vec3)
        jnt_pos: wp.array(dtype=Vec3)
        qpos0: wp.array(dtype=Float)
        dof_armature: wp.array(dtype=Float)
        dof_damping: wp.array(dtype=Float)
        contact_pos: wp.array(dtype=Vec3)
        contact_radius: wp.array(dtype=Float)
        shape_pos: wp.array(dtype=Vec3)
        shape_quat: wp.array(dtype=Quat)
        shape_size: wp.array(dtype=Vec3)
        ground_normal: Vec3
        ground_point: Vec3
        ground_t1: Vec3
        ground_t2: Vec3
        gravity: Vec3
        # topology (see ModelSpec): sizes, then int arrays indexed by body, dof, actuator, contact
        nbody: int
        nv: int
        nu: int
        nc: int
        ns: int
        body_parent: wp.array(dtype=int)
        body_jtype: wp.array(dtype=int)
        body_qadr: wp.array(dtype=int)
        body_dadr: wp.array(dtype=int)
        body_root: wp.array(dtype=int)
        body_subtree_end: wp.array(dtype=int)
        dof_body: wp.array(dtype=int)
        dof_act: wp.array(dtype=int)
        dof_nanc: wp.array(dtype=int)
        dof_anc: wp.array2d(dtype=int)
        dof_ndesc: wp.array(dtype=int)
        dof_desc: wp.array2d(dtype=int)
        act_dof: wp.array(dtype=int)
        act_qadr: wp.array(dtype=int)
        contact_body: wp.array(dtype=int)
        contact_ndof: wp.array(dtype=int)
        contact_dofs: wp.array2d(dtype=int)
        shape_body: wp.array(dtype=int)
        shape_type: wp.array(dtype=int)

    return SimpleNamespace(**locals())
