"""Simulated-robot backends (ROS-free): the PD actuator at physics rate on the robot description.

``make_backend(name, perturbation)`` returns an object with ``dt`` (physics step, s), ``reset()``,
``step(command)`` (one physics step under a JointCommand, or None to hold the default pose) and
``state()`` (a RobotState). MuJoCo is the default backend: an independent simulator, so every run
against it is also a sim2sim check. The Warp backend is the project's own simulator,
``loco_train.sim.Simulator`` (imported only when chosen; it brings warp-lang, a training
dependency); where that module is absent this fails and says what is missing.
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

    def __init__(self, perturbation=Perturbation()):
        """Compile the description and apply the perturbation."""
        import mujoco  # deferred: only the simulated robot needs MuJoCo

        self._mj = mujoco
        self.model = description.load_model()
        self.perturbation = perturbation
        base = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, spec.BASE_BODY)
        self.model.body_mass[base] += perturbation.payload
        if perturbation.friction >= 0.0:
            self.model.geom_friction[:, 0] = perturbation.friction
        self.data = mujoco.MjData(self.model)
        self.dt = float(self.model.opt.timestep)
        self.reset()

    def reset(self):
        """Put the robot at the default pose, base at the default height, at rest."""
        self._mj.mj_resetData(self.model, self.data)
        self.data.qpos[:] = description.default_qpos()
        self._mj.mj_forward(self.model, self.data)
        self._prev_vel = np.zeros(3)

    def step(self, command):
        """Advance one physics step (dt) with PD torques from command (None: hold)."""
        command = command or hold_command()
        q, qd = self.data.qpos[7:], self.data.qvel[6:]
        self.data.ctrl[:] = joint_command.pd_torque(command, q, qd, self.perturbation.gain_scale)
        self._prev_vel = self.data.qvel[:3].copy()
        self._mj.mj_step(self.model, self.data)

    def state(self):
        """Return the sensor view of the current state."""
        quat = self.data.qpos[3:7].copy()
        world_vel = self.data.qvel[:3].copy()
        world_acc = (world_vel - self._prev_vel) / self.dt - spec.GRAVITY
        return RobotState(
            time=float(self.data.time),
            q=self.data.qpos[7:].copy(),
            qd=self.data.qvel[6:].copy(),
            tau=self.data.ctrl.copy(),
            base_pos=self.data.qpos[:3].copy(),
            base_quat=quat,
            base_lin_vel=quat_rotate_inverse(quat, world_vel),
            base_ang_vel=self.data.qvel[3:6].copy(),  # MuJoCo: body frame already
            base_lin_acc=quat_rotate_inverse(quat, world_acc),
        )


class WarpBackend:
    """ANYmal C in the project's Warp simulator (loco_train.sim), one physics step per step()."""

    def __init__(self, module, perturbation=Perturbation()):
        """Build loco_train.sim's Simulator for one robot at the description's time step."""
        self.model = description.load_model()
        self.dt = float(self.model.opt.timestep)
        self.perturbation = perturbation
        self.sim = module.Simulator(self.model, 1, control_dt=self.dt, substeps=1)
        params = {'mass_offset': perturbation.payload}
        if perturbation.friction >= 0.0:
            params['mu'] = perturbation.friction
        self.sim.set_params(**params)
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


def make_backend(name='mujoco', perturbation=Perturbation()):
    """Build the named backend ('mujoco' or 'warp'); raise SimBackendError naming the problem."""
    if name == 'mujoco':
        return MujocoBackend(perturbation)
    if name == 'warp':
        return _warp_backend(perturbation)
    raise SimBackendError(f'unknown backend {name!r}; choose one of {", ".join(BACKENDS)}')
