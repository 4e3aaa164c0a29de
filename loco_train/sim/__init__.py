"""Differentiable rigid-body simulator in Warp: smoothed hard contact, Moreau stepping.

    from loco_train.sim import load_model, Simulator, SimConfig, TorchSim

TorchSim (the torch autograd bridge) is imported on first use, so the numpy API does not pull
in torch.
"""

from loco_train.sim.config import CONTACT_MODELS, SimConfig
from loco_train.sim.simulator import PARAMS, Simulator


def load_model(path=None):
    """Compile the project's robot description (or the MJCF at `path`) into a mujoco.MjModel."""
    from loco_policy.description import DESCRIPTION_FILE
    from loco_policy.description import load_model as load_robot

    return load_robot(path or DESCRIPTION_FILE)


def __getattr__(name):
    """Lazy access to the torch bridge: TorchSim, StepOutput."""
    if name in ('TorchSim', 'StepOutput'):
        from loco_train.sim import torch_bridge

        return getattr(torch_bridge, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


__all__ = ['CONTACT_MODELS', 'PARAMS', 'SimConfig', 'Simulator', 'StepOutput', 'TorchSim']
__all__ += ['load_model']
