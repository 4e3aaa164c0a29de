"""Simulated-robot backends (ROS-free): the PD actuator at physics rate on the robot description.

``make_backend(name, perturbation)`` returns an object with ``dt`` (physics step, s), ``reset()``,
``step(command)`` (one physics step under a JointCommand, or None to hold the default pose) and
``state()`` (a RobotState). MuJoCo is the default backend: an independent simulator, so every run
against it is also a sim2sim check. The Warp backend is the project's own simulator from
``loco_train.sim``; where that module is absent this fails and says what is missing.
"""

from dataclasses import dataclass
import importlib

import numpy as np

from loco_policy import description, joint_command, spec
from loco_policy.observation import quat_rotate_inverse

BACKENDS = ('mujoco', 'warp')

WARP_MODULE = 'loco_train.sim'
WARP_FACTORY = 'make_sim_robot_backend'
"""loco_train.sim must expose make_sim_robot_backend(model, perturbation) -> backend object."""


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
    factory = getattr(module, WARP_FACTORY, None)
    if factory is None:
        raise SimBackendError(
            f"backend 'warp': {WARP_MODULE} exists but has no {WARP_FACTORY}(model, perturbation) "
            'returning an object with dt, reset(), step(command) and state() (see '
            'loco_policy/sim_backends.py). Use backend:=mujoco until it is added.'
        )
    return factory(description.load_model(), perturbation)


def make_backend(name='mujoco', perturbation=Perturbation()):
    """Build the named backend ('mujoco' or 'warp'); raise SimBackendError naming the problem."""
    if name == 'mujoco':
        return MujocoBackend(perturbation)
    if name == 'warp':
        return _warp_backend(perturbation)
    raise SimBackendError(f'unknown backend {name!r}; choose one of {", ".join(BACKENDS)}')
