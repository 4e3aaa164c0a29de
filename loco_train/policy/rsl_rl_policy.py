"""The deterministic actor of an rsl-rl-lib PPO checkpoint (model_<iter>.pt) as a torch module.

rsl-rl-lib 5.x saves the actor as an MLPModel state dict: an observation normaliser
(x - mean) / (std + 0.01), Linear layers `mlp.0, mlp.2, ...` with an activation between them, and
a Gaussian whose mean is the MLP output. The exported policy is that mean, so PPO checkpoints go
through the same exporter as SHAC and SAC ones. The activation is `loco-train ppo`'s ELU.
"""

import json
import os
import re

import torch
from torch import nn

RSL_RL_NORMALIZER_EPS = 0.01
"""rsl_rl.modules.EmpiricalNormalization's default eps (added to the std, not the variance)."""


class RslRlActor(nn.Module):
    """obs (B, 48) -> mean action (B, 12) of an rsl-rl MLPModel actor."""

    def __init__(self, mean, std, layers):
        """mean, std (obs_dim,) of the normaliser; layers: list of (weight, bias) tensors."""
        super().__init__()
        self.register_buffer('mean', mean.reshape(-1).clone())
        self.register_buffer('denominator', std.reshape(-1).clone() + RSL_RL_NORMALIZER_EPS)
        modules = []
        for index, (weight, bias) in enumerate(layers):
            linear = nn.Linear(weight.shape[1], weight.shape[0])
            with torch.no_grad():
                linear.weight.copy_(weight)
                linear.bias.copy_(bias)
            modules.append(linear)
            if index < len(layers) - 1:
                modules.append(nn.ELU())
        self.mlp = nn.Sequential(*modules)

    def forward(self, obs):
        """Deterministic action for raw observations (B, obs_dim)."""
        return self.mlp((obs - self.mean) / self.denominator)


def is_rsl_rl_checkpoint(checkpoint):
    """Whether a loaded checkpoint dict is an rsl-rl-lib OnPolicyRunner save."""
    return (
        isinstance(checkpoint, dict) and 'actor_state_dict' in checkpoint and 'iter' in checkpoint
    )


def _run_info(checkpoint_path, key):
    """Entry `key` of run.json beside an rsl-rl checkpoint, or None."""
    path = os.path.join(os.path.dirname(os.path.abspath(checkpoint_path)), 'run.json')
    try:
        with open(path) as handle:
            return json.load(handle).get(key)
    except (OSError, ValueError, AttributeError):  # no run.json (older run), or not ours
        return None


def run_command_ranges(checkpoint_path):
    """The command ranges recorded in run.json beside an rsl-rl checkpoint, or None."""
    return _run_info(checkpoint_path, 'command_ranges')


def run_provenance(checkpoint_path):
    """The env's provenance keys recorded in run.json beside an rsl-rl checkpoint ({} if none)."""
    return dict(_run_info(checkpoint_path, 'provenance') or {})


def actor_from_checkpoint(checkpoint):
    """Return (RslRlActor, info) from a loaded rsl-rl checkpoint; ValueError when it is not one."""
    state = checkpoint['actor_state_dict']
    indices = sorted(
        int(m.group(1)) for key in state if (m := re.fullmatch(r'mlp\.(\d+)\.weight', key))
    )
    if not indices or 'obs_normalizer._mean' not in state:
        raise ValueError(
            'rsl-rl checkpoint without an MLP actor and observation normaliser '
            f'(keys: {sorted(state)[:8]}...)'
        )
    layers = [(state[f'mlp.{i}.weight'], state[f'mlp.{i}.bias']) for i in indices]
    actor = RslRlActor(state['obs_normalizer._mean'], state['obs_normalizer._std'], layers)
    infos = checkpoint.get('infos') or {}
    info = {
        'algorithm': 'ppo',
        'iterations': int(checkpoint['iter']),
        'return': float(infos.get('return', 0.0)) if isinstance(infos, dict) else 0.0,
    }
    return actor.eval(), info
