"""Short-horizon actor-critic (Xu et al. 2022) through the differentiable simulator."""

from loco_train.shac.shac import SHAC, SHACConfig

__all__ = ['SHAC', 'SHACConfig']
