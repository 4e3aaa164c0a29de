"""The critic ensemble's one batched pass equals N separate Q-networks with the same weights."""

import pytest
import torch
from torch import nn

from loco_train.sac.critic import EnsembleLayerNorm, EnsembleLinear, QEnsemble

OBS, ACT, B, N = 5, 2, 64, 3


def separate_networks(ensemble: QEnsemble) -> list[nn.Sequential]:
    """N ordinary nn.Linear MLPs holding copies of member i's weights."""
    nets = []
    for i in range(ensemble.num_critics):
        layers = []
        for layer in ensemble.net:
            if isinstance(layer, EnsembleLinear):
                linear = nn.Linear(*layer.weight.shape[1:])
                with torch.no_grad():
                    linear.weight.copy_(layer.weight[i].T)  # (out, in)
                    linear.bias.copy_(layer.bias[i, 0])
                layers.append(linear)
            elif isinstance(layer, EnsembleLayerNorm):
                norm = nn.LayerNorm(layer.weight.shape[-1], eps=layer.eps)
                with torch.no_grad():
                    norm.weight.copy_(layer.weight[i, 0])
                    norm.bias.copy_(layer.bias[i, 0])
                layers.append(norm)
            else:
                layers.append(type(layer)())
        nets.append(nn.Sequential(*layers))
    return nets


@pytest.mark.parametrize('layer_norm', [False, True])
def test_batched_ensemble_gives_the_same_values_losses_and_gradients(layer_norm):
    torch.manual_seed(0)
    ensemble = QEnsemble(
        OBS, ACT, num_critics=N, hidden=(32, 16), activation='elu', layer_norm=layer_norm
    )
    if layer_norm:  # members with gains and biases of their own, not the identity
        with torch.no_grad():
            for layer in ensemble.net:
                if isinstance(layer, EnsembleLayerNorm):
                    layer.weight.uniform_(0.5, 1.5)
                    layer.bias.uniform_(-0.5, 0.5)
    nets = separate_networks(ensemble)
    obs, action, target = torch.randn(B, OBS), torch.randn(B, ACT), torch.randn(B)

    q = ensemble(obs, action)  # (N, B) in one pass
    loss = ((q - target) ** 2).mean(dim=1).mean()  # J_Q as SAC.update forms it
    loss.backward()

    x = torch.cat([obs, action], dim=-1)
    q_each = torch.stack([net(x).squeeze(-1) for net in nets])  # (N, B), one net at a time
    loss_each = sum(((q_i - target) ** 2).mean() for q_i in q_each) / N
    loss_each.backward()

    torch.testing.assert_close(q, q_each, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss, loss_each, rtol=1e-5, atol=1e-6)
    linears = [layer for layer in ensemble.net if isinstance(layer, EnsembleLinear)]
    for depth, layer in enumerate(linears):
        for i, net in enumerate(nets):
            reference = [m for m in net if isinstance(m, nn.Linear)][depth]
            torch.testing.assert_close(layer.weight.grad[i], reference.weight.grad.T)
            torch.testing.assert_close(layer.bias.grad[i, 0], reference.bias.grad)
    norms = [layer for layer in ensemble.net if isinstance(layer, EnsembleLayerNorm)]
    assert len(norms) == (2 if layer_norm else 0)
    for depth, layer in enumerate(norms):
        for i, net in enumerate(nets):
            reference = [m for m in net if isinstance(m, nn.LayerNorm)][depth]
            torch.testing.assert_close(layer.weight.grad[i, 0], reference.weight.grad)
            torch.testing.assert_close(layer.bias.grad[i, 0], reference.bias.grad)
    assert ensemble.min_q(obs, action).shape == (B,)
    torch.testing.assert_close(ensemble.min_q(obs, action), q_each.min(dim=0).values)


def test_action_gradient_through_the_frozen_ensemble_matches():
    """The actor's path: d min_i Q_i(s, a) / da with the critics frozen, batched vs separate."""
    torch.manual_seed(1)
    ensemble = QEnsemble(OBS, ACT, num_critics=2, hidden=(32, 32))
    nets = separate_networks(ensemble)
    ensemble.requires_grad_(False)
    obs = torch.randn(B, OBS)
    a1 = torch.randn(B, ACT, requires_grad=True)
    a2 = a1.detach().clone().requires_grad_(True)
    ensemble.min_q(obs, a1).sum().backward()
    x = torch.cat([obs, a2], dim=-1)
    torch.stack([net(x).squeeze(-1) for net in nets]).min(dim=0).values.sum().backward()
    torch.testing.assert_close(a1.grad, a2.grad)
    assert all(p.grad is None for p in ensemble.parameters())
