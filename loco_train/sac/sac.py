"""Soft Actor-Critic as in Sabatini, Li, Hutter (RSL-RL-SAC): the update, and nothing else.

SAC.update(batch) -> metrics does no I/O and knows no environment: simulator training and the
online fine-tuning sidecar call it unchanged. Shapes: B batch, N critics, d action dimensions.
"""

from dataclasses import asdict, dataclass
import math

import torch
from torch import nn

from loco_train.policy.normalizer import EmpiricalNormalizer
from loco_train.sac.actor import SquashedGaussianActor
from loco_train.sac.batch import Batch
from loco_train.sac.compiled import CompiledUpdate
from loco_train.sac.critic import make_target, polyak_update, QEnsemble
from loco_train.sac.graphs import GraphedUpdate
from loco_train.sac.precision import matmul_autocast, resolve
from loco_train.sac.reverse import ActorPass, CriticPass, supports


@dataclass
class SACConfig:
    """Hyperparameters of the SAC update; the defaults learn gymnasium's Pendulum-v1 on CPU."""

    actor_hidden: tuple[int, ...] = (128, 128)
    """Hidden layer widths of the actor MLP."""
    critic_hidden: tuple[int, ...] = (128, 128)
    """Hidden layer widths of each critic MLP."""
    activation: str = 'relu'
    """Hidden activation of actor and critics: relu, elu, tanh or silu."""
    critic_layer_norm: bool = False
    """Layer normalisation before each hidden activation of the critics."""
    num_critics: int = 2
    """N, the number of Q-networks in the ensemble; targets take the minimum over them."""
    gamma: float = 0.99
    """Discount factor gamma."""
    n_step: int = 3
    """n of the n-step return; the window stops early at episode ends (fix 4)."""
    tau: float = 0.005
    """Polyak rate: thetabar <- tau theta + (1 - tau) thetabar after every critic update."""
    batch_size: int = 256
    """Transitions per gradient update."""
    utd_ratio: float = 0.25
    """Update-to-data ratio: gradient updates per collected transition (fractions accumulate)."""
    actor_lr: float = 1e-3
    """Adam learning rate of the actor."""
    critic_lr: float = 1e-3
    """Adam learning rate of the critic ensemble."""
    alpha_lr: float = 1e-3
    """Adam learning rate of log alpha."""
    init_alpha: float = 0.2
    """Initial temperature alpha."""
    target_entropy: float | None = None
    """Target entropy H_bar for the automatic temperature; None means -d."""
    actor_update_interval: int = 1
    """Delayed actor: the actor and alpha are updated once every this many critic updates."""
    max_grad_norm: float | None = 10.0
    """Gradient-norm clip applied to each network's gradient before its optimiser step (None:
    no clip; the norm is still measured, and a non-finite one skips the step)."""
    sigma0: float = 0.15
    """Initial policy standard deviation sigma0 of the latent Gaussian, for every input (fix 2)."""
    log_sigma_bounds: tuple[float, float] = (-5.0, 2.0)
    """[l_min, l_max]: the clamp applied to the log-std head."""
    mean_init_std: float = 1e-4
    """Standard deviation epsilon of the mean-head weights at initialisation (bias is 0)."""
    normalize_obs: bool = True
    """Normalise observations with the running EmpiricalNormalizer (exported with the actor)."""
    compile: bool = False
    """torch.compile the update: the whole update as one graph where the reverse passes cover
    the networks (loco_train.sac.compiled), else the critic and actor losses with autograd;
    eager if compiling fails."""
    cuda_graphs: bool = False
    """Replay update() from captured CUDA graphs (loco_train.sac.graphs): CUDA only, float32
    products, one batch size; a GPU update is otherwise bound by its ~330 kernel launches."""
    matmul_dtype: str = 'float32'
    """Precision of the hidden layers' matrix products in update(): 'float32', 'bfloat16', or
    'auto' (bfloat16 on a CPU with AVX512-BF16 or AMX, float32 elsewhere; see
    loco_train.sac.precision). Weights, optimiser states, heads, targets and acting stay
    float32. float32 by default: at 50k steps bfloat16's Hopper mean fell below
    Stable-Baselines3's; the ANYmal preset takes 'auto' (docs/training.md)."""


def adam(params, lr: float) -> torch.optim.Optimizer:
    """Adam with the fused kernel (one pass over all tensors) where torch has it, else foreach."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except RuntimeError:  # a device or dtype without the fused kernel
        return torch.optim.Adam(params, lr=lr, foreach=True)


def masked_step(optim: torch.optim.Optimizer, ok: torch.Tensor) -> None:
    """optim.step() where the 0-d bool ok is true, without reading ok on the host if fused.

    The fused Adam kernel takes found_inf, the flag torch's GradScaler uses to skip a step: with
    found_inf = 1 the weights, moments and step count stay as they were.
    """
    if all(group.get('fused') for group in optim.param_groups):  # also after a load
        found_inf = (~ok).float()
        if fused_adam_step(optim, found_inf):
            return
        optim.found_inf = found_inf
        try:
            optim.step()
        finally:
            del optim.found_inf
    elif bool(ok):  # foreach fallback: one device read
        optim.step()


def fused_adam_step(optim: torch.optim.Optimizer, found_inf: torch.Tensor) -> bool:
    """Adam.step() of a fused Adam as torch computes it, called straight; False if not covered.

    torch.optim's step spends about as long in Python (hooks, grouping by device, state checks)
    as the fused kernel takes on an update's few small tensors; this is the same kernel on the
    optimiser's own state, for plain Adam whose state exists (after the first step).
    """
    for group in optim.param_groups:
        params = [p for p in group['params'] if p.grad is not None]
        plain = not (
            group['amsgrad'] or group['maximize'] or group['capturable']
            or group['differentiable'] or group['decoupled_weight_decay']
        )  # fmt: skip
        states = [optim.state.get(p) for p in params]
        if not plain or not all(states) or isinstance(group['lr'], torch.Tensor):
            return False
    for group in optim.param_groups:
        params = [p for p in group['params'] if p.grad is not None]
        if not params:
            continue
        states = [optim.state[p] for p in params]
        steps = [state['step'] for state in states]
        beta1, beta2 = group['betas']
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            params, [p.grad for p in params],
            [state['exp_avg'] for state in states], [state['exp_avg_sq'] for state in states],
            [], steps, amsgrad=False, lr=group['lr'], beta1=beta1, beta2=beta2,
            weight_decay=group['weight_decay'], eps=group['eps'], maximize=False,
            grad_scale=None, found_inf=found_inf,
        )  # fmt: skip
        torch._foreach_sub_(steps, [found_inf] * len(steps))
    return True


def compiled_or_eager(fn):
    """torch.compile(fn), run eagerly from the first call on which compiling fails."""
    import warnings

    from torch._dynamo.exc import TorchDynamoException

    compiled = torch.compile(fn, dynamic=False)
    use = [compiled]

    def call(*args):
        try:
            return use[0](*args)
        except TorchDynamoException as error:
            if use[0] is fn:
                raise
            message = f'torch.compile failed, running {fn.__name__} eagerly: {error}'
            warnings.warn(message, stacklevel=2)
            use[0] = fn
            return fn(*args)

    return call


class SAC:
    """Actor pi_phi, critics Q_theta_i with targets Q_thetabar_i, temperature alpha; update()."""

    ACTOR_METRICS = ('loss/actor', 'loss/alpha', 'policy/entropy', 'grad_norm/actor')
    """The metrics update() reports only on the calls that step the actor."""

    def __init__(self, obs_dim: int, action_bias, action_scale, config: SACConfig, device='cpu'):
        self.cfg, self.device = config, torch.device(device)
        self.normalizer = EmpiricalNormalizer(obs_dim).to(self.device)
        # Plain values only: the exporter rebuilds the actor from these (loco_train.policy.export).
        self.actor_kwargs = {
            'obs_dim': int(obs_dim),
            'action_bias': [float(v) for v in torch.as_tensor(action_bias).reshape(-1)],
            'action_scale': [float(v) for v in torch.as_tensor(action_scale).reshape(-1)],
            'hidden': tuple(config.actor_hidden),
            'activation': config.activation,
            'sigma0': config.sigma0,
            'log_sigma_bounds': tuple(config.log_sigma_bounds),
            'mean_init_std': config.mean_init_std,
        }
        self.actor = SquashedGaussianActor(**self.actor_kwargs).to(self.device)
        d = self.actor.action_dim
        self.critic = QEnsemble(
            obs_dim,
            d,
            config.num_critics,
            tuple(config.critic_hidden),
            config.activation,
            config.critic_layer_norm,
        ).to(self.device)
        self.critic_target = make_target(self.critic)
        self.log_alpha = torch.tensor(
            math.log(config.init_alpha), device=self.device, requires_grad=True
        )
        self.target_entropy = (
            float(-d) if config.target_entropy is None else float(config.target_entropy)
        )
        self.actor_optim = adam(self.actor.parameters(), config.actor_lr)
        self.critic_optim = adam(self.critic.parameters(), config.critic_lr)
        self.alpha_optim = adam([self.log_alpha], config.alpha_lr)
        self.num_calls = 0  # update() calls; the delayed actor counts these (no device read)
        # Data parallel: grad_sync(params, ok, share) -> ok combines every rank's gradients of
        # its share of the global batch and every rank's ok flag (loco_train.runners). None:
        # one process.
        self.grad_sync = None
        self._share = 1.0  # B_r / B_total of the batch being updated on
        self._skipped = torch.zeros((), device=self.device)  # rejected batches, on the device
        self.matmul_dtype = resolve(config.matmul_dtype, self.device)
        self._graphed = GraphedUpdate(self) if config.cuda_graphs else None
        # The hand-written reverse passes (loco_train.sac.reverse) where they cover the networks;
        # autograd otherwise, and for CUDA graphs, whose capture is tested with autograd.
        self.reverse = supports(config, self.critic) and not config.cuda_graphs
        self._critic_loss, self._actor_loss = self.critic_loss, self.actor_loss
        self._compiled = None
        if config.compile and self.reverse:
            self._compiled = CompiledUpdate(self)
        elif config.compile:
            self._critic_loss = compiled_or_eager(self.critic_loss)
            self._actor_loss = compiled_or_eager(self.actor_loss)

    @property
    def num_skipped(self) -> int:
        """Batches rejected for NaN/inf data, a non-finite loss or a non-finite gradient."""
        return int(self._skipped)

    @property
    def num_updates(self) -> int:
        """Critic updates done (calls that were not skipped); reading it waits for the device."""
        return self.num_calls - self.num_skipped

    @property
    def alpha(self) -> torch.Tensor:
        """The temperature alpha = exp(log alpha), detached."""
        return self.log_alpha.detach().exp()

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """Return the observation as the networks see it (normalised if configured)."""
        return self.normalizer(obs) if self.cfg.normalize_obs else obs

    @torch.no_grad()
    def act(
        self, obs: torch.Tensor, deterministic: bool = False, generator=None, eps=None
    ) -> torch.Tensor:
        """Return actions (B, d) for raw observations (B, obs_dim): sampled, or b + c tanh(mu).

        eps (B, d): the standard normal noise of the sample, if drawn by the caller.
        """
        s = self.normalize(obs.to(self.device, torch.float32))
        return self.actor(s) if deterministic else self.actor.sample(s, generator, eps)[0]

    def update(self, batch: Batch, generator: torch.Generator | None = None) -> dict:
        """One gradient step of the critics (every k-th call also actor and alpha); metrics.

        Never waits for the device: the metrics are 0-d tensors, to be read at log intervals.
        A batch with NaN/inf data, a non-finite loss or a non-finite gradient leaves weights,
        targets and optimiser moments as they were; then metrics['skipped'] is 1 and the other
        metrics are 0. The actor's metrics (and 'actor_updates', 1) come only from the calls
        that update the actor (every actor_update_interval-th). generator: the noise of a~ and
        a (None: torch's global one).
        """
        self.num_calls += 1
        with_actor = self.num_calls % self.cfg.actor_update_interval == 0
        if self._graphed is not None:
            return self._graphed(batch, generator, with_actor)
        if self._compiled is not None:
            return self._compiled(batch.to(self.device), generator, with_actor)
        return self._update_body(batch.to(self.device), generator, with_actor)

    def _update_body(self, batch: Batch, generator, with_actor: bool, eps=None) -> dict:
        """The update of one call, on a batch on the device (what a CUDA graph captures).

        eps (2, B, d): the noise of a~ and a, if the caller drew it (else drawn here).
        """
        alpha = self.alpha
        # eps~ for a~ ~ pi(.|s~) and eps for a ~ pi(.|s): (2, B, d), drawn outside compiled code.
        # A rank's part of a global batch draws the global noise and keeps its own rows.
        B, d = batch.action.shape
        part = batch.part
        total = B if part is None else part.total
        if eps is None:
            eps = torch.randn(2, total, d, generator=generator, device=self.device)
        if part is not None:
            eps = eps[:, part.rows]
        self._share = B / total
        data_ok = batch.finite()  # the step is taken only if data, loss and gradient are finite
        args = (batch.obs, batch.action, batch.reward, batch.next_obs, batch.terminated,
                batch.discount, alpha, eps[0])  # fmt: skip
        actor_pass = None
        if self.reverse:
            J_Q, s, Q_mean, Q_target_mean, grads, actor_pass = self.critic_loss_and_gradient(
                *args, eps_actor=eps[1] if with_actor else None
            )
            critic_norm, ok = self._step(self.critic_optim, self.critic, J_Q, data_ok, grads=grads)
        else:
            with matmul_autocast(self.matmul_dtype, self.device):  # backward runs outside it
                J_Q, s, Q_mean, Q_target_mean = self._critic_loss(*args)
            critic_norm, ok = self._step(self.critic_optim, self.critic, J_Q, data_ok)
        metrics = {
            'loss/critic': J_Q.detach(),
            'value/q_mean': Q_mean,
            'value/q_target_mean': Q_target_mean,
            'grad_norm/critic': critic_norm,
        }
        if with_actor:
            metrics.update(self._update_actor_and_alpha(s, alpha, ok, eps[1], actor_pass))
        return self._finish(metrics, ok)

    def _finish(self, metrics: dict, ok: torch.Tensor) -> dict:
        """The targets' Polyak step and the skip count after the steps; the metrics as returned.

        ok: 0-d bool, whether the critic step was taken.
        """
        # thetabar <- tau theta + (1 - tau) thetabar; tau -> 0 where the critic step was skipped.
        polyak_update(self.critic_target, self.critic, self.cfg.tau * ok)
        skipped = (~ok).float()
        self._skipped += skipped
        # Every metric 0 where skipped, in one operation on them all.
        values = torch.where(ok, torch.stack(list(metrics.values())), 0.0)
        metrics = dict(zip(metrics, values.unbind()))
        metrics['alpha'] = self.alpha
        metrics['skipped'] = skipped
        return metrics

    def critic_loss(self, obs, action, reward, next_obs, terminated, discount, alpha, eps_next):
        """J_Q (paper Sec. 3.1) and what the update reuses: (J_Q, s, mean Q, mean Q_target)."""
        # The target in float32 even under a bfloat16 autocast: its rounding (about 0.2 % of Q)
        # would be regression noise of the size of late TD errors.
        with torch.no_grad(), torch.autocast(self.device.type, enabled=False):
            s, s_next = self.normalize(obs), self.normalize(next_obs)  # (B, o)
            a_next, log_pi_next = self.actor.sample(s_next, eps=eps_next)
            Q_target = self.q_target(
                reward, discount, terminated, s_next, a_next, log_pi_next, alpha
            )
        # J_Q = 1/N sum_i E[(Q_theta_i(s, a) - Q_target)^2]; Q (N, B), all members in one pass.
        Q = self.critic(s, action)
        J_Q = ((Q - Q_target) ** 2).mean(dim=1).mean()
        return J_Q, s, Q.detach().mean(), Q_target.mean()

    def q_target(self, reward, discount, terminated, s_next, a_next, log_pi_next, alpha):
        """Q_target = sum_k gamma^k S_k r_{t+k} + gamma^n_eff (1 - terminated) V(s~): (B,).

        V(s~) = min_i Q_thetabar_i(s~, a~) - alpha log pi(a~|s~), with a~ ~ pi(.|s~) given.
        """
        V_next = self.critic_target.min_q(s_next, a_next) - alpha * log_pi_next  # (B,)
        return reward + discount * (1.0 - terminated) * V_next

    @torch.no_grad()
    def critic_loss_and_gradient(
        self, obs, action, reward, next_obs, terminated, discount, alpha, eps_next, eps_actor=None
    ):
        """critic_loss's values and dJ_Q/dtheta from the hand-written reverse pass (no graph).

        eps_actor (B, d): the actor step's noise, if this call steps the actor: its pass on s
        then runs in one batch with the target's on s~ (the actor has not moved in between),
        and is returned last for actor_loss_and_gradient (else None; also with bfloat16 products).
        """
        s, s_next = self.normalize(obs), self.normalize(next_obs)  # (B, o)
        actor_pass, dtype = None, self.matmul_dtype
        if eps_actor is None or dtype != torch.float32:
            # The target in float32 whatever the products' dtype (see critic_loss); with other
            # products the actor's pass on s runs apart, in actor_loss_and_gradient.
            a_next, log_pi_next = self.actor.sample(s_next, eps=eps_next)
        else:
            B = s.shape[0]
            both = ActorPass(
                self.actor, self.cfg.activation, torch.cat([s_next, s]),
                torch.cat([eps_next, eps_actor]),
            )  # fmt: skip
            a_next, log_pi_next, actor_pass = both.action[:B], both.log_pi[:B], both.rows(B)
        Q_target = self.q_target(reward, discount, terminated, s_next, a_next, log_pi_next, alpha)
        forward = CriticPass(self.critic, self.cfg.activation, s, action, dtype)
        error = forward.q - Q_target  # (N, B)
        J_Q = (error**2).mean(dim=1).mean()
        grads, _ = forward.backward(error * (2.0 / max(error.numel(), 1)))  # dJ_Q/dQ = 2(Q - y)/NB
        return J_Q, s, forward.q.mean(), Q_target.mean(), grads, actor_pass

    @torch.no_grad()
    def actor_loss_and_gradient(self, s, alpha, eps, actor=None):
        """actor_loss's values and dJ_pi/dphi from the hand-written reverse passes (no graph).

        actor: the ActorPass on (s, eps) if it already ran (critic_loss_and_gradient).
        """
        dtype = self.matmul_dtype
        if actor is None:
            actor = ActorPass(self.actor, self.cfg.activation, s, eps, dtype)
        critic = CriticPass(self.critic, self.cfg.activation, s, actor.action, dtype)
        Q_min, member = critic.q.min(dim=0)  # (B,): min_i Q_theta_i(s, a) and its i
        B = Q_min.shape[0]
        J_pi = (alpha * actor.log_pi - Q_min).mean()
        # dJ_pi/dQ_i = -1/B for the minimum's member, 0 for the others; the critics stay put.
        dQ = torch.zeros_like(critic.q).scatter_(0, member.unsqueeze(0), -1.0 / max(B, 1))
        _, da = critic.backward(dQ, weights=False)  # (B, d)
        grads = actor.backward((alpha / max(B, 1)).expand(B), da)
        return J_pi, actor.log_pi, grads

    def actor_loss(self, s, alpha, eps):
        """J_pi = E[alpha log pi(a|s) - min_i Q_theta_i(s, a)] with a = f_phi(eps; s); log pi."""
        a, log_pi = self.actor.sample(s, eps=eps)  # (B, d), (B,)
        return (alpha * log_pi - self.critic.min_q(s, a)).mean(), log_pi

    def _update_actor_and_alpha(self, s, alpha, critic_ok, eps, actor_pass=None) -> dict:
        """Step the actor on J_pi, then log alpha on J_alpha (both only where critic_ok)."""
        if self.reverse:
            J_pi, log_pi, grads = self.actor_loss_and_gradient(s, alpha, eps, actor_pass)
        else:
            self.critic.requires_grad_(False)  # the actor loss must not move the critics
            with matmul_autocast(self.matmul_dtype, self.device):
                J_pi, log_pi = self._actor_loss(s, alpha, eps)
            self.critic.requires_grad_(True)
            grads = None
        actor_norm, ok = self._step(self.actor_optim, self.actor, J_pi, critic_ok, grads=grads)
        J_alpha, dJ_alpha = self.alpha_loss(log_pi)
        self._step(
            self.alpha_optim, None, J_alpha, ok, params=[self.log_alpha], grads=[dJ_alpha]
        )  # fmt: skip
        return self.actor_metrics(J_pi, J_alpha, log_pi, actor_norm)

    def alpha_loss(self, log_pi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """J_alpha = E[-alpha (log pi(a|s) + H_bar)] and dJ_alpha/dlog alpha, from log pi (B,)."""
        entropy_gap = log_pi.detach() + self.target_entropy  # (B,)
        return -(self.log_alpha.detach() * entropy_gap).mean(), -entropy_gap.mean()

    def actor_metrics(self, J_pi, J_alpha, log_pi, actor_norm) -> dict:
        """The metrics of a call that steps the actor (ACTOR_METRICS and 'actor_updates')."""
        return {
            'loss/actor': J_pi.detach(),
            'loss/alpha': J_alpha.detach(),
            'policy/entropy': -log_pi.detach().mean(),
            'grad_norm/actor': actor_norm,
            'actor_updates': torch.ones((), device=self.device),  # 0 where skipped
        }

    def _step(self, optim, module: nn.Module | None, loss, ok, params=None, grads=None):
        """Backpropagate, clip the gradient norm, step where ok and all is finite; (norm, ok).

        grads: the gradients in params' order, if computed without autograd (loss.backward()
        is then not called).
        """
        params = list(module.parameters()) if params is None else params
        optim.zero_grad(set_to_none=True)
        if self.grad_sync is None or self._share > 0:
            if grads is None:
                loss.backward()
            else:
                for p, g in zip(params, grads, strict=True):
                    p.grad = g
            if self.grad_sync is not None:  # gradient of the global batch's mean loss, all ranks
                ok = self.grad_sync(params, ok & torch.isfinite(loss), self._share)
        else:  # none of the global batch is this rank's: it adds a zero gradient (no loss)
            ok = self.grad_sync(params, ok, 0.0)
            loss = torch.zeros((), device=self.device)
        if self.cfg.max_grad_norm is None:
            norm = nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        else:
            norm = nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm, foreach=True)
        ok = ok & torch.isfinite(torch.stack([loss.detach(), norm])).all()
        masked_step(optim, ok)
        return norm.detach(), ok

    def state_dict(self) -> dict:
        """Return what resuming needs: networks, targets, alpha, optimisers, normaliser."""
        return {
            'config': asdict(self.cfg),
            'actor': self.actor.state_dict(),
            'critic': self.critic.state_dict(),
            'critic_target': self.critic_target.state_dict(),
            'log_alpha': self.log_alpha.detach().cpu(),
            'actor_optim': self.actor_optim.state_dict(),
            'critic_optim': self.critic_optim.state_dict(),
            'alpha_optim': self.alpha_optim.state_dict(),
            'normalizer': self.normalizer.state_dict(),
            'num_updates': self.num_updates,
            'num_skipped': self.num_skipped,
            'num_calls': self.num_calls,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore from state_dict() output (same network shapes)."""
        self.actor.load_state_dict(state['actor'])
        self.critic.load_state_dict(state['critic'])
        self.critic_target.load_state_dict(state['critic_target'])
        with torch.no_grad():
            self.log_alpha.copy_(state['log_alpha'])
        self.actor_optim.load_state_dict(state['actor_optim'])
        self.critic_optim.load_state_dict(state['critic_optim'])
        self.alpha_optim.load_state_dict(state['alpha_optim'])
        self.normalizer.load_state_dict(state['normalizer'])
        for optim in (self.actor_optim, self.critic_optim, self.alpha_optim):
            for group in optim.param_groups:  # a GPU run's graphs saved True; theirs to set
                group['capturable'] = False
        skipped = int(state['num_skipped'])
        self.num_calls = int(state.get('num_calls', int(state['num_updates']) + skipped))
        self._skipped.fill_(skipped)
        if self._graphed is not None:  # the optimisers' states are new tensors: capture again
            self._graphed = GraphedUpdate(self)
