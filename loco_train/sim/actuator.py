"""PD actuators and the net generalised force of the velocity update."""

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

    return SimpleNamespace(pd_torque=pd_torque, net_force=net_force)
