"""Soft Actor-Critic with the four RSL-RL-SAC fixes (Sabatini, Li, Hutter).

1. bounded actions: a = b + c tanh(x) with the robot's own bounds (actor.py);
2. small initial sigma: sigma = sigma0 for every input, mean at the default pose (actor.py);
3. timeout-aware targets: bootstrap from the pre-reset observation (replay_buffer.py, vec_env);
4. n-step returns stopped at episode ends (replay_buffer.py).
"""

from loco_train.sac.actor import anymal_action_bounds, bounds_from_box, SquashedGaussianActor
from loco_train.sac.batch import Batch
from loco_train.sac.critic import QEnsemble
from loco_train.sac.replay_buffer import ReplayBuffer
from loco_train.sac.sac import SAC, SACConfig

__all__ = [
    'anymal_action_bounds',
    'bounds_from_box',
    'Batch',
    'QEnsemble',
    'ReplayBuffer',
    'SAC',
    'SACConfig',
    'SquashedGaussianActor',
]
