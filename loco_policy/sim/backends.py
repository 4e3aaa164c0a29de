"""Simulated-robot backends (ROS-free): the PD actuator at physics rate on the robot description.

``make_backend(name, perturbation)`` returns an object with ``dt`` (physics step, s), ``reset()``,
``step(command)`` (one physics step under a JointCommand, or None to hold the default pose) and
``state()`` (a RobotState). MuJoCo is the default backend: an independent simulator, so every run
against it is also a sim2sim check. The Warp backend is the project's own simulator,
``loco_train.sim.Simulator`` (imported only when chosen; it brings warp-lang, a training
dependency); where that module is absent this fails and says what is missing.

The MuJoCo backend takes an optional actuator model (``loco_train.actuator.model.ActuatorParams``:
realised gains as multipliers on the commanded ones, armature, Coulomb friction, viscous damping,
one command delay), run by MuJoCo's native actuators (``loco_train.actuator.mjcf``) so that the
fit's ``mujoco.rollout`` steps the same model; without one it applies the PD law in Python
through the description's torque motors (the behaviour without an actuator model). ``fixed_base``
welds the base in the air (a robot hanging on its hoist).
"""

from dataclasses import dataclass
import importlib

import numpy as np

from loco_policy import description, spec
from loco_policy.control import joint_command
from loco_policy.observation import quat_rotate_inverse

BACKENDS = ('mujoco', 'warp')

WARP_MODULE = 'loco_train.sim'
"""The project's Warp simulator; its Simulator class steps the same compiled description."""


class SimBackendError(RuntimeError):
    """A backend that cannot be built, with the reason and the missing piece."""


@dataclass(frozen=True)
class Perturbation:
    """Deviations of the simulated robot from the nominal one (for fine-tuning experiments)."""

    payload: float = 0.0
    """Mass (kg) added to the base body."""
    friction: float = -1.0
    """Sliding friction coefficient of every geom; < 0 keeps the description's."""
    gain_scale: float = 1.0
    """Multiplier on the commanded kp and kd (actuator mismatch)."""
    latency: float = 0.0
    """Delay (s) between a command's arrival and its use (applied by the node)."""
    stiff_feet: bool = False
    """MuJoCo: the feet's contact stiffened to about 1 mm of sink (solimp 0.9 0.95 0.001)
    instead of the description's ~17 mm, as near hard contact as MuJoCo gets."""


@dataclass
class RobotState:
    """What the robot's sensors report, SI units."""

    time: float
    """Simulated time (s)."""
    q: np.ndarray
    """(12,) joint positions (rad), robot order."""
    qd: np.ndarray
    """(12,) joint velocities (rad/s)."""
    tau: np.ndarray
    """(12,) applied joint torques (N m)."""
    base_pos: np.ndarray
    """(3,) world position (m)."""
    base_quat: np.ndarray
    """(4,) world-from-body quaternion w-x-y-z."""
    base_lin_vel: np.ndarray
    """(3,) linear velocity (m/s), body frame."""
    base_ang_vel: np.ndarray
    """(3,) angular velocity (rad/s), body frame."""
    base_lin_acc: np.ndarray
    """(3,) proper acceleration (m/s^2), body frame (what an accelerometer reads)."""


def hold_command():
    """The command a robot on its hoist holds before any policy command: default pose, spec PD."""
    zeros = np.zeros(spec.NUM_JOINTS)
    return joint_command.JointCommand(
        spec.DEFAULT_JOINT_POS.copy(), zeros, zeros, spec.KP, spec.KD, spec.TORQUE_LIMIT, 'HOLD'
    )


class MujocoBackend:
    """ANYmal C in MuJoCo from the package's description, PD torques at every physics step."""

    def __init__(self, perturbation=Perturbation(), actuator=None, fixed_base=False):
        """Compile the description (actuator model, fixed base) and apply the perturbation.

        actuator: ActuatorParams or None (PD in Python on torque motors); fixed_base: base welded
        at the hanging height, contacts off.
        """
        import mujoco  # deferred: only the simulated robot needs MuJoCo

        self._mj = mujoco
        self.actuator, self.fixed_base = actuator, bool(fixed_base)
        self._drives = None
        if actuator is None and not fixed_base:
            self.model = description.load_model()
        else:
            from loco_train.actuator import mjcf  # numpy + mujoco only

            self.model = mjcf.build_spec(actuator, self.fixed_base).compile()
            if actuator is not None:
                self._drives = mjcf.Drives(self.model)
                self._command_ctrl = mjcf.command_ctrl
        self._qi, self._vi = (0, 0) if self.fixed_base else (7, 6)  # joints' qpos, qvel start
        self.perturbation = perturbation
        base = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, spec.BASE_BODY)
        self.model.body_mass[base] += perturbation.payload
        if perturbation.friction >= 0.0:
            self.model.geom_friction[:, 0] = perturbation.friction
        if perturbation.stiff_feet:
            stiffen_feet(self.model)
        self.data = mujoco.MjData(self.model)
        self.dt = float(self.model.opt.timestep)
        self.reset()

    def reset(self):
        """Put the robot at the default pose, base at the default height, at rest."""
        self._mj.mj_resetData(self.model, self.data)
        self.data.qpos[:] = description.default_qpos()[7 - self._qi :]
        self._gains = None
        if self._drives is not None:  # the hold command was in force before t = 0
            hold = hold_command()
            self._set_gains(hold)
            self._drives.init_history(self.data, self._command_ctrl(hold))
        self._mj.mj_forward(self.model, self.data)
        self._prev_vel = np.zeros(3)

    def _set_gains(self, command):
        """Write the realised gains and torque limit of command into the actuator model."""
        scale = self.perturbation.gain_scale
        limit = np.minimum(command.torque_limit, spec.TORQUE_LIMIT)
        gains = (command.kp.tobytes(), command.kd.tobytes(), limit.tobytes())
        if gains != self._gains:  # the model's gains change only with the mode
            kp = scale * self.actuator.kp_scale * command.kp  # (12,) N m/rad
            kd = scale * self.actuator.kd_scale * command.kd  # (12,) N m s/rad
            self._drives.set_gains(kp, kd, limit)
            self._gains = gains

    def step(self, command):
        """Advance one physics step (dt) with PD torques from command (None: hold)."""
        command = command or hold_command()
        if self._drives is None:
            q, qd = self.data.qpos[self._qi :], self.data.qvel[self._vi :]
            scale = self.perturbation.gain_scale
            self.data.ctrl[:] = joint_command.pd_torque(command, q, qd, scale)
        else:  # the actuator model: MuJoCo's drives, delayed command
            self._set_gains(command)
            self.data.ctrl[:] = self._command_ctrl(command)
        self._prev_vel = self._base_velocity()
        self._mj.mj_step(self.model, self.data)

    def _base_velocity(self):
        """(3,) base linear velocity (m/s), world frame (zero for a fixed base)."""
        return np.zeros(3) if self.fixed_base else self.data.qvel[:3].copy()

    def state(self):
        """Return the sensor view of the current state."""
        if self.fixed_base:
            quat = np.array([1.0, 0.0, 0.0, 0.0])
            base_pos = self.model.body(spec.BASE_BODY).pos.copy()
            base_ang_vel = np.zeros(3)
        else:
            quat, base_pos = self.data.qpos[3:7].copy(), self.data.qpos[:3].copy()
            base_ang_vel = self.data.qvel[3:6].copy()  # MuJoCo: body frame already
        world_vel = self._base_velocity()
        world_acc = (world_vel - self._prev_vel) / self.dt - spec.GRAVITY
        if self._drives is None:
            tau = self.data.ctrl.copy()
        else:  # the drives' torque at each joint (clipped to the limit) during the last step
            tau = self.data.qfrc_actuator[self._drives.dofs].copy()
        return RobotState(
            time=float(self.data.time),
            q=self.data.qpos[self._qi :].copy(),
            qd=self.data.qvel[self._vi :].copy(),
            tau=tau,
            base_pos=base_pos,
            base_quat=quat,
            base_lin_vel=quat_rotate_inverse(quat, world_vel),
            base_ang_vel=base_ang_vel,
            base_lin_acc=quat_rotate_inverse(quat, world_acc),
        )


STIFF_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)
"""MuJoCo solimp of a stiff contact: impedance 0.9-0.95 reached within 1 mm of penetration."""


def stiffen_feet(model):
    """Give a compiled description's feet STIFF_SOLIMP (the description's: 0.015 1 0.031)."""
    import mujoco

    for name in spec.FOOT_NAMES:
        model.geom_solimp[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name)] = STIFF_SOLIMP
    return model


def foot_friction(model):
    """Sliding friction coefficient of a compiled description's feet (the highest of them)."""
    import mujoco

    feet = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name) for name in spec.FOOT_NAMES]
    return float(model.geom_friction[feet, 0].max())


class WarpBackend:
    """ANYmal C in the project's Warp simulator (loco_train.sim), one physics step per step()."""

    def __init__(self, module, perturbation=Perturbation()):
        """Build loco_train.sim's Simulator for one robot at the description's time step."""
        self.model = description.load_model()
        self.dt = float(self.model.opt.timestep)
        self.perturbation = perturbation
        self.sim = module.Simulator(self.model, 1, control_dt=self.dt, substeps=1)
        # ground friction: the perturbation's, else the description's feet (0.8), which MuJoCo
        # uses too (the simulator's own default is 1)
        mu = perturbation.friction if perturbation.friction >= 0.0 else foot_friction(self.model)
        self.sim.set_params(mass_offset=perturbation.payload, mu=mu)
        self._gains = None
        self.reset()

    def reset(self):
        """Put the robot at the default pose, base at the default height, at rest."""
        self.sim.set_state(description.default_qpos(), np.zeros(self.model.nv))
        self._prev_vel, self._tau = np.zeros(3), np.zeros(spec.NUM_JOINTS)
        self._steps = 0

    def step(self, command):
        """Advance one physics step with the simulator's PD actuator under command (None: hold)."""
        command = command or hold_command()
        scale = self.perturbation.gain_scale
        kp, kd = scale * command.kp, scale * command.kd  # (12,) N m/rad, N m s/rad
        limit = np.minimum(command.torque_limit, spec.TORQUE_LIMIT)
        gains = (kp.tobytes(), kd.tobytes(), limit.tobytes())
        if gains != self._gains:  # the simulator's parameters change only with the mode
            self.sim.set_params(kp=kp, kd=kd, tau_max=limit)
            self._gains = gains
        qpos, qvel = self.sim.get_state()
        self._tau = joint_command.pd_torque(command, qpos[0, 7:], qvel[0, 6:], scale)
        self._prev_vel = qvel[0, :3].copy()
        # the simulator's PD has qd* = 0: a velocity target enters as kd qd* feed-forward
        self.sim.step(targets=command.position, tau_ff=command.effort + kd * command.velocity)
        self._steps += 1

    def state(self):
        """Return the sensor view of the current state."""
        qpos, qvel = (x[0].astype(np.float64) for x in self.sim.get_state())
        quat = qpos[3:7]
        world_acc = (qvel[:3] - self._prev_vel) / self.dt - spec.GRAVITY
        return RobotState(
            time=self._steps * self.dt,
            q=qpos[7:],
            qd=qvel[6:],
            tau=self._tau.copy(),  # the PD law's torque at the last step (not a sensor)
            base_pos=qpos[:3],
            base_quat=quat,
            base_lin_vel=quat_rotate_inverse(quat, qvel[:3]),
            base_ang_vel=qvel[3:6],  # MuJoCo convention: body frame
            base_lin_acc=quat_rotate_inverse(quat, world_acc),
        )


def _warp_backend(perturbation):
    """Build the Warp backend from loco_train.sim or raise SimBackendError naming the gap."""
    try:
        module = importlib.import_module(WARP_MODULE)
    except ImportError as error:
        raise SimBackendError(
            f"backend 'warp' needs the project's Warp simulator, module {WARP_MODULE} "
            f'(loco_train/sim/) and warp-lang; importing it failed: {error}. '
            'Use backend:=mujoco until it exists.'
        ) from None
    missing = [name for name in ('Simulator',) if not hasattr(module, name)]
    if missing:
        raise SimBackendError(
            f"backend 'warp': {WARP_MODULE} has no {', '.join(missing)} (Simulator(model, "
            'num_envs, control_dt=, substeps=) with set_params, set_state, get_state, step). '
            'Use backend:=mujoco.'
        )
    return WarpBackend(module, perturbation)


def make_backend(name='mujoco', perturbation=Perturbation(), actuator=None, fixed_base=False):
    """Build the named backend ('mujoco' or 'warp'); raise SimBackendError naming the problem.

    actuator (ActuatorParams) and fixed_base are MuJoCo-only.
    """
    if name == 'mujoco':
        return MujocoBackend(perturbation, actuator, fixed_base)
    if name == 'warp':
        if actuator is not None or fixed_base:
            raise SimBackendError(
                "backend 'warp' has no actuator model or fixed base yet; use backend:=mujoco"
            )
        return _warp_backend(perturbation)
    raise SimBackendError(f'unknown backend {name!r}; choose one of {", ".join(BACKENDS)}')
