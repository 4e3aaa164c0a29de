"""The actuator model in MuJoCo: the robot description with native PD drives and a command delay.

Per joint three actuators, laid out [position x 12, velocity x 12, feed-forward x 12] so that
``ctrl = concat(q*, qd*, tau_ff)`` (36,):

    position:      gain kp, bias (0, -kp, -kd)   -> kp (q*_d - q) - kd qd
    velocity:      gain kd                       -> kd qd*_d
    feed-forward:  gain 1                        -> tau_ff_d

where _d is the command delayed by ``delay`` s, read from MuJoCo's actuator history by linear
interpolation (any delay, not only multiples of the physics step; the history holds
``NSAMPLE`` steps). The joint's total actuator torque is clipped by its ``actuatorfrcrange`` (the
drive's torque limit). Armature, friction and damping are the joints' ``dof_armature``,
``dof_frictionloss`` (made stiff, FRICTION_SOLIMP) and ``dof_damping``. The same compiled
model runs in ``mujoco.rollout`` (the fit) and in sim_robot's MuJoCo backend.

``fixed_base``: the base is welded in the air (the free joint removed, the base at
``HANG_HEIGHT``, contacts off): a robot hanging on its hoist.
"""

import math

import numpy as np

from loco_policy import description, spec
from loco_train.actuator.model import MAX_DELAY

HANG_HEIGHT = 1.0
"""Height (m) of the base of a fixed-base (hanging) robot: feet clear of the floor."""

LINEAR_INTERP = 1
"""MuJoCo's actuator history interpolation: 0 zero-order hold, 1 linear, 2 cubic."""

FRICTION_SOLIMP = [0.999, 0.999, 0.001, 0.5, 2.0]
"""Impedance of the joints' dry friction: nearly rigid (MuJoCo's default 0.9 lets a joint creep
at tenths of rad/s under a torque below the friction)."""

SOLVER_TOLERANCE = 1e-12
"""Constraint solver tolerance with the actuator model: the friction constraints converge to
the same forces whatever the solver's warm start (a rollout from a recorded state has none)."""

KINDS = ('pos', 'vel', 'ff')
"""Actuator kinds per joint, in ctrl order."""


def nsample(dt):
    """History samples (physics steps) that cover MAX_DELAY at physics step dt (s)."""
    return int(math.ceil(MAX_DELAY / dt)) + 2


def actuator_name(joint, kind):
    """Name of one of a joint's actuators ('pos', 'vel' or 'ff')."""
    return f'{joint}_{kind}'


def build_spec(params=None, fixed_base=False, sensors=False):
    """The description as an MjSpec, with the actuator model when params is given.

    params None keeps the description's torque motors (the PD law is then the caller's).
    sensors adds, per joint, a jointpos sensor '<joint>_q' and a jointactuatorfrc '<joint>_tau'.
    """
    import mujoco

    model_spec = mujoco.MjSpec.from_file(description.DESCRIPTION_FILE)
    if fixed_base:
        base = model_spec.body(spec.BASE_BODY)
        model_spec.delete(base.first_joint())
        base.pos = [0.0, 0.0, HANG_HEIGHT]
        model_spec.option.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    if params is not None:
        for actuator in list(model_spec.actuators):
            model_spec.delete(actuator)
        dt = model_spec.option.timestep
        model_spec.option.tolerance = SOLVER_TOLERANCE
        for j, name in enumerate(spec.JOINT_NAMES):
            joint = model_spec.joint(name)
            joint.armature = float(params.armature[j])
            joint.frictionloss = float(params.friction[j])
            joint.solref_friction = [2 * dt, 1.0]  # stiff dry friction: slow creep below it
            joint.solimp_friction = FRICTION_SOLIMP
            joint.damping = [float(params.damping[j]), 0.0, 0.0]  # linear term only
            joint.actfrclimited = mujoco.mjtLimited.mjLIMITED_TRUE
            joint.actfrcrange = [-float(spec.TORQUE_LIMIT[j]), float(spec.TORQUE_LIMIT[j])]
        kp, kd = params.kp_scale * spec.KP, params.kd_scale * spec.KD
        for kind in KINDS:
            for j, name in enumerate(spec.JOINT_NAMES):
                actuator = model_spec.add_actuator()
                actuator.name = actuator_name(name, kind)
                actuator.target = name
                actuator.trntype = mujoco.mjtTrn.mjTRN_JOINT
                actuator.ctrllimited = mujoco.mjtLimited.mjLIMITED_FALSE
                actuator.forcelimited = mujoco.mjtLimited.mjLIMITED_FALSE
                gain = np.zeros(10)
                bias = np.zeros(10)
                if kind == 'pos':
                    gain[0], bias[1], bias[2] = kp[j], -kp[j], -kd[j]
                    actuator.biastype = mujoco.mjtBias.mjBIAS_AFFINE
                else:
                    gain[0] = kd[j] if kind == 'vel' else 1.0
                actuator.gaintype = mujoco.mjtGain.mjGAIN_FIXED
                actuator.gainprm = gain
                actuator.biasprm = bias
                actuator.nsample = nsample(dt)
                actuator.interp = LINEAR_INTERP
                actuator.delay = float(params.delay)
    if sensors:  # only the measured signals: the description's own sensors go
        for sensor in list(model_spec.sensors):
            model_spec.delete(sensor)
        for name in spec.JOINT_NAMES:
            model_spec.add_sensor(
                name=f'{name}_q', type=mujoco.mjtSensor.mjSENS_JOINTPOS, objname=name,
                objtype=mujoco.mjtObj.mjOBJ_JOINT,
            )  # fmt: skip
        for name in spec.JOINT_NAMES:
            model_spec.add_sensor(
                name=f'{name}_tau', type=mujoco.mjtSensor.mjSENS_JOINTACTFRC, objname=name,
                objtype=mujoco.mjtObj.mjOBJ_JOINT,
            )  # fmt: skip
    return model_spec


class Drives:
    """Index sets of the actuator model in a compiled model, and the command -> model writes."""

    def __init__(self, model):
        """Find the 36 actuators and the 12 joints' dofs in model."""
        import mujoco

        def actuator(name):
            index = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, name)
            if index < 0:
                raise ValueError(f'model has no actuator {name!r}: not an actuator model')
            return index

        self.model = model
        self.ids = {
            kind: np.array([actuator(actuator_name(n, kind)) for n in spec.JOINT_NAMES])
            for kind in KINDS
        }
        joints = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in spec.JOINT_NAMES]
        self.joints = np.array(joints)
        self.dofs = model.jnt_dofadr[self.joints]

    def set_gains(self, kp, kd, limit):
        """Write realised gains kp, kd (12,) and torque limits (12,) into the model."""
        pos, vel = self.ids['pos'], self.ids['vel']
        self.model.actuator_gainprm[pos, 0] = kp
        self.model.actuator_biasprm[pos, 1] = -kp
        self.model.actuator_biasprm[pos, 2] = -kd
        self.model.actuator_gainprm[vel, 0] = kd
        self.model.jnt_actfrcrange[self.joints, 0] = -limit
        self.model.jnt_actfrcrange[self.joints, 1] = limit

    def set_params(self, params, commanded_kp=spec.KP, commanded_kd=spec.KD):
        """Write all of params (gains at the commanded gains (12,)) into the model."""
        self.set_gains(params.kp_scale * commanded_kp, params.kd_scale * commanded_kd,
                       self.model.jnt_actfrcrange[self.joints, 1].copy())  # fmt: skip
        self.model.dof_armature[self.dofs] = params.armature
        self.model.dof_frictionloss[self.dofs] = params.friction
        self.model.dof_damping[self.dofs] = params.damping
        self.model.actuator_delay[:] = params.delay

    def init_history(self, data, ctrl):
        """Fill every actuator's command history with ctrl (36,): the command held before t0."""
        import mujoco

        for kind_index, kind in enumerate(KINDS):
            for j, index in enumerate(self.ids[kind]):
                count = int(self.model.actuator_history[index, 0])
                if count > 0:
                    value = np.full(count, ctrl[kind_index * spec.NUM_JOINTS + j])
                    mujoco.mj_initCtrlHistory(self.model, data, int(index), None, value)


def command_ctrl(command):
    """Ctrl (36,) of the actuator model for a JointCommand: q*, qd*, tau_ff."""
    return np.concatenate([command.position, command.velocity, command.effort])
