"""The robot description shipped with the package: the MJCF, its MuJoCo loader, and its URDF.

The MJCF (anymal_c.xml) is the one description; anymal_c.urdf is generated from it
(loco_policy.description.urdf) for ROS tools: /robot_description, TF, Foxglove, RViz.
"""

import os

import numpy as np

from loco_policy import spec

DESCRIPTION_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'anymal_c.xml')
"""Absolute path of the ANYmal C description inside the installed package."""

URDF_FILE = os.path.join(os.path.dirname(DESCRIPTION_FILE), 'anymal_c.urdf')
"""Absolute path of the URDF generated from DESCRIPTION_FILE (committed, installed with it)."""


def load_model(path=DESCRIPTION_FILE):
    """Compile the robot description into a mujoco.MjModel with a free-floating base.

    Checks the contract the rest of the package relies on: one free joint on the base followed by
    the spec's joints in robot order, and a foot sphere per leg.
    """
    import mujoco  # deferred: only the simulated robot and training need MuJoCo

    model = mujoco.MjModel.from_xml_path(path)
    check_model(model)
    return model


def check_model(model):
    """Raise ValueError when a compiled model breaks the joint-order or foot contract."""
    import mujoco

    if model.njnt < 1 or model.jnt_type[0] != mujoco.mjtJoint.mjJNT_FREE:
        raise ValueError('robot description: the first joint must be the base free joint')
    if model.body(int(model.jnt_bodyid[0])).name != spec.BASE_BODY:
        raise ValueError(f'robot description: the free joint must move body {spec.BASE_BODY!r}')
    names = tuple(model.joint(i).name for i in range(1, model.njnt))
    if names != spec.JOINT_NAMES:
        raise ValueError(f'robot description: joints {names} differ from spec {spec.JOINT_NAMES}')
    if model.nq != 7 + spec.NUM_JOINTS or model.nv != 6 + spec.NUM_JOINTS:
        raise ValueError(f'robot description: nq={model.nq}, nv={model.nv}, expected 19 and 18')
    for foot in spec.FOOT_NAMES:
        if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, foot) < 0:
            raise ValueError(f'robot description: no foot geom {foot!r}')


def default_qpos():
    """Return qpos (19,) of the robot standing at the default pose, base at DEFAULT_BASE_HEIGHT."""
    qpos = np.zeros(7 + spec.NUM_JOINTS)
    qpos[2] = spec.DEFAULT_BASE_HEIGHT
    qpos[3] = 1.0
    qpos[7:] = spec.DEFAULT_JOINT_POS
    return qpos


def urdf_path():
    """Absolute path of the package's URDF; raise FileNotFoundError when it is not installed."""
    if not os.path.isfile(URDF_FILE):
        raise FileNotFoundError(
            f'robot description: {URDF_FILE} is missing; regenerate it with '
            'python -m loco_policy.description.urdf -o ' + URDF_FILE
        )
    return URDF_FILE


def load_urdf(path=None):
    """Return the URDF text (the /robot_description contents) of the package or of path."""
    with open(path or urdf_path()) as handle:
        return handle.read()
