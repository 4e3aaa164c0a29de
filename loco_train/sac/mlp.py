"""Multilayer perceptrons shared by the SAC actor and critics."""

from torch import nn

ACTIVATIONS = {'relu': nn.ReLU, 'elu': nn.ELU, 'tanh': nn.Tanh, 'silu': nn.SiLU}
"""Activation names accepted by the config dataclasses."""


def mlp(
    in_dim: int, hidden: tuple[int, ...], activation: str = 'relu', layer_norm: bool = False
) -> nn.Sequential:
    """Return Linear-activation layers mapping in_dim to hidden[-1] (no output head).

    layer_norm: each activation is followed by a LayerNorm of its width (Xu et al.'s SHAC
    networks), which bounds every hidden layer's scale whatever a large step did to the weights.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f'unknown activation {activation!r}; choose from {sorted(ACTIVATIONS)}')
    layers, width = [], in_dim
    for size in hidden:
        layers += [nn.Linear(width, size), ACTIVATIONS[activation]()]
        if layer_norm:
            layers.append(nn.LayerNorm(size))
        width = size
    return nn.Sequential(*layers)
