"""PD actuators and the net generalised force of the velocity update, and their reverse."""

from types import SimpleNamespace

import warp as wp


def build(sp, module):
    """Kernels for one scalar type `sp`."""
    Float = sp.Float

    @wp.kernel(module=module)
    def pd_torque(
        qpos: wp.array2d(dtype=Float),  # (N, nq) midpoint positions
        qvel: wp.array2d(dtype=Float),  # (N, nv)
        target: wp.array2d(dtype=Float),  # (N, nu) joint position targets q* (rad)
        tau_ff: wp.array2d(dtype=Float),  # (N, nu) feed-forward torque (N m)
        kp: wp.array2d(dtype=Float),  # (N, nu) N m/rad
        kd: wp.array2d(dtype=Float),  # (N, nu) N m s/rad
        tau_max: wp.array2d(dtype=Float),  # (N, nu) N m
        md: sp.ModelData,
        tau: wp.array2d(dtype=Float),  # (N, nu) N m
    ):
        """Tau = clip(kp (q* - q) - kd qd + tau_ff, -tau_max, tau_max)."""
        e = wp.tid()
        for u in range(md.nu):
            q = qpos[e, md.act_qadr[u]]
            qd = qvel[e, md.act_dof[u]]
            raw = kp[e, u] * (target[e, u] - q) - kd[e, u] * qd + tau_ff[e, u]
            tau[e, u] = wp.clamp(raw, -tau_max[e, u], tau_max[e, u])

    @wp.kernel(module=module)
    def net_force(
        tau: wp.array2d(dtype=Float),  # (N, nu)
        bias: wp.array2d(dtype=Float),  # (N, nv) h(q, qd)
        qvel: wp.array2d(dtype=Float),  # (N, nv)
        md: sp.ModelData,
        applied: wp.array2d(dtype=Float),  # (N, nv) external generalised force
        f_contact: wp.array2d(dtype=Float),  # (N, nv) penalty contact force (soft model) or 0
        f: wp.array2d(dtype=Float),  # (N, nv) tau - h - damping qd + applied + contact
    ):
        """Net generalised force driving the free (contact-less) velocity update."""
        e = wp.tid()
        for i in range(md.nv):
            value = applied[e, i] + f_contact[e, i] - bias[e, i] - md.dof_damping[i] * qvel[e, i]
            u = md.dof_act[i]
            if u >= 0:
                value = value + tau[e, u]
            f[e, i] = value

    @wp.struct
    class Drive:
        """A substep's PD drive inputs, and the gradients drive_adjoint accumulates into."""

        qpos: wp.array2d(dtype=Float)  # (N, nq) midpoint positions
        qvel: wp.array2d(dtype=Float)  # (N, nv)
        target: wp.array2d(dtype=Float)  # (N, nu) q* (rad)
        tau_ff: wp.array2d(dtype=Float)  # (N, nu) N m
        kp: wp.array2d(dtype=Float)  # (N, nu)
        kd: wp.array2d(dtype=Float)  # (N, nu)
        tau_max: wp.array2d(dtype=Float)  # (N, nu)
        qpos_grad: wp.array2d(dtype=Float)
        qvel_grad: wp.array2d(dtype=Float)
        target_grad: wp.array2d(dtype=Float)
        tau_ff_grad: wp.array2d(dtype=Float)
        kp_grad: wp.array2d(dtype=Float)
        kd_grad: wp.array2d(dtype=Float)
        tau_max_grad: wp.array2d(dtype=Float)
        bias_grad: wp.array2d(dtype=Float)  # (N, nv)
        applied_grad: wp.array2d(dtype=Float)  # (N, nv)
        f_contact_grad: wp.array2d(dtype=Float)  # (N, nv)

    @wp.func
    def drive_adjoint(d: Drive, md: sp.ModelData, f_grad: wp.array2d(dtype=Float), e: int):
        """Reverse of net_force and pd_torque from the net force's gradient f_grad[e].

        Clamping routes the gradient as Warp's clamp(x, a, b) = min(max(a, x), b) does.
        """
        for i in range(md.nv):
            g = f_grad[e, i]
            d.applied_grad[e, i] = d.applied_grad[e, i] + g
            d.f_contact_grad[e, i] = d.f_contact_grad[e, i] + g
            d.bias_grad[e, i] = d.bias_grad[e, i] - g
            d.qvel_grad[e, i] = d.qvel_grad[e, i] - md.dof_damping[i] * g
        for u in range(md.nu):
            j = md.act_dof[u]
            a = md.act_qadr[u]
            g = f_grad[e, j]  # the torque's gradient
            lim = d.tau_max[e, u]
            err = d.target[e, u] - d.qpos[e, a]
            raw = d.kp[e, u] * err - d.kd[e, u] * d.qvel[e, j] + d.tau_ff[e, u]
            if wp.max(-lim, raw) < lim:
                if -lim > raw:
                    d.tau_max_grad[e, u] = d.tau_max_grad[e, u] - g
                else:
                    d.kp_grad[e, u] = d.kp_grad[e, u] + g * err
                    d.target_grad[e, u] = d.target_grad[e, u] + g * d.kp[e, u]
                    d.qpos_grad[e, a] = d.qpos_grad[e, a] - g * d.kp[e, u]
                    d.kd_grad[e, u] = d.kd_grad[e, u] - g * d.qvel[e, j]
                    d.qvel_grad[e, j] = d.qvel_grad[e, j] - g * d.kd[e, u]
                    d.tau_ff_grad[e, u] = d.tau_ff_grad[e, u] + g
            else:
                d.tau_max_grad[e, u] = d.tau_max_grad[e, u] + g

    return SimpleNamespace(
        pd_torque=pd_torque, net_force=net_force, Drive=Drive, drive_adjoint=drive_adjoint
    )
