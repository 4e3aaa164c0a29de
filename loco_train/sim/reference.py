"""MuJoCo reference runs for the simulator: checks (tests) and the benchmark use the same ones."""

import mujoco
import numpy as np

from loco_policy import spec
from loco_policy.description import default_qpos, load_model
from loco_policy.sim.backends import STIFF_SOLIMP


def robot(damping=True):
    """The robot description; without joint damping and friction loss when damping=False."""
    model = load_model()
    if not damping:
        model.dof_damping[:] = 0.0
        model.dof_frictionloss[:] = 0.0
    return model


def random_states(model, n, rng, speed=1.0):
    """N random (qpos, qvel): base anywhere, random unit quaternion, joints within +-1 rad."""
    qpos = np.tile(default_qpos(), (n, 1))
    qpos[:, :3] = rng.normal(size=(n, 3))
    quat = rng.normal(size=(n, 4))
    qpos[:, 3:7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    qpos[:, 7:] = rng.uniform(-1.0, 1.0, size=(n, model.nq - 7))
    return qpos, speed * rng.normal(size=(n, model.nv))


def mujoco_stand(model, seconds=2.0, qpos=None):
    """Qpos after standing `seconds` under the spec's PD gains in MuJoCo (explicit PD per step)."""
    data = mujoco.MjData(model)
    data.qpos[:] = default_qpos() if qpos is None else qpos
    for _ in range(int(round(seconds / model.opt.timestep))):
        torque = spec.KP * (spec.DEFAULT_JOINT_POS - data.qpos[7:]) - spec.KD * data.qvel[6:]
        data.ctrl[:] = np.clip(torque, -spec.TORQUE_LIMIT, spec.TORQUE_LIMIT)
        mujoco.mj_step(model, data)
    return data.qpos.copy()


def stiff_contacts(model):
    """Stiffen MuJoCo's contacts (solref 5 ms, solimp 0.9-0.95 over 1 mm) to match hard contact.

    The description's foot solimp (0.015 1 0.031) lets the feet sink ~18 mm in MuJoCo; a hard
    contact model does not sink, so the height comparison uses this copy.
    """
    model.geom_solimp[:] = STIFF_SOLIMP
    model.geom_solref[:] = [0.005, 1.0]
    return model
