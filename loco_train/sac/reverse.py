"""Hand-written reverse passes of the SAC losses: the gradients of J_Q and J_pi without autograd.

The update's networks are small MLPs (SB3's default: 256 x 256 on a batch of 256), where
autograd's graph building and bookkeeping cost about as much time on a CPU as the matrix
products themselves. These passes compute the same losses with the same forward code and
write the gradients straight from the saved pre-activations: the products are those autograd
runs (none more), and everything else is a few fused elementwise operations per layer.

Covered: the actor and critic of `loco_train.sac` with relu, elu, silu or tanh hidden layers,
no critic layer norm (`supports`); anything else keeps autograd. The gradients equal
autograd's to float32 rounding (test/test_sac_reverse.py). With `dtype` bfloat16 the hidden
layers' products (forward, and both products of their reverse) take bfloat16 operands and
accumulate in float32, as under a bfloat16 autocast; pre-activations, activations, the output
heads and every gradient the optimisers see stay float32 (test/test_sac_precision.py). Shapes:
N critics, B batch, o observation, d action dimensions.
"""

import torch
from torch import nn
import torch.nn.functional as F

from loco_train.sac.actor import squashed_log_prob, SquashedGaussianActor
from loco_train.sac.critic import EnsembleLinear, QEnsemble

aten = torch.ops.aten

FORWARD = {'relu': torch.relu, 'elu': F.elu, 'silu': F.silu, 'tanh': torch.tanh}
"""Hidden activations h = f(z) the passes know, by SACConfig.activation name."""


ACTIVATION_MODULES = (nn.ReLU, nn.ELU, nn.SiLU, nn.Tanh)


def activation_backward(name: str, dh: torch.Tensor, z: torch.Tensor, h: torch.Tensor):
    """dL/dz from dL/dh for h = f(z), with the kernels autograd itself uses."""
    if name == 'relu':
        return aten.threshold_backward(dh, h, 0.0)
    if name == 'tanh':
        return aten.tanh_backward(dh, h)
    if name == 'elu':
        return aten.elu_backward(dh, 1.0, 1, 1.0, True, h)
    return aten.silu_backward(dh, z)


def product(op, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """op(a, b) (torch.mm or torch.bmm) on `dtype` operands, as a float32 result."""
    if dtype == torch.float32:
        return op(a, b)
    return op(a.to(dtype), b.to(dtype)).float()


def weight_gradient(
    dz: torch.Tensor, h: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """dL/dW (out, in) of z = h W^T + b from dz (B, out) and h (B, in), on `dtype` operands.

    With few inputs (an observation layer) h^T dz, transposed, runs several times faster on a
    CPU than dz^T h (11 x 256 outputs: 28 against 116 us).
    """
    if h.shape[1] < dz.shape[1]:
        return product(torch.mm, h.t(), dz, dtype).t().contiguous()
    return product(torch.mm, dz.t(), h, dtype)


def supports(config, critic: QEnsemble) -> bool:
    """True when the hand-written passes cover these networks."""
    plain = all(isinstance(m, (EnsembleLinear, *ACTIVATION_MODULES)) for m in critic.net)
    hidden = sum(isinstance(m, EnsembleLinear) for m in critic.net) > 1  # da needs a hidden layer
    return plain and hidden and config.activation in FORWARD and not config.critic_layer_norm


class CriticPass:
    """Q_theta_i(s, a) (N, B) with what the reverse pass needs saved."""

    def __init__(
        self, critic: QEnsemble, activation: str, obs: torch.Tensor, action,
        dtype: torch.dtype = torch.float32,
    ):  # fmt: skip
        """dtype: the hidden layers' product operands (float32 or bfloat16)."""
        self.layers = [m for m in critic.net if isinstance(m, EnsembleLinear)]
        self.activation, self.dtype = activation, dtype
        x = torch.cat([obs, action], dim=-1)  # (B, o + d)
        h = x.unsqueeze(0).expand(critic.num_critics, *x.shape)  # (N, B, o + d)
        self.obs_dim = obs.shape[-1]
        # Layer inputs (N, B, in) and pre-activations (N, B, out), float32; the hidden layers'
        # inputs as their products' operands (the same tensors in float32).
        self.inputs, self.pre, self.operands = [], [], []
        act = FORWARD[activation]
        for layer in self.layers[:-1]:
            self.inputs.append(h)
            if dtype == torch.float32:
                self.operands.append(h)
                z = layer(h)
            else:
                self.operands.append(h.to(dtype))
                z = torch.bmm(self.operands[-1], layer.weight.to(dtype)).float() + layer.bias
            self.pre.append(z)
            h = act(z)
        self.inputs.append(h)
        self.q = self.layers[-1](h).squeeze(-1)  # (N, B)

    def backward(self, dq: torch.Tensor, weights: bool = True):
        """Reverse pass of dL/dQ (N, B).

        Returns (parameter gradients in critic.parameters() order, or None without `weights`;
        dL/da (B, d), or None with `weights`: the critic loss needs no action gradient).
        """
        grads = []
        g = dq.unsqueeze(-1)  # (N, B, 1)
        head = self.layers[-1]
        if weights:  # the head's weight gradient as a row per member: (N, in, 1)
            row = torch.bmm(g.transpose(1, 2), self.inputs[-1])  # (N, 1, B) x (N, B, in)
            grads.append((row.transpose(1, 2).contiguous(), g.sum(1, True)))
        dh = g * head.weight.transpose(1, 2)  # (N, B, in): outer product with the head's row
        da, dtype = None, self.dtype
        for i in range(len(self.layers) - 2, -1, -1):
            layer = self.layers[i]
            dz = activation_backward(self.activation, dh, self.pre[i], self.inputs[i + 1])
            if weights:
                dW = product(torch.bmm, self.operands[i].transpose(1, 2), dz, dtype)
                grads.append((dW, dz.sum(1, True)))
            if i > 0:
                dh = product(torch.bmm, dz, layer.weight.transpose(1, 2), dtype)  # (N, B, in)
            elif not weights:
                w_a = layer.weight[:, self.obs_dim :, :]  # (N, d, out): the action's rows
                da = product(torch.bmm, dz, w_a.transpose(1, 2), dtype).sum(0)  # (B, d)
        if not weights:
            return None, da
        return [t for pair in reversed(grads) for t in pair], None


class ActorPass:
    """a = f_phi(eps; s) (B, d) and log pi(a|s) (B,) with what the reverse pass needs saved."""

    def __init__(
        self, actor: SquashedGaussianActor, activation: str, s, eps,
        dtype: torch.dtype = torch.float32,
    ):  # fmt: skip
        """dtype: the trunk's product operands (float32 or bfloat16; the head's are float32)."""
        self.actor, self.activation, self.dtype = actor, activation, dtype
        self.linears = [m for m in actor.trunk if isinstance(m, nn.Linear)]
        act = FORWARD[activation]
        self.inputs, self.pre = [], []  # float32 layer inputs (B, in), pre-activations (B, out)
        h = s
        for layer in self.linears:
            self.inputs.append(h)
            if dtype == torch.float32:
                z = F.linear(h, layer.weight, layer.bias)
            else:
                z = F.linear(h.to(dtype), layer.weight.to(dtype)).float() + layer.bias
            self.pre.append(z)
            h = act(z)
        self.inputs.append(h)
        z = F.linear(h, actor.head.weight, actor.head.bias)  # (B, 2d)
        mu, self.raw_log_sigma = z.chunk(2, dim=-1)
        log_sigma = self.raw_log_sigma.clamp(*actor.log_sigma_bounds)
        self.sigma_eps = log_sigma.exp() * eps  # (B, d)
        x = mu + self.sigma_eps  # (B, d) latent action
        self.tanh_x = torch.tanh(x)
        self.action = actor.b + actor.c * self.tanh_x  # (B, d)
        self.log_pi = squashed_log_prob(x, mu, log_sigma, actor.c)  # (B,)

    def rows(self, start: int) -> 'ActorPass':
        """The same pass for rows start: of the batch only (views, no copies)."""
        part = object.__new__(ActorPass)
        part.actor, part.activation, part.linears = self.actor, self.activation, self.linears
        part.dtype = self.dtype
        part.inputs = [h[start:] for h in self.inputs]
        part.pre = [z[start:] for z in self.pre]
        for name in ('raw_log_sigma', 'sigma_eps', 'tanh_x', 'action', 'log_pi'):
            setattr(part, name, getattr(self, name)[start:])
        return part

    def backward(self, dlog_pi: torch.Tensor, da: torch.Tensor) -> list[torch.Tensor]:
        """Gradients in actor.parameters() order from dL/dlog pi (B,) and dL/da (B, d).

        log pi's Gaussian term, -(x - mu)^2 / 2 sigma^2 with x = mu + sigma eps, is -eps^2 / 2
        whatever mu and sigma: its total derivative is 0. What is left: d(-log(1 - tanh^2 x))/dx
        = 2 tanh x, and -1 per dimension from -log sigma.
        """
        actor, t, w = self.actor, self.tanh_x, dlog_pi.unsqueeze(-1)  # w (B, 1)
        dx = torch.addcmul(2.0 * w * t, da * actor.c, 1.0 - t * t)  # dL/dx (B, d)
        low, high = actor.log_sigma_bounds
        inside = (self.raw_log_sigma >= low) & (self.raw_log_sigma <= high)  # clamp's pass
        dlog_sigma = torch.where(inside, dx * self.sigma_eps - w, 0.0)  # (B, d)
        dz = torch.cat([dx, dlog_sigma], dim=-1)  # (B, 2d): dL/d[mu, raw log sigma]
        grads = [weight_gradient(dz, self.inputs[-1]), dz.sum(0)]  # the head's (2d, H), (2d,)
        dh = dz @ actor.head.weight  # (B, H)
        for i in range(len(self.linears) - 1, -1, -1):
            dz = activation_backward(self.activation, dh, self.pre[i], self.inputs[i + 1])
            grads = [weight_gradient(dz, self.inputs[i], self.dtype), dz.sum(0), *grads]
            if i > 0:
                dh = product(torch.mm, dz, self.linears[i].weight, self.dtype)  # (B, in)
        return grads
