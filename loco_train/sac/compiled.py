"""SAC's update as one torch.compile graph, built on the hand-written reverse passes.

At Stable-Baselines3's settings (256 x 256 networks, batch 256) a CPU update spends a quarter of
its time between the matrix products: a few hundred small operations, each a Python call and a
kernel of its own. With the reverse passes (loco_train.sac.reverse) the whole update is tensor
code without autograd, so torch.compile traces it as one graph: the products stay aten's, and
the elementwise work between them (activations, losses, log-probabilities, the clip, Adam, the
Polyak average, the metrics) is fused into a few C++ loops. There are two graphs, the critic
step alone and the critic step with the actor and temperature steps; the first call of each
compiles (about 20 s on a 2-core CPU, cached on disk after). The optimiser step is Adam as
torch's fused kernel computes it, on the optimisers' own state. What the graphs do not cover
runs SAC's eager update: the first call (no optimiser state yet), a rank's part of a global
batch, an optimiser other than one group of plain Adam (a warning, once). A graph that fails
to compile (no C++ compiler, say) warns once and leaves every later update eager.
"""

import warnings

import torch
from torch._dynamo.exc import TorchDynamoException

from loco_train.sac.batch import Batch


class CompiledUpdate:
    """Runs SAC's reverse-pass update from torch.compile graphs (see the module docstring)."""

    def __init__(self, sac):
        if not sac.reverse:
            raise ValueError('the compiled update needs the reverse passes (sac.reverse)')
        self.sac = sac
        self.graph = torch.compile(self.body, dynamic=False)
        self.failed = None  # the compile error, once one happened: every update is eager since
        self.warned_optimiser = False  # an optimiser the graph does not serve was reported

    def __call__(self, batch: Batch, generator, with_actor: bool) -> dict:
        """One update on `batch` (on the device); metrics as SAC.update returns them."""
        sac = self.sac
        optims = (sac.critic_optim, sac.actor_optim, sac.alpha_optim)
        unserved = [o for o in optims if not plain_adam(o)]
        if unserved and not self.warned_optimiser:
            self.warned_optimiser = True
            names = ', '.join(
                f'{type(o).__name__} with {len(o.param_groups)} group(s)' for o in unserved
            )
            warnings.warn(
                f'the compiled SAC update serves one group of plain Adam; {names}: '
                'running the update eagerly',
                stacklevel=3,
            )
        if (
            self.failed is not None
            or batch.part is not None
            or sac.grad_sync is not None
            or not all(map(plain_adam_with_state, optims))
        ):
            return sac._update_body(batch, generator, with_actor)
        B, d = batch.action.shape
        eps = torch.randn(2, B, d, generator=generator, device=sac.device)  # as _update_body
        lr = torch.tensor([o.param_groups[0]['lr'] for o in optims], device=sac.device)
        states = [adam_state(optim) for optim in optims]
        fields = [getattr(batch, name) for name in Batch.tensor_fields()]
        try:
            with torch.no_grad():  # parameters change in place, as in an optimiser's step
                return self.graph(fields, eps, lr, states, with_actor)
        except TorchDynamoException as error:
            self.failed = error
            reason = ' '.join(str(error).split())[:400]  # its first lines: the cause, not the log
            message = f'torch.compile of the SAC update failed, running it eagerly: {reason}'
            warnings.warn(message, stacklevel=3)
            return sac._update_body(batch, generator, with_actor, eps)

    def body(self, fields, eps, lr, states, with_actor: bool) -> dict:
        """The update SAC._update_body makes on the reverse passes, as one traceable function.

        fields: the batch's tensors in Batch.tensor_fields() order; eps (2, B, d); lr (3,) of the
        critic, actor and temperature optimisers; states: their Adam states (adam_state).
        """
        sac = self.sac
        obs, action, reward, next_obs, terminated, discount = fields
        alpha = sac.log_alpha.detach().exp()
        # Batch.finite's one foreach norm is the eager choice; compiled, per-field checks fuse.
        data_ok = torch.stack([torch.isfinite(t).all() for t in fields]).all()
        J_Q, s, Q_mean, Q_target_mean, grads, actor_pass = sac.critic_loss_and_gradient(
            obs, action, reward, next_obs, terminated, discount, alpha, eps[0],
            eps_actor=eps[1] if with_actor else None,
        )  # fmt: skip
        critic_norm, ok = self.step(states[0], lr[0], J_Q, grads, data_ok)
        metrics = {
            'loss/critic': J_Q,
            'value/q_mean': Q_mean,
            'value/q_target_mean': Q_target_mean,
            'grad_norm/critic': critic_norm,
        }
        if with_actor:
            J_pi, log_pi, grads = sac.actor_loss_and_gradient(s, alpha, eps[1], actor_pass)
            actor_norm, actor_ok = self.step(states[1], lr[1], J_pi, grads, ok)
            J_alpha, dJ_alpha = sac.alpha_loss(log_pi)
            self.step(states[2], lr[2], J_alpha, [dJ_alpha], actor_ok)
            metrics.update(sac.actor_metrics(J_pi, J_alpha, log_pi, actor_norm))
        return sac._finish(metrics, ok)

    def step(self, state, lr, loss, grads, ok):
        """SAC._step's clip and masked Adam step on given gradients: (norm before the clip, ok)."""
        params, exp_avg, exp_avg_sq, steps, (beta1, beta2, eps) = state
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        max_norm = self.sac.cfg.max_grad_norm
        if max_norm is not None:  # as clip_grad_norm_: scale by min(1, max / (norm + 1e-6))
            scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
            grads = [g * scale for g in grads]
        ok = ok & torch.isfinite(torch.stack([loss, norm])).all()
        for p, g, m, v, t in zip(params, grads, exp_avg, exp_avg_sq, steps, strict=True):
            # Adam as torch's fused kernel: m, v moments, bias corrections at step t + 1.
            t1 = t + 1
            m1 = m.lerp(g, 1.0 - beta1)
            v1 = v * beta2 + (1.0 - beta2) * g * g
            step_size = lr / (1.0 - beta1**t1)
            denom = v1.sqrt() / (1.0 - beta2**t1).sqrt() + eps
            p.copy_(torch.where(ok, p - step_size * m1 / denom, p))
            m.copy_(torch.where(ok, m1, m))
            v.copy_(torch.where(ok, v1, v))
            t.copy_(torch.where(ok, t1, t))
        return norm, ok


def plain_adam(optim: torch.optim.Optimizer) -> bool:
    """True for one group of Adam without weight decay or variants (its state made or not)."""
    if not isinstance(optim, torch.optim.Adam) or len(optim.param_groups) != 1:
        return False
    group = optim.param_groups[0]
    return not (
        group['amsgrad'] or group['maximize'] or group['differentiable']
        or group['decoupled_weight_decay'] or group['weight_decay']
        or isinstance(group['lr'], torch.Tensor)
    )  # fmt: skip


def plain_adam_with_state(optim: torch.optim.Optimizer) -> bool:
    """True for a plain_adam optimiser whose every parameter has its state."""
    return plain_adam(optim) and all(p in optim.state for p in optim.param_groups[0]['params'])


def adam_state(optim: torch.optim.Optimizer):
    """(params, exp_avg, exp_avg_sq, step, (beta1, beta2, eps)) of a plain_adam_with_state Adam."""
    group = optim.param_groups[0]
    params = group['params']
    states = [optim.state[p] for p in params]
    beta1, beta2 = group['betas']
    constants = (float(beta1), float(beta2), float(group['eps']))
    return (
        params,
        [s['exp_avg'] for s in states],
        [s['exp_avg_sq'] for s in states],
        [s['step'] for s in states],
        constants,
    )
