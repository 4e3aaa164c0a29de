"""SHAC: first-order policy gradients through a differentiable environment over short windows.

Xu et al., "Accelerated Policy Learning with Parallel Differentiable Simulation" (ICLR 2022),
as used by Schwarke et al. for ANYmal. One window of H steps from states s_0 (N envs):

    L_actor = -1/(H N) sum_n [ sum_{t<h_n} gamma^t r_t + gamma^{h_n} V_target(s_{h_n}) ]

backpropagated through the simulator into the actor; a window is cut at an episode end
(terminated: bootstrap 0; truncated: bootstrap from the pre-reset observation) and restarted.
The critic V is then fitted to TD(lambda) targets of the same window over several minibatch
passes, and the target critic follows it by a soft update. No I/O here.

Data parallel: each rank holds rows [env_offset, env_offset + n) of a population of environments.
The exploration noise and the critic's minibatches are drawn for the whole population from a
generator seeded alike on every rank and sliced, and `sync` (loco_train.runners.distributed)
averages the gradients and merges the normaliser's statistics, so K ranks update exactly as one
process with the whole population would.
"""

import copy
from dataclasses import dataclass, field
import math

import numpy as np
import torch
from torch import nn

from loco_train.policy.normalizer import EmpiricalNormalizer
from loco_train.sac.actor import SquashedGaussianActor
from loco_train.sac.mlp import mlp


@dataclass
class SHACConfig:
    """SHAC hyperparameters (defaults: Xu et al.'s locomotion settings, horizon 32)."""

    horizon: int = 32
    """H, control steps per window that the actor gradient flows through."""
    gamma: float = 0.99
    """Discount per control step."""
    lam: float = 0.95
    """lambda of the critic's TD(lambda) targets."""
    actor_lr: float = 2e-3
    """Adam learning rate of the actor at iteration 0."""
    critic_lr: float = 2e-3
    """Adam learning rate of the critic at iteration 0."""
    lr_schedule: str = 'linear'
    """'linear' (decay to min_lr_fraction of the start at the last iteration) or 'constant'."""
    min_lr_fraction: float = 0.05
    """Learning rates never fall below this fraction of their start."""
    betas: tuple = (0.7, 0.95)
    """Adam betas of both optimisers."""
    grad_norm: float = 1.0
    """Actor and critic gradient norms are clipped to this."""
    critic_iterations: int = 16
    """Passes over the window's data per critic fit."""
    critic_minibatches: int = 4
    """Minibatches per pass."""
    target_alpha: float = 0.2
    """Soft update: target <- alpha * target + (1 - alpha) * critic, once per window."""
    actor_hidden: tuple = (256, 128, 64)
    """Actor MLP hidden sizes."""
    critic_hidden: tuple = (256, 128)
    """Critic MLP hidden sizes."""
    activation: str = 'elu'
    """Activation of both MLPs."""
    layer_norm: bool = False
    """A LayerNorm after every hidden activation of the actor and the critic, as in Xu et al.'s
    networks (not in the shipped policies' actor)."""
    sigma0: float = 0.3
    """Initial exploration standard deviation of the actor's latent Gaussian."""
    actor_warmup: int = 0
    """First iterations without an actor step: the critic learns the (warm-started) policy's
    values before their gradients move it."""
    normalize_obs: bool = True
    """Keep a running observation normaliser (baked into the exported policy)."""
    normalizer_update: str = 'step'
    """'step': merge each control step's observations before acting on them; 'window': act
    on the statistics of the window's start (Xu et al.'s DiffRL) and merge the whole window
    after the actor step, one all-reduce per window under torchrun instead of one per step."""
    terminal_gradient: float = 0.0
    """Weight w of the target critic's slope at an early termination: the actor loss gains
    w gamma^t (V(s_fall) - sg[V(s_fall)]), zero in value (a fall still bootstraps 0), so that a
    fall, which the return does not differentiate, pulls the actions towards states the critic
    rates higher. 0: off (Xu et al.)."""
    critic_privileged: bool = False
    """The critic also sees the env's privileged state (env.privileged(), e.g. the base height
    the 48-term observation lacks), so that its value, and the actor's gradient through
    V(s_H), can tell a crouching robot from an upright one. Needs an env with privileged()."""
    max_action_change: float = 0.0
    """Trust region of an actor step: when the deterministic action tanh(mu) on the window's
    observations moves by more than this on average (a fraction of the action box's half
    width), the step is scaled back to that size. 0: off (the change is logged either way)."""
    spike_factor: float = 0.0
    """A window whose actor gradient norm (before clipping) exceeds spike_factor times the median
    of the last spike_history applied windows' norms moves nothing: its direction comes from the
    few environments whose contact adjoints exploded. Such windows come with the collapses of a
    walking policy; holding them back did not prevent those on the forward task. 0: off."""
    spike_history: int = 50
    """Applied windows whose gradient norms the spike test takes the median of (it judges only
    once it has 10)."""
    spike_max_skips: int = 10
    """After this many windows in a row held back, the next is applied (clipped), so that a
    lasting change of the gradient's scale is followed."""
    rollback_drop: float = 0.0
    """When the mean reward per step over the last rollback_windows windows falls below
    (1 - rollback_drop) times the best such mean so far, the actor, critics, normaliser and
    optimisers go back to their state at that best (a walking policy's collapse is undone
    instead of relearned). When the restored state falls short of that best as well, the best
    is taken as out of reach and the rule starts again from the present level. 0: off."""
    rollback_windows: int = 25
    """Windows whose mean reward per step the rollback rule compares."""
    extra: dict = field(default_factory=dict)
    """Free-form notes stored with checkpoints."""


class Critic(nn.Module):
    """V(s): an MLP with a scalar head."""

    def __init__(self, obs_dim, hidden, activation, layer_norm=False):
        """Build the MLP obs_dim -> hidden -> 1."""
        super().__init__()
        self.net = nn.Sequential(
            mlp(obs_dim, hidden, activation, layer_norm), nn.Linear(hidden[-1], 1)
        )

    def forward(self, obs):
        """Return V (B,) for normalised observations (B, obs_dim)."""
        return self.net(obs).squeeze(-1)


class SHAC:
    """Actor, critic, target critic, normaliser and their optimisers; one window per call."""

    def __init__(
        self,
        obs_dim,
        action_bias,
        action_scale,
        config=None,
        device='cpu',
        seed=None,
        sync=None,
        env_offset=0,
        population=None,
        privileged_dim=0,
    ):
        """Build the networks for obs_dim inputs and the action box b +- c.

        privileged_dim: entries of the env's privileged state the critic sees beside the
        observation (with config.critic_privileged).

        seed seeds the exploration noise and critic minibatches, the same on every rank (None:
        drawn from torch's global generator). sync, when given, provides all_reduce_sum_(tensor),
        all_true(flag) and reduce_gradients_(parameters, average) over ranks; env_offset and
        population place this rank's environments in the population (None: one process with
        all of them).
        """
        self.cfg = config or SHACConfig()
        if self.cfg.normalizer_update not in ('step', 'window'):
            raise ValueError(
                f"normalizer_update {self.cfg.normalizer_update!r}: 'step' or 'window'"
            )
        self.device = torch.device(device)
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)))
        self.generator = torch.Generator().manual_seed(int(seed))
        self.sync, self.env_offset, self.population = sync, int(env_offset), population
        self.actor_kwargs = dict(
            obs_dim=obs_dim,
            action_bias=[float(v) for v in action_bias],
            action_scale=[float(v) for v in action_scale],
            hidden=tuple(self.cfg.actor_hidden),
            activation=self.cfg.activation,
            sigma0=self.cfg.sigma0,
            mean_init_std=1e-2,
        )
        if self.cfg.layer_norm:  # absent otherwise: files of the plain actor keep their kwargs
            self.actor_kwargs['layer_norm'] = True
        self.actor = SquashedGaussianActor(**self.actor_kwargs).to(self.device)
        self.privileged_dim = int(privileged_dim) if self.cfg.critic_privileged else 0
        if self.cfg.critic_privileged and self.privileged_dim <= 0:
            raise ValueError('critic_privileged needs an env with privileged state')
        self.critic = Critic(
            obs_dim + self.privileged_dim,
            self.cfg.critic_hidden,
            self.cfg.activation,
            self.cfg.layer_norm,
        ).to(self.device)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.normalizer = EmpiricalNormalizer(obs_dim).to(self.device)
        betas = tuple(self.cfg.betas)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), self.cfg.actor_lr, betas=betas)
        self.critic_opt = torch.optim.Adam(
            self.critic.parameters(), self.cfg.critic_lr, betas=betas
        )
        self.iterations = 0
        self.spike_norms = []  # actor gradient norms of the last applied windows
        self.spike_skips = 0  # windows held back in a row
        # rollback rule: recent windows' mean reward per step, the best mean, its state
        self.rollback = {'recent': [], 'best': None, 'state': None, 'count': 0, 'restored': False}

    def _rows(self, n):
        """(population size, slice of this rank's rows) for n local environments."""
        return self.population or n, slice(self.env_offset, self.env_offset + n)

    def sample_action(self, obs_n):
        """Action b + c tanh(mu + sigma eps) (N, d); eps drawn for the population, our rows.

        obs_n (N, obs_dim) is normalised; the actor's reparameterised sample with the noise from
        the shared generator instead of torch's global one.
        """
        mu, log_sigma = self.actor.gaussian(obs_n)
        total, rows = self._rows(obs_n.shape[0])
        eps = torch.randn((total, mu.shape[1]), generator=self.generator, dtype=mu.dtype)
        x = mu + log_sigma.exp() * eps[rows].to(mu.device)  # (N, d) latent action
        return self.actor.b + self.actor.c * torch.tanh(x)

    def normalize(self, obs):
        """Normalised observation, differentiable in obs."""
        return self.normalizer(obs) if self.cfg.normalize_obs else obs

    def critic_input(self, obs, privileged=None):
        """The critic's input (..., obs_dim [+ P]), differentiable in both parts.

        The normalised observation, then the privileged state (..., P) when the critic takes it.
        """
        x = self.normalize(obs)
        if not self.privileged_dim:
            return x
        return torch.cat([x, privileged.to(x)], dim=-1)

    def _privileged(self, env):
        """The env's privileged state (N, P) of its held state, or None when unused."""
        return env.privileged() if self.privileged_dim else None

    def set_progress(self, fraction):
        """Apply the learning-rate schedule at training progress fraction in [0, 1]."""
        if self.cfg.lr_schedule == 'constant':
            return
        scale = max(self.cfg.min_lr_fraction, 1.0 - fraction)
        for opt, lr in (
            (self.actor_opt, self.cfg.actor_lr),
            (self.critic_opt, self.cfg.critic_lr),
        ):
            for group in opt.param_groups:
                group['lr'] = lr * scale

    def train_window(self, env, obs):
        """Roll H steps from obs (N, obs_dim) through env, update actor and critic.

        env follows loco_train.envs.vec_env.VecEnv with differentiable step() and a detach() that
        cuts the gradient history of its state. Returns (next obs, metrics, episode infos).
        """
        cfg, n = self.cfg, obs.shape[0]
        env.detach()  # gradients never cross a window boundary
        obs = obs.detach()
        gamma_t = torch.ones(n, device=self.device)  # gamma^t since the window or episode start
        acc = torch.zeros(n, device=self.device)  # discounted reward sum of the open segment
        loss = torch.zeros((), device=self.device)
        obs_buf, rew_buf, term_buf, trunc_buf, next_buf = [], [], [], [], []
        priv_buf, next_priv_buf = [], []  # privileged state (N, P) per step, when used
        priv = self._privileged(env)
        logged = {}  # env's per-step scalars (e.g. each reward term), averaged over the window
        reduce = self.sync.all_reduce_sum_ if self.sync is not None else None
        per_window = cfg.normalize_obs and cfg.normalizer_update == 'window'
        first = per_window and float(self.normalizer.count) == 0
        if first:  # nothing seen yet: the start states' statistics, not the identity
            self.normalizer.update(obs, all_reduce=reduce)
        for _ in range(cfg.horizon):
            if cfg.normalize_obs and not per_window:
                self.normalizer.update(obs.detach(), all_reduce=reduce)
            action = self.sample_action(self.normalize(obs))
            next_obs, reward, terminated, truncated, extras = env.step(action)
            final_obs = extras.get('final_obs', next_obs)
            final_priv = extras.get('final_privileged') if self.privileged_dim else None
            for key, value in extras.get('log', {}).items():
                logged[key] = logged.get(key, 0.0) + float(value) / cfg.horizon
            acc = acc + gamma_t * reward
            gamma_t = gamma_t * cfg.gamma
            done = terminated | truncated
            if bool(done.any()):
                # segment ends: terminated bootstraps 0, truncated from the pre-reset state
                v_final = self.target_critic(self.critic_input(final_obs, final_priv))
                bootstrap = torch.where(truncated, v_final, torch.zeros_like(v_final))
                if cfg.terminal_gradient:  # the slope at a fall, with value 0
                    slope = cfg.terminal_gradient * (v_final - v_final.detach())
                    bootstrap = bootstrap + torch.where(terminated, slope, 0.0)
                loss = loss - torch.sum(torch.where(done, acc + gamma_t * bootstrap, 0.0))
                acc = torch.where(done, torch.zeros_like(acc), acc)
                gamma_t = torch.where(done, torch.ones_like(gamma_t), gamma_t)
            obs_buf.append(obs.detach())
            rew_buf.append(reward.detach())
            term_buf.append(terminated.detach())
            trunc_buf.append(truncated.detach())
            next_buf.append(final_obs.detach())
            if self.privileged_dim:
                priv_buf.append(priv.detach())
                next_priv_buf.append(final_priv.detach())
                priv = self._privileged(env)  # post-reset, as next_obs
            obs = next_obs
        loss = loss - torch.sum(acc + gamma_t * self.target_critic(self.critic_input(obs, priv)))
        loss = loss / (cfg.horizon * n)

        metrics = {'actor_loss': float(loss.detach()), 'skipped_window': 0.0}
        self.actor_opt.zero_grad(set_to_none=True)
        finite = bool(torch.isfinite(loss))
        if self.sync is not None:  # every rank takes the same branch
            finite = self.sync.all_true(finite)
        if self.iterations < cfg.actor_warmup:  # the same on every rank
            metrics['actor_warmup'] = 1.0
        elif finite:
            loss.backward()
            if self.sync is not None:  # mean over ranks of equal-size means: the global mean
                self.sync.reduce_gradients_(self.actor.parameters(), average=True)
            grad_norm = nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.grad_norm)
            metrics['actor_grad_norm'] = float(grad_norm)
            if not torch.isfinite(grad_norm):
                metrics['skipped_window'] = 1.0
            elif self._is_spike(float(grad_norm)):
                metrics['spike_skipped'] = 1.0
            else:
                probe = self.normalize(torch.cat(obs_buf)).detach()  # (H N, obs_dim)
                before = [p.detach().clone() for p in self.actor.parameters()]
                with torch.no_grad():
                    squashed = torch.tanh(self.actor.gaussian(probe)[0])
                self.actor_opt.step()
                metrics.update(self._trust_region(probe, squashed, before))
                if cfg.spike_factor:
                    metrics['spike_skipped'] = 0.0
        else:
            metrics['skipped_window'] = 1.0
        self.actor_opt.zero_grad(set_to_none=True)
        if per_window:  # after the backward pass, which needed the statistics it acted on
            seen = obs_buf[1:] if first else obs_buf  # the start states were merged already
            if seen:
                self.normalizer.update(torch.cat(seen), all_reduce=reduce)
        stats = getattr(env, 'adjoint_stats', None)
        if stats is not None:  # share of state-adjoint rows the env clipped in this backward
            metrics['adjoint_clipped'] = stats.pop_fraction()

        batch = {
            'obs': torch.stack(obs_buf),  # (H, N, obs_dim)
            'reward': torch.stack(rew_buf),  # (H, N)
            'terminated': torch.stack(term_buf),  # (H, N)
            'truncated': torch.stack(trunc_buf),  # (H, N)
            'next_obs': torch.stack(next_buf),  # (H, N, obs_dim) pre-reset where done
        }
        if self.privileged_dim:
            batch['privileged'] = torch.stack(priv_buf)  # (H, N, P)
            batch['next_privileged'] = torch.stack(next_priv_buf)  # (H, N, P) pre-reset
        metrics.update(self.fit_critic(batch))
        self.soft_update()
        self.iterations += 1
        moments = torch.tensor([float(batch['reward'].sum()), batch['reward'].numel()])
        if self.sync is not None:  # the population's mean, alike on every rank
            self.sync.all_reduce_sum_(moments)
        metrics['window_reward_mean'] = float(moments[0] / moments[1])
        if cfg.rollback_drop:
            metrics.update(self._rollback(metrics['window_reward_mean']))
        metrics.update(logged)
        return obs.detach(), metrics, batch

    @torch.no_grad()
    def td_lambda_targets(self, batch):
        """TD(lambda) targets G_t (H, N) from the window, bootstrapping with the target critic.

        G_t = r_t + gamma [(1 - lambda) V(s_{t+1}) + lambda G_{t+1}], with G_t = r_t at a
        termination, r_t + gamma V(s_final) at a truncation, r_t + gamma V(s_H) at the window end.
        """
        cfg = self.cfg
        horizon = batch['reward'].shape[0]
        v_next = self.target_critic(
            self.critic_input(batch['next_obs'], batch.get('next_privileged'))
        )  # (H, N)
        v_next = torch.where(batch['terminated'], torch.zeros_like(v_next), v_next)
        done = batch['terminated'] | batch['truncated']
        targets = torch.zeros_like(batch['reward'])
        g_next = v_next[-1]
        for t in reversed(range(horizon)):
            blend = v_next[t] if t == horizon - 1 else (1 - cfg.lam) * v_next[t] + cfg.lam * g_next
            blend = torch.where(done[t], v_next[t], blend)  # no lookahead across an episode end
            targets[t] = batch['reward'][t] + cfg.gamma * blend
            g_next = targets[t]
        return targets

    def fit_critic(self, batch):
        """Regress V(s_t) on TD(lambda) targets over minibatch passes; return loss metrics.

        A pass permutes the window's H x population samples; each minibatch's loss is the sum of
        squared errors over this rank's finite samples in it divided by the minibatch's finite
        count over all ranks, so the summed gradients are those of the whole minibatch's mean.
        """
        cfg = self.cfg
        horizon, n = batch['reward'].shape
        total, _ = self._rows(n)
        targets = self.td_lambda_targets(batch).reshape(-1)  # (H n,), row t n + j
        priv = batch.get('privileged')
        if priv is not None:
            priv = priv.reshape(horizon * n, -1)
        obs = self.critic_input(batch['obs'].reshape(horizon * n, -1), priv).detach()
        finite = (torch.isfinite(targets) & torch.all(torch.isfinite(obs), dim=1)).cpu()
        samples = horizon * total
        size = max(1, math.ceil(samples / cfg.critic_minibatches))
        chunks = math.ceil(samples / size)
        # global sample t * total + env_offset + j; the same permutations on every rank
        orders = torch.stack(
            [
                torch.randperm(samples, generator=self.generator)
                for _ in range(cfg.critic_iterations)
            ]
        )  # (I, H total)
        col = orders % total - self.env_offset
        mine = (col >= 0) & (col < n)
        local = torch.where(
            mine, (orders // total) * n + col, torch.zeros_like(col)
        )  # (I, H total)
        keep = mine & finite[local]
        padded = torch.zeros(cfg.critic_iterations, chunks * size, dtype=torch.float64)
        padded[:, :samples] = keep.double()
        counts = padded.view(cfg.critic_iterations, chunks, size).sum(dim=2)  # (I, C) finite
        if self.sync is not None:
            self.sync.all_reduce_sum_(counts)
        last = torch.full((), float('nan'), dtype=torch.float64)
        for i in range(cfg.critic_iterations):
            for c in range(chunks):
                if counts[i, c] == 0:
                    continue
                part = slice(c * size, (c + 1) * size)
                idx = local[i, part][keep[i, part]].to(self.device)
                error = self.critic(obs[idx]) - targets[idx]
                value_loss = torch.sum(error**2) / float(counts[i, c])
                self.critic_opt.zero_grad(set_to_none=True)
                value_loss.backward()
                if self.sync is not None:
                    self.sync.reduce_gradients_(self.critic.parameters(), average=False)
                nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.grad_norm)
                self.critic_opt.step()
                last = value_loss.detach().double().cpu()
        if self.sync is not None:  # each rank's share of the last minibatch's mean
            last = self.sync.all_reduce_sum_(torch.nan_to_num(last.clone(), nan=0.0))
        target_mean = targets[finite.to(targets.device)].mean()
        return {'critic_loss': float(last), 'value_target_mean': float(target_mean)}

    @torch.no_grad()
    def _trust_region(self, probe, squashed, before):
        """Measure the actor step's action change on probe; scale it back past the limit.

        squashed (B, d) is tanh(mu) before the step on the normalised observations probe, before
        the parameters then. The change is mean |tanh(mu') - tanh(mu)| over every rank's rows,
        so that every rank scales alike.
        """
        moved = torch.abs(torch.tanh(self.actor.gaussian(probe)[0]) - squashed)  # (B, d)
        moments = torch.tensor([float(moved.sum()), moved.numel()], dtype=torch.float64)
        if self.sync is not None:
            self.sync.all_reduce_sum_(moments)
        change = float(moments[0] / moments[1])
        metrics = {'action_change': change}
        limit = self.cfg.max_action_change
        if limit and change > limit:
            scale = limit / change
            for param, old in zip(self.actor.parameters(), before):
                param.copy_(old + scale * (param - old))
            metrics['trust_scale'] = scale
        elif limit:
            metrics['trust_scale'] = 1.0
        return metrics

    def _is_spike(self, norm):
        """Whether to hold back a window of this gradient norm; records applied norms.

        The norm is the all-reduced one under torchrun, so every rank decides alike.
        """
        cfg = self.cfg
        if not cfg.spike_factor:
            return False
        history = self.spike_norms
        if (
            len(history) >= 10
            and norm > cfg.spike_factor * float(np.median(history))
            and self.spike_skips < cfg.spike_max_skips
        ):
            self.spike_skips += 1
            return True
        self.spike_skips = 0
        history.append(norm)
        del history[: -cfg.spike_history]
        return False

    def _rollback(self, reward_mean):
        """Keep the state of the best recent mean reward; go back to it after a drop."""
        cfg, rb = self.cfg, self.rollback
        rb['recent'] = (rb['recent'] + [reward_mean])[-cfg.rollback_windows :]
        metrics = {'rollback': 0.0}
        if len(rb['recent']) < cfg.rollback_windows:
            return metrics
        recent = float(np.mean(rb['recent']))
        metrics['reward_mean_recent'] = recent
        dropped = rb['best'] is not None and 0.0 < rb['best']
        dropped = dropped and recent < (1.0 - cfg.rollback_drop) * rb['best']
        if rb['best'] is None or recent > rb['best'] or (dropped and rb['restored']):
            # a new best; or the restored state fell short of its best too: that best was the
            # moment's (e.g. the first windows' freshly reset robots), the level starts again
            rb['best'], rb['restored'] = recent, False
            rb['state'] = self._learned_state()
        elif dropped:
            self._load_learned_state(rb['state'])
            rb['recent'], rb['count'], rb['restored'] = [], rb['count'] + 1, True
            metrics['rollback'] = 1.0
        metrics['rollbacks'] = float(rb['count'])
        return metrics

    def _learned_parts(self):
        """Name -> module or optimiser whose state a checkpoint and a rollback hold."""
        return {
            'actor': self.actor,
            'critic': self.critic,
            'target_critic': self.target_critic,
            'normalizer': self.normalizer,
            'actor_opt': self.actor_opt,
            'critic_opt': self.critic_opt,
        }

    def _learned_state(self):
        """A copy of the networks', normaliser's and optimisers' state (what a rollback keeps)."""
        return copy.deepcopy({k: part.state_dict() for k, part in self._learned_parts().items()})

    def _load_learned_state(self, state):
        """Restore _learned_state()'s parts (copies, so that the kept state stays as it is)."""
        for key, part in self._learned_parts().items():
            part.load_state_dict(copy.deepcopy(state[key]))

    @torch.no_grad()
    def soft_update(self):
        """Target <- alpha target + (1 - alpha) critic."""
        alpha = self.cfg.target_alpha
        for target, source in zip(self.target_critic.parameters(), self.critic.parameters()):
            target.mul_(alpha).add_((1.0 - alpha) * source)

    def state_dict(self):
        """Everything needed to resume: networks, normaliser, optimisers, iteration count."""
        return {
            **{key: part.state_dict() for key, part in self._learned_parts().items()},
            'iterations': self.iterations,
            'generator': self.generator.get_state(),
            'spike_norms': list(self.spike_norms),
            'spike_skips': self.spike_skips,
            'rollback': {k: v for k, v in self.rollback.items() if k != 'state'},
            'rollback_state': self.rollback['state'],
        }

    def load_state_dict(self, state):
        """Restore from state_dict()."""
        for key, part in self._learned_parts().items():
            part.load_state_dict(state[key])
        self.iterations = int(state['iterations'])
        if 'generator' in state:
            self.generator.set_state(state['generator'])
        self.spike_norms = list(state.get('spike_norms', []))
        self.spike_skips = int(state.get('spike_skips', 0))
        if 'rollback' in state:
            self.rollback = dict(state['rollback'], state=state.get('rollback_state'))
