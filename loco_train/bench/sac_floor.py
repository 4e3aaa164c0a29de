"""The floor of a SAC update on this machine: its matrix products and activations, nothing else.

One update that steps the actor needs these products whatever the implementation: the actor on
s~ and s, the target critics on (s~, a~), the critics on (s, a) with their weight and input
gradients, the critics on (s, pi(s)) with the action's gradient, and the actor's own gradients.
Timed alone, on the learner's own weights and shapes (no sampling, losses, log-probabilities,
optimiser or checks), they bound the update rate any float32 implementation can reach here.
"""

import torch
from torch import nn
import torch.nn.functional as F

from loco_train.sac.critic import EnsembleLinear
from loco_train.sac.reverse import activation_backward, FORWARD, weight_gradient


def products_only(sac, batch_size: int, seed: int = 0):
    """step(n): n times the products and activations of one update of `sac` (actor included)."""
    name = sac.cfg.activation
    act = FORWARD[name]
    critic = [m for m in sac.critic.net if isinstance(m, EnsembleLinear)]
    target = [m for m in sac.critic_target.net if isinstance(m, EnsembleLinear)]
    actor = [m for m in sac.actor.trunk if isinstance(m, nn.Linear)] + [sac.actor.head]
    N, B = critic[0].weight.shape[0], batch_size  # critics, batch
    o, d = sac.actor_kwargs['obs_dim'], sac.actor.action_dim  # observation, action dimensions
    g = torch.Generator().manual_seed(seed)
    s2 = torch.randn(2 * B, o, generator=g)  # (2B, o): s~ then s, one actor pass as the learner's
    a = torch.rand(B, d, generator=g) * 2 - 1  # (B, d)

    def actor_forward(x):
        h, z = [x], []
        for layer in actor[:-1]:
            z.append(F.linear(h[-1], layer.weight, layer.bias))
            h.append(act(z[-1]))
        return h, z, F.linear(h[-1], actor[-1].weight, actor[-1].bias)  # (rows, 2d)

    def actor_backward(h, z, dz):
        weight_gradient(dz, h[-1])
        dh = dz @ actor[-1].weight
        for i in range(len(z) - 1, -1, -1):
            dz = activation_backward(name, dh, z[i], h[i + 1])
            weight_gradient(dz, h[i])
            if i > 0:
                dh = dz @ actor[i].weight

    def critic_forward(layers, x):
        h, z = [x.unsqueeze(0).expand(N, *x.shape)], []
        for layer in layers[:-1]:
            z.append(layer(h[-1]))
            h.append(act(z[-1]))
        return h, z, layers[-1](h[-1])  # (N, B, 1)

    def critic_backward(layers, h, z, g, weights):
        if weights:
            torch.bmm(g.transpose(1, 2), h[-1])
        dh = g * layers[-1].weight.transpose(1, 2)
        for i in range(len(z) - 1, -1, -1):
            dz = activation_backward(name, dh, z[i], h[i + 1])
            if weights:
                torch.bmm(h[i].transpose(1, 2), dz)
            if i > 0:
                dh = torch.bmm(dz, layers[i].weight.transpose(1, 2))
            elif not weights:
                torch.bmm(dz, layers[0].weight[:, o:, :].transpose(1, 2))

    @torch.no_grad()
    def step(n: int) -> None:
        for _ in range(n):
            h, z, out = actor_forward(s2)
            a_pi = torch.tanh(out[:, :d])
            critic_forward(target, torch.cat([s2[:B], a_pi[:B]], dim=-1))
            ch, cz, q = critic_forward(critic, torch.cat([s2[B:], a], dim=-1))
            critic_backward(critic, ch, cz, q, True)
            ch, cz, q = critic_forward(critic, torch.cat([s2[B:], a_pi[B:]], dim=-1))
            critic_backward(critic, ch, cz, q, False)
            actor_backward([x[B:] for x in h], [x[B:] for x in z], out[B:])

    return step
