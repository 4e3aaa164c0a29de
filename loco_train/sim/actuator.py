"""PD drives with joint friction, damping and a command delay; the net force; their reverse.

Drive torque of actuator u (dof j) in a substep, at the midpoint positions and the substep's
starting velocities:
    tau = clip(kp (q*_d - q) - kd qd + tau_ff, -tau_max, tau_max)
    f_j = tau - h_j - damping qd - friction tanh(qd / v) + applied_j + contact_j
    v = max(v_eps, 2 dt friction / (I_u + armature))
where q*_d is the delayed joint target and I_u the joint's effective inertia at the model's
qpos0: the friction's slope friction / v stays below (I_u + armature) / (2 dt), so the explicit
step never makes it chatter around zero velocity.

The target of control step n is T_n; previous holds T_{n-1}, T_{n-2}. Substep k of n
(physics step dt, S substeps) sees the command delayed by `delay` s, by linear interpolation
between physics-step samples (MuJoCo's actuator history with linear interpolation): with
delay = (m + f) dt, m an integer and 0 <= f < 1,
    q*_d = (1 - f) u(k - m) + f u(k - m - 1),   u(i) = T_{n - slot(i)}
where slot(i) = 0 for i >= 0 and ceil(-i / S) otherwise (at most 2: delays up to two control
steps). For a delay below one substep this is the fraction of the substep before t0 + delay on
the previous target and the rest on the new one.
"""

from types import SimpleNamespace

import warp as wp

HISTORY = 2
"""Previous control steps' targets a control step reads (delays up to HISTORY control steps)."""


def build(sp, module):
    """Kernels for one scalar type `sp`."""
    Float = sp.Float

    @wp.func
    def history_slot(i: int, substeps: int):
        """Which target substep offset i (from this control step's start) falls in: 0, 1, 2."""
        if i >= 0:
            return 0
        return wp.min((substeps - 1 - i) // substeps, 2)

    @wp.func
    def delay_blend(delay: Float, k: int, substeps: int, dt: Float):
        """(f, slot of u(k - m), slot of u(k - m - 1)) for delay = (m + f) dt at substep k."""
        x = delay / dt
        m = int(wp.floor(x))
        f = x - Float(m)
        return f, history_slot(k - m, substeps), history_slot(k - m - 1, substeps)

    @wp.func
    def history_value(
        target: wp.array2d(dtype=Float),
        previous: wp.array3d(dtype=Float),
        e: int,
        u: int,
        slot: int,
    ):
        """T_{n - slot} of actuator u."""
        if slot == 0:
            return target[e, u]
        return previous[e, slot - 1, u]

    @wp.func
    def history_add(
        target_grad: wp.array2d(dtype=Float),
        previous_grad: wp.array3d(dtype=Float),
        e: int,
        u: int,
        slot: int,
        value: Float,
    ):
        """Accumulate value into the gradient of T_{n - slot} of actuator u."""
        if slot == 0:
            target_grad[e, u] = target_grad[e, u] + value
        else:
            previous_grad[e, slot - 1, u] = previous_grad[e, slot - 1, u] + value

    @wp.kernel(module=module)
    def pd_torque(
        qpos: wp.array2d(dtype=Float),  # (N, nq) midpoint positions
        qvel: wp.array2d(dtype=Float),  # (N, nv)
        target: wp.array2d(dtype=Float),  # (N, nu) this control step's targets T_n (rad)
        previous: wp.array3d(dtype=Float),  # (N, HISTORY, nu) T_{n-1}, T_{n-2} (rad)
        tau_ff: wp.array2d(dtype=Float),  # (N, nu) feed-forward torque (N m), not delayed
        kp: wp.array2d(dtype=Float),  # (N, nu) N m/rad
        kd: wp.array2d(dtype=Float),  # (N, nu) N m s/rad
        tau_max: wp.array2d(dtype=Float),  # (N, nu) N m
        delay: wp.array(dtype=Float),  # (N,) command delay (s)
        k: int,  # substep index in the control step
        substeps: int,  # substeps per control step
        dt: Float,  # physics step (s)
        md: sp.ModelData,
        tau: wp.array2d(dtype=Float),  # (N, nu) N m
    ):
        """Tau = clip(kp (q*_d - q) - kd qd + tau_ff, -tau_max, tau_max), q*_d delayed."""
        e = wp.tid()
        delayed = delay[e] > Float(0.0)  # without a delay the history is not read
        f, ha, hb = delay_blend(delay[e], k, substeps, dt)
        for u in range(md.nu):
            q = qpos[e, md.act_qadr[u]]
            qd = qvel[e, md.act_dof[u]]
            goal = target[e, u]
            if delayed:
                goal = (Float(1.0) - f) * history_value(target, previous, e, u, ha)
                goal = goal + f * history_value(target, previous, e, u, hb)
            raw = kp[e, u] * (goal - q) - kd[e, u] * qd + tau_ff[e, u]
            tau[e, u] = wp.clamp(raw, -tau_max[e, u], tau_max[e, u])

    @wp.kernel(module=module)
    def net_force(
        tau: wp.array2d(dtype=Float),  # (N, nu)
        bias: wp.array2d(dtype=Float),  # (N, nv) h(q, qd)
        qvel: wp.array2d(dtype=Float),  # (N, nv)
        damping: wp.array2d(dtype=Float),  # (N, nu) driven joints' viscous damping (N m s/rad)
        friction: wp.array2d(dtype=Float),  # (N, nu) driven joints' Coulomb friction (N m)
        armature: wp.array2d(dtype=Float),  # (N, nu) kg m^2
        inertia: wp.array(dtype=Float),  # (nu,) joints' effective inertia at qpos0 (kg m^2)
        v_eps: Float,  # least friction smoothing velocity (rad/s)
        dt: Float,  # physics step (s)
        md: sp.ModelData,
        applied: wp.array2d(dtype=Float),  # (N, nv) external generalised force
        f_contact: wp.array2d(dtype=Float),  # (N, nv) penalty contact force (soft model) or 0
        f: wp.array2d(dtype=Float),  # (N, nv) tau - h - damping qd - friction + applied + contact
    ):
        """Net generalised force driving the free (contact-less) velocity update.

        Driven dofs take their damping and friction from the per-env arrays, the others the
        model's dof_damping (and no friction).
        """
        e = wp.tid()
        for i in range(md.nv):
            v = qvel[e, i]
            u = md.dof_act[i]
            if u >= 0:
                value = applied[e, i] + f_contact[e, i] - bias[e, i] - damping[e, u] * v
                fr = friction[e, u]
                if fr != Float(0.0):  # frictionless joints skip the tanh
                    smooth = wp.max(v_eps, Float(2.0) * dt * fr / (inertia[u] + armature[e, u]))
                    value = value - fr * wp.tanh(v / smooth)
                f[e, i] = value + tau[e, u]
            else:
                f[e, i] = applied[e, i] + f_contact[e, i] - bias[e, i] - md.dof_damping[i] * v

    @wp.struct
    class Drive:
        """A substep's PD drive inputs, and the gradients drive_adjoint accumulates into."""

        qpos: wp.array2d(dtype=Float)  # (N, nq) midpoint positions
        qvel: wp.array2d(dtype=Float)  # (N, nv)
        target: wp.array2d(dtype=Float)  # (N, nu) T_n (rad)
        previous: wp.array3d(dtype=Float)  # (N, HISTORY, nu) T_{n-1}, T_{n-2} (rad)
        tau_ff: wp.array2d(dtype=Float)  # (N, nu) N m
        kp: wp.array2d(dtype=Float)  # (N, nu)
        kd: wp.array2d(dtype=Float)  # (N, nu)
        tau_max: wp.array2d(dtype=Float)  # (N, nu)
        damping: wp.array2d(dtype=Float)  # (N, nu) N m s/rad
        friction: wp.array2d(dtype=Float)  # (N, nu) N m
        armature: wp.array2d(dtype=Float)  # (N, nu) kg m^2
        inertia: wp.array(dtype=Float)  # (nu,) effective inertia at qpos0 (kg m^2), constant
        delay: wp.array(dtype=Float)  # (N,) s
        k: int  # substep index in the control step
        substeps: int
        dt: Float  # physics step (s)
        v_eps: Float  # least friction smoothing velocity (rad/s)
        qpos_grad: wp.array2d(dtype=Float)
        qvel_grad: wp.array2d(dtype=Float)
        target_grad: wp.array2d(dtype=Float)
        previous_grad: wp.array3d(dtype=Float)
        tau_ff_grad: wp.array2d(dtype=Float)
        kp_grad: wp.array2d(dtype=Float)
        kd_grad: wp.array2d(dtype=Float)
        tau_max_grad: wp.array2d(dtype=Float)
        damping_grad: wp.array2d(dtype=Float)
        friction_grad: wp.array2d(dtype=Float)
        armature_grad: wp.array2d(dtype=Float)
        delay_grad: wp.array(dtype=Float)
        bias_grad: wp.array2d(dtype=Float)  # (N, nv)
        applied_grad: wp.array2d(dtype=Float)  # (N, nv)
        f_contact_grad: wp.array2d(dtype=Float)  # (N, nv)

    @wp.func
    def drive_adjoint(d: Drive, md: sp.ModelData, f_grad: wp.array2d(dtype=Float), e: int):
        """Reverse of net_force and pd_torque from the net force's gradient f_grad[e].

        Clamping routes the gradient as Warp's clamp(x, a, b) = min(max(a, x), b) does. The
        delay's gradient is that of the blend's weight f (piecewise linear in the delay). As the
        forward skips them, a friction of exactly 0 and a delay of exactly 0 get no gradient.
        """
        for i in range(md.nv):
            g = f_grad[e, i]
            d.applied_grad[e, i] = d.applied_grad[e, i] + g
            d.f_contact_grad[e, i] = d.f_contact_grad[e, i] + g
            d.bias_grad[e, i] = d.bias_grad[e, i] - g
            u = md.dof_act[i]
            if u >= 0:
                v = d.qvel[e, i]
                d.qvel_grad[e, i] = d.qvel_grad[e, i] - d.damping[e, u] * g
                d.damping_grad[e, u] = d.damping_grad[e, u] - g * v
                fr = d.friction[e, u]
                if fr == Float(0.0):
                    continue
                inertia = d.inertia[u] + d.armature[e, u]
                cap = Float(2.0) * d.dt * fr / inertia
                smooth = d.v_eps
                if not d.v_eps > cap:  # as Warp's max routes its gradient
                    smooth = cap
                t = wp.tanh(v / smooth)
                s = Float(1.0) - t * t
                d.qvel_grad[e, i] = d.qvel_grad[e, i] - g * fr * s / smooth
                g_fr = t  # d(fr tanh(v / smooth)) / d fr at fixed smooth
                if not d.v_eps > cap:  # smooth = cap: it moves with friction and armature
                    g_smooth = -fr * s * v / (smooth * smooth)
                    g_fr = g_fr + g_smooth * cap / fr
                    d.armature_grad[e, u] = d.armature_grad[e, u] + g * g_smooth * cap / inertia
                d.friction_grad[e, u] = d.friction_grad[e, u] - g * g_fr
            else:
                d.qvel_grad[e, i] = d.qvel_grad[e, i] - md.dof_damping[i] * g
        delayed = d.delay[e] > Float(0.0)
        f, ha, hb = delay_blend(d.delay[e], d.k, d.substeps, d.dt)
        for u in range(md.nu):
            j = md.act_dof[u]
            a = md.act_qadr[u]
            g = f_grad[e, j]  # the torque's gradient
            lim = d.tau_max[e, u]
            va = d.target[e, u]
            vb = va
            goal = va
            if delayed:
                va = history_value(d.target, d.previous, e, u, ha)
                vb = history_value(d.target, d.previous, e, u, hb)
                goal = (Float(1.0) - f) * va + f * vb
            err = goal - d.qpos[e, a]
            raw = d.kp[e, u] * err - d.kd[e, u] * d.qvel[e, j] + d.tau_ff[e, u]
            if wp.max(-lim, raw) < lim:
                if -lim > raw:
                    d.tau_max_grad[e, u] = d.tau_max_grad[e, u] - g
                else:
                    gk = g * d.kp[e, u]
                    d.kp_grad[e, u] = d.kp_grad[e, u] + g * err
                    if delayed:
                        history_add(
                            d.target_grad, d.previous_grad, e, u, ha, gk * (Float(1.0) - f)
                        )
                        history_add(d.target_grad, d.previous_grad, e, u, hb, gk * f)
                        d.delay_grad[e] = d.delay_grad[e] + gk * (vb - va) / d.dt
                    else:
                        d.target_grad[e, u] = d.target_grad[e, u] + gk
                    d.qpos_grad[e, a] = d.qpos_grad[e, a] - gk
                    d.kd_grad[e, u] = d.kd_grad[e, u] - g * d.qvel[e, j]
                    d.qvel_grad[e, j] = d.qvel_grad[e, j] - g * d.kd[e, u]
                    d.tau_ff_grad[e, u] = d.tau_ff_grad[e, u] + g
            else:
                d.tau_max_grad[e, u] = d.tau_max_grad[e, u] + g

    return SimpleNamespace(
        pd_torque=pd_torque, net_force=net_force, Drive=Drive, drive_adjoint=drive_adjoint
    )
