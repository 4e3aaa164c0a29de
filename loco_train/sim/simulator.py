"""The batched, differentiable rigid-body simulator (N environments, one model, Warp kernels).

One control step = `substeps` Moreau steps of dt = control_dt / substeps:
    q_mid = q + dt/2 qd                                   (positions to the midpoint)
    H, h, J, phi at q_mid;  tau = PD(q_mid, qd)         (dynamics and contacts at the midpoint)
    qd_free = qd + dt H^-1 (tau - h - damping qd)       (sparse H = L^T L solves, no inverse)
    qd+ = qd_free + H^-1 J^T lambda                     (PGS impulses; soft: forces in the solve)
    q+ = q_mid + dt/2 qd+                               (second half step, quaternion normalised)
On a recording warp.Tape, with buffers allocated for gradients and adjoint='hand' (the default),
every kernel of the step runs off the tape and its hand-written reverse pass is recorded in its
place, except the soft contact model's kernels and, without impulse contact, the free velocity
update; adjoint='auto' records the kernels themselves (Warp's generated adjoints). step()
replays its launches as a captured graph (graphs.py) unless config.graphs is False.
dt = 0.005 s by default (4 substeps per 20 ms control step): stable for ANYmal's stiffest
dynamics (PD gains kp 80 N m/rad on ~0.01 kg m^2 links give natural periods of ~70 ms, and
impulse-based contact has no stiffness limit); 0.0025 s (8 substeps) is recommended for the soft
model with stiffness above 5e4 N/m.
"""

from types import SimpleNamespace

import numpy as np
import warp as wp

from loco_train.sim.actuator import HISTORY
from loco_train.sim.buffers import observe_buffers, SharedGradients, substep_buffers
from loco_train.sim.config import SimConfig
from loco_train.sim.graphs import GraphCache
from loco_train.sim.kernels import kernel_set
from loco_train.sim.model import model_spec
from loco_train.sim.pgs import Z_CUT

PARAMS = ('kp', 'kd', 'tau_max', 'armature', 'mass_offset', 'mu', 'damping', 'friction', 'delay')
"""Per-environment parameters: (N, nu) gains, limits, armature, joint damping and friction;
(N,) base mass offset, ground friction, command delay."""

PER_ENV = ('mass_offset', 'mu', 'delay')
"""The parameters with one value per environment, (N,); the others are (N, nu)."""


def _active_tape():
    """The warp.Tape recording now, or None (Warp keeps it on its runtime, with no accessor)."""
    return wp._src.context.runtime.tape


def _host(x, dtype):
    """Anything array-like (numpy, torch, list) as a float numpy array."""
    if hasattr(x, 'detach'):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


class Simulator:
    """N copies of one MuJoCo model stepped by Warp kernels; state in MuJoCo's coordinates."""

    def __init__(self, model, num_envs=1, config=None, **overrides):
        """Build from a compiled mujoco.MjModel for `num_envs` environments."""
        config = config or SimConfig()
        for name, value in overrides.items():
            setattr(config, name, value)
        self.config = config.validate()
        self.model = model
        self.spec = model_spec(model)
        if config.contact != 'none' and not self.spec.has_ground:
            raise ValueError('contact model needs a ground plane in the world body')
        self.num_envs = int(num_envs)
        self.device = wp.get_device(config.device)
        self.np_dtype = np.float32 if config.dtype == 'float32' else np.float64
        self.k = kernel_set(config.dtype)
        self.sp = self.k.sp
        self.md = self._model_data()
        self.zeros_nv = self._array(np.zeros((self.num_envs, self.spec.nv)))
        self.zeros_nu = self._array(np.zeros((self.num_envs, max(self.spec.nu, 1))))
        self.params = {}
        self.set_params(**self.default_params())
        self.act_inertia = self._array(self._effective_inertia())
        """(nu,) each drive's effective inertia 1 / (H^-1)_jj at qpos0, no armature (kg m^2):
        bounds the slope of the smoothed joint friction."""
        self._substeps = None
        self._observe = None
        self._adjoint_scratch = None
        self._sinks = {}  # write-only gradients of arrays that have none, by (shape, dtype)
        self._partials = {}  # forward partial sums nothing reads back, shared by all substeps
        self.shared_grads = None
        """SharedGradients of the intermediates of every recorded substep (hand adjoints)."""
        self.graphs = GraphCache(self.device, config.graphs)
        """Captured launch sequences of step() and the torch bridge."""
        self._staged = None
        self.previous_targets = None
        """(N, HISTORY, nu) the targets of the last step() calls, newest first (None before the
        first): what the next step's delayed drives see unless step() is given others."""
        self.invalid = np.zeros(self.num_envs, dtype=bool)
        """(N,) True where the state became non-finite or implausible (terminate those envs)."""
        qpos = np.tile(model.qpos0, (self.num_envs, 1))
        self.set_state(qpos, np.zeros((self.num_envs, self.spec.nv)))

    # ----------------------------------------------------------------------------- set-up
    def _array(self, x, dtype=None, requires_grad=False):
        x = _host(x, self.np_dtype)
        return wp.array(
            x, dtype=dtype or self.sp.Float, device=self.device, requires_grad=requires_grad
        )

    def _model_data(self):
        a, sp = self.spec.arrays, self.sp
        md = sp.ModelData()
        vectors = {'body_pos', 'body_ipos', 'body_inertia', 'jnt_axis', 'jnt_pos', 'contact_pos'}
        for name in ('body_pos', 'body_quat', 'body_ipos', 'body_iquat', 'body_mass',
                     'body_inertia', 'jnt_axis', 'jnt_pos', 'qpos0', 'dof_armature',
                     'dof_damping', 'contact_pos', 'contact_radius', 'shape_pos', 'shape_quat',
                     'shape_size'):  # fmt: skip
            value = a[name]
            if name in vectors or name in ('shape_pos', 'shape_size'):
                dtype = sp.Vec3
                value = value.reshape(-1, 3) if value.size else np.zeros((1, 3))
            elif name in ('body_quat', 'body_iquat', 'shape_quat'):
                dtype = sp.Quat
                value = value.reshape(-1, 4) if value.size else np.array([[0.0, 0, 0, 1]])
            else:
                dtype = sp.Float
                value = value if value.size else np.zeros(1)
            setattr(md, name, self._array(value, dtype))
        for name in ('ground_normal', 'ground_point', 'ground_t1', 'ground_t2', 'gravity'):
            setattr(md, name, sp.Vec3(*[float(v) for v in a[name]]))
        spec = self.spec
        md.nbody, md.nv, md.nu = spec.nbody, spec.nv, spec.nu
        md.nc, md.ns = spec.ncontact, spec.nshape
        for name in ('body_parent', 'body_jtype', 'body_qadr', 'body_dadr', 'body_root',
                     'body_subtree_end', 'dof_body', 'dof_act', 'dof_nanc', 'dof_anc',
                     'dof_ndesc', 'dof_desc', 'act_dof',
                     'act_qadr', 'contact_body', 'contact_ndof', 'contact_dofs', 'shape_body',
                     'shape_type'):  # fmt: skip
            setattr(md, name, wp.array(a[name], dtype=int, device=self.device))
        return md

    def _effective_inertia(self):
        """(nu,) 1 / (H^-1)_jj of each driven dof j at the model's qpos0 (MuJoCo's H there)."""
        import mujoco

        if not self.spec.nu:
            return np.ones(1)
        data = mujoco.MjData(self.model)
        mujoco.mj_forward(self.model, data)
        H = np.zeros((self.model.nv, self.model.nv))
        mujoco.mj_fullM(self.model, data, H)
        return 1.0 / np.diag(np.linalg.inv(H))[self.spec.arrays['act_dof']]

    def default_params(self):
        """Model defaults: kp, kd, armature, joint friction, delay 0; ctrlrange limits; mu 1.

        Damping: the driven dofs' dof_damping (the description's joint friction is not modelled
        by default: friction 0 keeps the simulator's behaviour without an actuator model).
        """
        n, nu = self.num_envs, max(self.spec.nu, 1)
        limit = self.spec.arrays['ctrl_limit']
        limit = np.where(np.isfinite(limit), limit, 1.0e6) if limit.size else np.full(1, 1.0e6)
        friction = 1.0
        damping = np.zeros(nu)
        if self.spec.nu:
            damping = self.spec.arrays['dof_damping'][self.spec.arrays['act_dof']]
        return {
            'kp': np.zeros((n, nu)),
            'kd': np.zeros((n, nu)),
            'tau_max': np.broadcast_to(limit, (n, nu)),
            'armature': np.zeros((n, nu)),
            'mass_offset': np.zeros(n),
            'mu': np.full(n, friction),
            'damping': np.broadcast_to(damping, (n, nu)),
            'friction': np.zeros((n, nu)),
            'delay': np.zeros(n),
        }

    def set_params(self, **values):
        """Set per-env parameters; ValueError on a non-finite or out-of-range value.

        kp, kd, tau_max, armature, damping (N m s/rad), friction (N m): (N, nu) or (nu,);
        mass_offset (kg), mu, delay (s, at most HISTORY control steps): (N,) or scalar.
        Written in place into `params` (captured graphs hold those arrays), so a warp.Tape
        recorded on `params` sees the new values in its backward pass (the torch bridge copies
        its own).
        """
        n, nu = self.num_envs, max(self.spec.nu, 1)
        for name, value in values.items():
            if name not in PARAMS:
                raise ValueError(f'unknown parameter {name!r}; known: {PARAMS}')
            shape = (n,) if name in PER_ENV else (n, nu)
            value = np.broadcast_to(_host(value, np.float64), shape)
            if not np.all(np.isfinite(value)):
                bad = np.unique(np.nonzero(~np.isfinite(value))[0])
                raise ValueError(
                    f'parameter {name!r} is not finite in environments {bad.tolist()}'
                )
            if name not in ('mass_offset',) and np.any(value < 0):
                raise ValueError(f'parameter {name!r} must be non-negative')
            longest = HISTORY * self.config.control_dt
            if name == 'delay' and np.any(value > longest * (1.0 + 1e-9)):
                raise ValueError(
                    f'delay {value.max()} s exceeds the {HISTORY} control steps of target '
                    f'history ({longest} s at control_dt {self.config.control_dt} s)'
                )
            if name == 'mass_offset':
                masses = self.spec.arrays['body_mass'][[b for b in range(1, self.spec.nbody)
                                                        if self.spec.parent[b] == 0]]  # fmt: skip
                if np.any(value[:, None] + masses[None, :] <= 0):
                    raise ValueError('mass_offset makes a root body mass non-positive')
            held = self.params.get(name)
            if held is None:
                self.params[name] = self._array(np.ascontiguousarray(value))
            else:  # in place: captured graphs hold this array
                held.assign(np.ascontiguousarray(value, dtype=self.np_dtype))

    def set_state(self, qpos, qvel):
        """Set qpos (N, nq) and qvel (N, nv) in MuJoCo's order ((nq,), (nv,) broadcast)."""
        qpos = np.broadcast_to(_host(qpos, np.float64), (self.num_envs, self.spec.nq))
        qvel = np.broadcast_to(_host(qvel, np.float64), (self.num_envs, self.spec.nv))
        if not (np.all(np.isfinite(qpos)) and np.all(np.isfinite(qvel))):
            raise ValueError('set_state: qpos/qvel contain NaN or inf')
        self.qpos = self._array(np.ascontiguousarray(qpos))
        self.qvel = self._array(np.ascontiguousarray(qvel))
        self.invalid[:] = False
        self._forces = None
        self._observed = False

    def get_state(self):
        """Return (qpos (N, nq), qvel (N, nv)) as numpy arrays."""
        return self.qpos.numpy().copy(), self.qvel.numpy().copy()

    # ----------------------------------------------------------------------------- buffers
    def substep_buffers(self, requires_grad=False):
        """Fresh arrays for one control step: a list of `substeps` buffer sets."""
        c = self.config
        bufs = [
            substep_buffers(
                self.spec,
                self.sp,
                self.num_envs,
                c.pgs_iterations,
                c.contact,
                self.device,
                requires_grad,
                requires_grad and c.adjoint == 'auto',
                None if requires_grad and c.adjoint == 'auto' else self._partials,
            )  # fmt: skip
            for _ in range(c.substeps)
        ]
        if requires_grad and c.adjoint == 'hand':
            if self.shared_grads is None:
                self.shared_grads = SharedGradients(bufs[0], self.device)
            for buf in bufs:
                self.shared_grads.attach(buf)
        return bufs

    def observe_buffers(self, requires_grad=False):
        """Fresh arrays for one end-of-step observation."""
        return observe_buffers(self.spec, self.sp, self.num_envs, self.device, requires_grad)

    # ----------------------------------------------------------------------------- kernels
    def _launch(self, kernel, inputs, outputs, dim=None, record_tape=True):
        wp.launch(
            kernel, dim=dim or self.num_envs, inputs=inputs, outputs=outputs,
            device=self.device, record_tape=record_tape,
        )  # fmt: skip

    def _reverse(self, tape, kernel, args, arrays):
        """Record a hand-written adjoint `kernel` (one thread per env) on `tape`'s backward pass.

        `arrays`: those whose gradients it reads or writes (the tape zeroes them on reset).
        """
        device, n = self.device, self.num_envs

        def backward():
            wp.launch(kernel, dim=n, inputs=args, device=device, record_tape=False)

        tape.record_func(backward, arrays)

    def _scratch(self):
        """Work arrays of the hand-written adjoints, shared by all substeps (written first)."""
        if self._adjoint_scratch is None:
            n, nv, nc = self.num_envs, self.spec.nv, max(self.spec.ncontact, 1)
            self._adjoint_scratch = SimpleNamespace(
                z=wp.zeros((n, nv), dtype=self.sp.Float, device=self.device),
                z_out=wp.zeros((n, nv), dtype=self.sp.Float, device=self.device),
                M=wp.zeros((n, nv, nc), dtype=self.sp.Vec3, device=self.device),
                S=wp.zeros((n, nc, nc), dtype=self.sp.Mat33, device=self.device),
                W=wp.zeros((n, nv, nc), dtype=self.sp.Vec3, device=self.device),
                u=wp.zeros((n, self.config.pgs_iterations, nc), dtype=self.sp.Vec3,
                           device=self.device),
            )  # fmt: skip
        return self._adjoint_scratch

    def _grad(self, array):
        """array.grad, or a write-only sink of its shape where it has none.

        One sink per shape, allocated once: nothing is allocated inside a captured graph.
        """
        if array.grad is not None:
            return array.grad
        key = (array.shape, array.dtype)
        if key not in self._sinks:
            self._sinks[key] = wp.zeros(array.shape, dtype=array.dtype, device=self.device)
        return self._sinks[key]

    def _integrate(self, qpos, qvel, h, qpos_out, tape=None):
        """qpos_out = qpos + h qvel on the manifold; tape: record its hand-written reverse."""
        k, md = self.k, self.md
        self._launch(k.integrate_positions, [qpos, qvel, h, md], [qpos_out], record_tape=not tape)
        if tape is not None:
            self._reverse(
                tape, k.integrate_adjoint,
                [qpos, qvel, h, md, qpos_out.grad, self._grad(qpos), self._grad(qvel)],
                [a for a in (qpos, qvel, qpos_out) if a.grad is not None],
            )  # fmt: skip

    def _drive(self, buf, qvel, target, previous, tau_ff, params, applied, f_contact, index):
        """The Drive struct of a substep (inputs and gradients) and the arrays it accumulates."""
        c = self.config
        d = self.k.Drive()
        inputs = {'qpos': buf.qmid, 'qvel': qvel, 'target': target, 'previous': previous}
        inputs['tau_ff'] = tau_ff
        drive_params = ('kp', 'kd', 'tau_max', 'damping', 'friction', 'armature', 'delay')
        inputs.update((name, params[name]) for name in drive_params)
        for name, array in inputs.items():
            setattr(d, name, array)
            setattr(d, f'{name}_grad', self._grad(array))
        d.inertia = self.act_inertia
        d.k, d.substeps = int(index), int(c.substeps)
        d.dt, d.v_eps = self.sp.Float(c.dt), self.sp.Float(c.joint_friction_velocity)
        d.bias_grad = buf.bias.grad
        d.applied_grad, d.f_contact_grad = self._grad(applied), self._grad(f_contact)
        arrays = [*inputs.values(), buf.bias, applied, f_contact]
        return d, [a for a in arrays if a.grad is not None]

    def _kinematics(self, qpos, buf, params, tape=None):
        """Body poses, com-frame inertias and dof motions at `qpos` into `buf`.

        tape: record their hand-written reverse on it instead of their kernels.
        """
        k, md = self.k, self.md
        auto = tape is None
        self._launch(k.forward_kinematics, [qpos, md], [buf.xpos, buf.xquat], record_tape=auto)
        if not auto:
            self._reverse(
                tape, k.kinematics_adjoint,
                [qpos, buf.xpos, buf.xquat, md, buf.xpos.grad, buf.xquat.grad, self._grad(qpos)],
                [buf.xpos, buf.xquat] + ([qpos] if qpos.grad is not None else []),
            )  # fmt: skip
        self._launch(
            k.com_quantities, [buf.xpos, buf.xquat, md, params['mass_offset']],
            [buf.cin_i, buf.cin_h, buf.cin_m, buf.cdof], record_tape=auto,
        )  # fmt: skip
        if not auto:
            offset = params['mass_offset']
            self._reverse(
                tape, k.com_adjoint,
                [buf.xpos, buf.xquat, md, offset, buf.cin_i.grad, buf.cin_h.grad, buf.cin_m.grad,
                 buf.cdof.grad, buf.xpos.grad, buf.xquat.grad, self._grad(offset)],
                [buf.cin_i, buf.cin_h, buf.cin_m, buf.cdof, buf.xpos, buf.xquat]
                + ([offset] if offset.grad is not None else []),
            )  # fmt: skip

    def _dynamics(self, qpos, buf, params, tape=None):
        """Kinematics, com quantities and the CRBA mass matrix at `qpos`.

        tape: record their hand-written reverse on it instead of their kernels.
        """
        k, md = self.k, self.md
        auto = tape is None
        self._kinematics(qpos, buf, params, tape)
        self._launch(
            k.composite_inertia,
            [buf.cin_i, buf.cin_h, buf.cin_m, md], [buf.crb_i, buf.crb_h, buf.crb_m],
            record_tape=auto,
        )  # fmt: skip
        self._launch(
            k.mass_matrix,
            [buf.crb_i, buf.crb_h, buf.crb_m, buf.cdof, md, params['armature']], [buf.H],
            record_tape=auto,
        )  # fmt: skip
        if not auto:
            self._reverse(
                tape, k.crba_adjoint,
                [buf.crb_i, buf.crb_h, buf.crb_m, buf.cdof, buf.H.grad, md,
                 self._grad(params['armature']), buf.cdof.grad, buf.crb_i.grad, buf.crb_h.grad,
                 buf.crb_m.grad, buf.cin_i.grad, buf.cin_h.grad, buf.cin_m.grad],
                [buf.H, buf.cdof, buf.crb_i, buf.crb_h, buf.crb_m, buf.cin_i, buf.cin_h,
                 buf.cin_m] + ([params['armature']] if params['armature'].grad is not None
                               else []),
            )  # fmt: skip

    def _bias(self, qvel, buf, tape=None):
        """Body velocities and RNEA bias forces; tape: record their hand-written reverse."""
        k = self.k
        self._launch(
            k.body_velocities, [buf.cdof, qvel, self.md], [buf.cvel, buf.cacc],
            record_tape=tape is None,
        )  # fmt: skip
        if tape is not None:
            self._reverse(
                tape, k.velocities_adjoint,
                [buf.cdof, qvel, buf.cvel, self.md, buf.cvel.grad, buf.cacc.grad, buf.cdof.grad,
                 self._grad(qvel)],
                [buf.cvel, buf.cacc, buf.cdof] + ([qvel] if qvel.grad is not None else []),
            )  # fmt: skip
        self._launch(
            k.bias_forces,
            [buf.cin_i, buf.cin_h, buf.cin_m, buf.cdof, buf.cvel, buf.cacc, self.md],
            [buf.fbody, buf.cfrc, buf.bias], record_tape=tape is None,
        )  # fmt: skip
        if tape is not None:
            self._reverse(
                tape, k.bias_adjoint,
                [buf.cin_i, buf.cin_h, buf.cin_m, buf.cdof, buf.cvel, buf.cacc, buf.cfrc,
                 buf.bias.grad, self.md, buf.cfrc.grad, buf.cin_i.grad, buf.cin_h.grad,
                 buf.cin_m.grad, buf.cdof.grad, buf.cvel.grad, buf.cacc.grad],
                [buf.bias, buf.cfrc, buf.cin_i, buf.cin_h, buf.cin_m, buf.cdof, buf.cvel,
                 buf.cacc],
            )  # fmt: skip

    def substep(self, qpos, qvel, target, previous, tau_ff, applied, params, buf, index=0):
        """One Moreau step from (qpos, qvel); writes only `buf`; returns (qpos+, qvel+).

        target (N, nu): this control step's joint targets; previous (N, HISTORY, nu): the last
        control steps' (newest first), read through the delay; index: the substep's place in
        its control step.
        """
        k, md, c, sp = self.k, self.md, self.config, self.sp
        dt = sp.Float(c.dt)
        half = sp.Float(0.5 * c.dt)
        n, nv = self.num_envs, self.spec.nv
        # kinematics, CRBA, RNEA, solves and PGS run off the tape when their hand-written reverse
        # is recorded instead; decided by the buffers' layout (set from config.adjoint)
        tape = _active_tape()
        hand = tape is not None and buf.H.requires_grad and not buf.L.requires_grad
        auto = not hand
        self._integrate(qpos, qvel, half, buf.qmid, tape if hand else None)
        self._dynamics(buf.qmid, buf, params, tape if hand else None)
        self._bias(qvel, buf, tape if hand else None)
        has_contact = c.contact != 'none' and self.spec.ncontact > 0
        if has_contact:
            self._launch(
                k.contact_jacobian, [buf.xpos, buf.xquat, buf.cdof, md], [buf.phi, buf.J],
                record_tape=auto,
            )  # fmt: skip
            if hand:
                self._reverse(
                    tape, k.contact_jacobian_adjoint,
                    [buf.xpos, buf.xquat, buf.cdof, md, buf.phi.grad, buf.J.grad, buf.xpos.grad,
                     buf.xquat.grad, buf.cdof.grad],
                    [buf.phi, buf.J, buf.xpos, buf.xquat, buf.cdof],
                )  # fmt: skip
        f_contact = self.zeros_nv
        H = buf.H
        if has_contact and c.contact == 'soft':
            self._launch(
                k.soft_contact_force,
                [buf.phi, buf.J, qvel, params['mu'], md, sp.Float(c.soft_stiffness),
                 sp.Float(c.soft_damping), sp.Float(c.soft_friction_velocity)],
                [buf.vc, buf.gain, buf.local, buf.force, buf.f_contact],
            )  # fmt: skip
            f_contact = buf.f_contact
            self._launch(
                k.soft_contact_inertia, [buf.H, buf.J, buf.gain, dt], [buf.H_soft], dim=(n, nv)
            )
            H = buf.H_soft
        self._launch(
            k.pd_torque,
            [buf.qmid, qvel, target, previous, tau_ff, params['kp'], params['kd'],
             params['tau_max'], params['delay'], int(index), int(c.substeps), dt, md],
            [buf.tau], record_tape=auto,
        )  # fmt: skip
        self._launch(
            k.net_force,
            [buf.tau, buf.bias, qvel, params['damping'], params['friction'], params['armature'],
             self.act_inertia, sp.Float(c.joint_friction_velocity), dt, md, applied, f_contact],
            [buf.f], record_tape=auto,
        )  # fmt: skip
        if hand:  # their reverse runs inside the solve's
            drive, drive_arrays = self._drive(
                buf, qvel, target, previous, tau_ff, params, applied, f_contact, index
            )
        self._launch(k.cholesky_factor, [H, md], [buf.S, buf.L], record_tape=auto)
        self._launch(
            k.cholesky_solve, [buf.L, buf.f, md], [buf.sy, buf.y, buf.sx, buf.qacc],
            record_tape=auto,
        )  # fmt: skip
        impulses = has_contact and c.contact in ('hard', 'smooth')
        if hand and impulses:  # from the impulse and Delassus reverses: no solve
            scratch = self._scratch()
            self._reverse(
                tape, k.free_solve_adjoint,
                [buf.qacc, scratch.z_out, scratch.M, scratch.W, buf.dv, buf.b.grad, buf.weight,
                 md, dt, buf.qvel_free.grad, drive, scratch.z, H.grad],
                [buf.qacc, buf.b, buf.qvel_free, H] + drive_arrays,
            )  # fmt: skip
        elif hand:
            self._reverse(
                tape, k.solve_adjoint,
                [buf.L, buf.qacc, buf.qacc.grad, md, drive, self._scratch().z, H.grad],
                [buf.qacc, H] + drive_arrays,
            )  # fmt: skip
        self._launch(
            k.free_velocity, [qvel, buf.qacc, dt], [buf.qvel_free], dim=(n, nv),
            record_tape=not (hand and impulses),  # else reversed in free_solve_adjoint
        )  # fmt: skip
        qvel_end = buf.qvel_free
        if impulses:
            nc = self.spec.ncontact
            smooth = int(c.contact == 'smooth')
            reach = sp.Float(self.contact_reach())
            self._launch(
                k.delassus_columns, [buf.L, buf.J, buf.qvel_free, buf.phi, reach, md],
                [buf.SY, buf.Y, buf.b], dim=(n, nc), record_tape=auto,
            )  # fmt: skip
            self._launch(
                k.delassus_blocks, [buf.Y, buf.phi, reach, md], [buf.G], dim=(n, nc, nc),
                record_tape=auto,
            )  # fmt: skip
            if hand:
                scratch = self._scratch()
                self._reverse(
                    tape, k.delassus_adjoint,
                    [buf.L, buf.Y, buf.J, buf.qvel_free, buf.G.grad, buf.b.grad, buf.weight, md,
                     scratch.M, scratch.S, scratch.W, buf.J.grad, buf.qvel_free.grad],
                    [buf.G, buf.b, buf.J, buf.qvel_free],
                )  # fmt: skip
            self._launch(
                k.pgs_solve,
                [buf.G, buf.b, buf.phi, params['mu'], smooth, sp.Float(c.kappa),
                 sp.Float(c.contact_offset), reach, sp.Float(c.erp), dt],
                [buf.weight, buf.rinv, buf.U, buf.lam], record_tape=auto,
            )  # fmt: skip
            if hand:
                self._reverse(
                    tape, k.pgs_adjoint,
                    [buf.G, buf.phi, params['mu'], smooth, sp.Float(c.kappa), sp.Float(c.erp), dt,
                     buf.weight, buf.rinv, buf.U, buf.lam, buf.lam.grad, self._scratch().u,
                     buf.G.grad, buf.b.grad, buf.phi.grad, self._grad(params['mu'])],
                    [buf.lam, buf.G, buf.b, buf.phi]
                    + ([params['mu']] if params['mu'].grad is not None else []),
                )  # fmt: skip
            self._launch(
                k.apply_impulses,
                [buf.L, buf.Y, buf.lam, buf.qvel_free, md, dt],
                [buf.sdv, buf.dv, buf.qvel_out, buf.force], record_tape=auto,
            )  # fmt: skip
            if hand:
                self._reverse(
                    tape, k.impulse_adjoint,
                    [buf.L, buf.J, buf.lam, buf.dv, buf.qvel_out.grad, buf.force.grad, md, dt,
                     self._scratch().z_out, buf.qvel_free.grad, buf.lam.grad, buf.J.grad],
                    [buf.qvel_out, buf.force, buf.qvel_free, buf.lam, buf.J],
                )  # fmt: skip
            qvel_end = buf.qvel_out
        self._integrate(buf.qmid, qvel_end, half, buf.qpos_out, tape if hand else None)
        if hand:  # runs first in this substep's reverse pass
            tape.record_func(self.shared_grads.zero, [])
        return buf.qpos_out, qvel_end

    def contact_reach(self):
        """Distance (m) beyond which a contact gets no impulse (smooth and hard models)."""
        c = self.config
        if c.contact == 'smooth':
            return c.contact_offset + Z_CUT / c.kappa
        return c.contact_offset

    def control_step(self, qpos, qvel, target, previous, tau_ff, applied, params, bufs):
        """`substeps` Moreau steps with fixed targets; return (qpos, qvel, [substep forces]).

        previous (N, HISTORY, nu): the targets of the last control steps, newest first (the
        drives see them through the delay).
        """
        forces = []
        for index, buf in enumerate(bufs):
            qpos, qvel = self.substep(
                qpos, qvel, target, previous, tau_ff, applied, params, buf, index
            )
            forces.append(buf.force)
        return qpos, qvel, forces

    def observe(self, qpos, qvel, params, obs, clearance=True):
        """Feet (contact-sphere centres) positions/velocities and shape clearances into `obs`.

        clearance=False leaves the clearances out (they have no gradient; off the tape).
        """
        k, md = self.k, self.md
        tape = _active_tape()
        hand = tape is not None and obs.xpos.requires_grad and self.config.adjoint == 'hand'
        self._kinematics(qpos, obs, params, tape if hand else None)
        if self.spec.ncontact:
            self._launch(
                k.contact_points, [obs.xpos, obs.xquat, obs.cdof, qvel, md],
                [obs.foot_pos, obs.foot_vel], record_tape=not hand,
            )  # fmt: skip
            if hand:
                self._reverse(
                    tape, k.contact_points_adjoint,
                    [obs.xpos, obs.xquat, obs.cdof, qvel, md, obs.foot_pos.grad,
                     obs.foot_vel.grad, obs.xpos.grad, obs.xquat.grad, obs.cdof.grad,
                     self._grad(qvel)],
                    [obs.foot_pos, obs.foot_vel, obs.xpos, obs.xquat, obs.cdof]
                    + ([qvel] if qvel.grad is not None else []),
                )  # fmt: skip
        if clearance and self.spec.nshape:
            self._launch(  # no adjoint: kept off the tape
                k.shape_clearance, [obs.xpos, obs.xquat, md], [obs.clearance], record_tape=False
            )
        return obs

    # ----------------------------------------------------------------------------- numpy API
    def _inputs(self, targets, tau_ff, applied):
        n, nu = self.num_envs, max(self.spec.nu, 1)
        if targets is None:
            targets = np.zeros((n, nu))
        targets = np.broadcast_to(_host(targets, np.float64), (n, nu))
        if not np.all(np.isfinite(targets)):
            bad = np.unique(np.nonzero(~np.isfinite(targets))[0])
            raise ValueError(f'step: joint targets are not finite in environments {bad.tolist()}')
        if tau_ff is None:
            tau_ff = self.zeros_nu
        else:
            tau_ff = np.broadcast_to(_host(tau_ff, np.float64), (n, nu))
            if not np.all(np.isfinite(tau_ff)):
                raise ValueError('step: feed-forward torques are not finite')
            tau_ff = self._array(np.ascontiguousarray(tau_ff))
        if applied is None:
            applied = self.zeros_nv
        else:
            applied = np.broadcast_to(_host(applied, np.float64), (n, self.spec.nv))
            if not np.all(np.isfinite(applied)):
                raise ValueError('step: applied forces are not finite')
            applied = self._array(np.ascontiguousarray(applied))
        return targets, tau_ff, applied

    def graph_values(self):
        """What a captured graph's launches hold besides fixed arrays: the config's values."""
        return tuple(vars(self.config).values())  # scalars and strings

    def _stage(self):
        """Fixed input arrays of step()'s captured graph (inputs are copied in)."""
        if self._staged is None:
            n, spec = self.num_envs, self.spec
            nu = max(spec.nu, 1)
            self._staged = SimpleNamespace(
                qpos=self._array(np.zeros((n, spec.nq))), qvel=self._array(np.zeros((n, spec.nv))),
                target=self._array(np.zeros((n, nu))), tau_ff=self._array(np.zeros((n, nu))),
                previous=self._array(np.zeros((n, HISTORY, nu))),
                applied=self._array(np.zeros((n, spec.nv))),
                flag=wp.zeros(n, dtype=wp.int32, device=self.device),
            )  # fmt: skip
        return self._staged

    def step(self, targets=None, tau_ff=None, applied=None, previous=None):
        """Advance one control step with PD joint targets (N, nu) (no gradient recorded).

        previous: (N, HISTORY, nu) or (HISTORY, nu) targets of the last control steps, newest
        first, that the delayed drives still see; None: previous_targets.
        """
        target, tau_ff, applied = self._inputs(targets, tau_ff, applied)
        n, nu = self.num_envs, max(self.spec.nu, 1)
        if previous is None:
            previous = self.previous_targets
        if previous is None:  # before the first step: this step's targets were held before it
            previous = np.repeat(target[:, None], HISTORY, axis=1)
        previous = np.broadcast_to(_host(previous, np.float64), (n, HISTORY, nu))
        if not np.all(np.isfinite(previous)):
            raise ValueError('step: previous joint targets are not finite')
        if self._substeps is None:
            self._substeps = self.substep_buffers()
        s = self._stage()
        for dst, src in ((s.qpos, self.qpos), (s.qvel, self.qvel)):
            wp.copy(dst, src)
        s.target.assign(np.ascontiguousarray(target, dtype=self.np_dtype))
        s.previous.assign(np.ascontiguousarray(previous, dtype=self.np_dtype))
        wp.copy(s.tau_ff, tau_ff)
        wp.copy(s.applied, applied)
        self.previous_targets = np.concatenate([target[:, None], previous[:, :-1]], axis=1)

        def launches():
            qpos, qvel, forces = self.control_step(
                s.qpos, s.qvel, s.target, s.previous, s.tau_ff, s.applied, self.params,
                self._substeps,
            )  # fmt: skip
            s.flag.zero_()
            dim = (self.num_envs, max(self.spec.nq, self.spec.nv))
            self._launch(
                self.k.state_invalid, [qpos, qvel, self.sp.Float(1.0e6)], [s.flag], dim=dim
            )
            return qpos, qvel, forces

        self.qpos, self.qvel, self._forces = self.graphs.run('step', launches, self.graph_values())
        self._observed = False
        self.invalid |= s.flag.numpy().astype(bool)

    def _observation(self):
        if self._observe is None:
            self._observe = self.observe_buffers()
        if not self._observed:
            self.observe(self.qpos, self.qvel, self.params, self._observe)
            self._observed = True
        return self._observe

    def foot_positions(self):
        """(N, nc, 3) world positions of the contact spheres' centres (m)."""
        return self._observation().foot_pos.numpy()[:, : self.spec.ncontact].copy()

    def foot_velocities(self):
        """(N, nc, 3) world velocities of the contact spheres' centres (m/s)."""
        return self._observation().foot_vel.numpy()[:, : self.spec.ncontact].copy()

    def shape_clearance(self):
        """(N, nshape) height of each non-contact shape above the ground (m); order shape_names."""
        return self._observation().clearance.numpy()[:, : self.spec.nshape].copy()

    def contact_forces(self):
        """(N, nc, 3) world contact force on each sphere, mean over the last control step (N)."""
        if not self._forces:
            return np.zeros((self.num_envs, self.spec.ncontact, 3))
        forces = np.mean([f.numpy() for f in self._forces], axis=0)
        return forces[:, : self.spec.ncontact]

    def mass_matrix(self, qpos):
        """H(qpos) (N, nv, nv), armature included, for qpos (N, nq)."""
        buf = self.substep_buffers()[0]
        qpos = self._array(np.broadcast_to(_host(qpos, np.float64), (self.num_envs, self.spec.nq)))
        self._dynamics(qpos, buf, self.params)
        return buf.H.numpy().copy()

    def bias_forces(self, qpos, qvel):
        """h(qpos, qvel) (N, nv): gravity, Coriolis and centrifugal forces (MuJoCo's qfrc_bias)."""
        buf = self.substep_buffers()[0]
        qpos = self._array(np.broadcast_to(_host(qpos, np.float64), (self.num_envs, self.spec.nq)))
        qvel = self._array(np.broadcast_to(_host(qvel, np.float64), (self.num_envs, self.spec.nv)))
        self._dynamics(qpos, buf, self.params)
        self._bias(qvel, buf)
        return buf.bias.numpy().copy()

    @property
    def contact_names(self):
        """Names of the contact-sphere geoms, in output order."""
        return list(self.spec.contact_names)

    @property
    def shape_names(self):
        """Names of the clearance shapes, in output order."""
        return list(self.spec.shape_names)
