"""Differentiable rigid-body simulator in Warp: smoothed hard contact, Moreau stepping.

from loco_train.sim import load_model, Simulator, SimConfig, TorchSim
"""

from loco_train.sim.config import CONTACT_MODELS, SimConfig
from loco_train.sim.simulator import PARAMS, Simulator


def load_model(path=None):
    """Compile the project's robot description (or the MJCF at `path`) into a mujoco.MjModel."""
    from loco_policy.description import DESCRIPTION_FILE
    from loco_policy.description import load_model as load_robot

    return load_robot(path or DESCRIPTION_FILE)


__all__ = ['CONTACT_MODELS', 'PARAMS', 'SimConfig', 'Simulator', 'load_model']
