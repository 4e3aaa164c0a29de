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
from loco_train.sac.critic import make_target, polyak_update, QEnsemble


@dataclass
class SACConfig:
    """Hyperparameters of the SAC update; the defaults learn gymnasium's Pendulum-v1 on CPU."""

    actor_hidden: tuple[int, ...] = (128, 128)
    """Hidden layer widths of the actor MLP."""
    critic_hidden: tuple[int, ...] = (128, 128)
    """Hidden layer widths of each critic MLP."""
    activation: str = 'relu'
    """Hidden activation of actor and critics: relu, elu, tanh or silu."""
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
    max_grad_norm: float = 10.0
    """Gradient-norm clip applied to each network's gradient before its optimiser step."""
    sigma0: float = 0.15
    """Initial policy standard deviation sigma0 of the latent Gaussian, for every input (fix 2)."""
    log_sigma_bounds: tuple[float, float] = (-5.0, 2.0)
    """[l_min, l_max]: the clamp applied to the log-std head."""
    mean_init_std: float = 1e-4
    """Standard deviation epsilon of the mean-head weights at initialisation (bias is 0)."""
    normalize_obs: bool = True
    """Normalise observations with the running EmpiricalNormalizer (exported with the actor)."""


class SAC:
    """Actor pi_phi, critics Q_theta_i with targets Q_thetabar_i, temperature alpha; update()."""

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
            obs_dim, d, config.num_critics, tuple(config.critic_hidden), config.activation
        ).to(self.device)
        self.critic_target = make_target(self.critic)
        self.log_alpha = torch.tensor(
            math.log(config.init_alpha), device=self.device, requires_grad=True
        )
        self.target_entropy = (
            float(-d) if config.target_entropy is None else float(config.target_entropy)
        )
        self.actor_optim = torch.optim.Adam(self.actor.parameters(), lr=config.actor_lr)
        self.critic_optim = torch.optim.Adam(self.critic.parameters(), lr=config.critic_lr)
        self.alpha_optim = torch.optim.Adam([self.log_alpha], lr=config.alpha_lr)
        self.num_updates = 0  # critic updates done
        self.num_skipped = 0  # batches rejected for NaN/inf data or a non-finite loss

    @property
    def alpha(self) -> torch.Tensor:
        """The temperature alpha = exp(log alpha), detached."""
        return self.log_alpha.detach().exp()

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """Return the observation as the networks see it (normalised if configured)."""
        return self.normalizer(obs) if self.cfg.normalize_obs else obs

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Return actions (B, d) for raw observations (B, obs_dim): sampled, or b + c tanh(mu)."""
        s = self.normalize(obs.to(self.device, torch.float32))
        return self.actor(s) if deterministic else self.actor.sample(s)[0]

    def update(self, batch: Batch) -> dict[str, float]:
        """One gradient step of the critics (every k-th call also actor and alpha); metrics."""
        if not batch.is_finite():
            self.num_skipped += 1
            return {'skipped': 1.0}
        batch = batch.to(self.device)
        alpha = self.alpha
        with torch.no_grad():
            s, s_next = self.normalize(batch.obs), self.normalize(batch.next_obs)  # (B, o)
            # V(s~) = min_i Q_thetabar_i(s~, a~) - alpha log pi(a~|s~), a~ ~ pi(.|s~): (B,)
            a_next, log_pi_next = self.actor.sample(s_next)
            V_next = self.critic_target.min_q(s_next, a_next) - alpha * log_pi_next
            # Q_target = sum_k gamma^k S_k r_{t+k} + gamma^n_eff (1 - terminated) V(s~): (B,)
            Q_target = batch.reward + batch.discount * (1.0 - batch.terminated) * V_next
        # J_Q = 1/N sum_i E[(Q_theta_i(s, a) - Q_target)^2]; Q (N, B).
        Q = self.critic(s, batch.action)
        J_Q = ((Q - Q_target) ** 2).mean(dim=1).mean()
        critic_norm = self._step(self.critic_optim, self.critic, J_Q)
        if critic_norm is None:
            return {'skipped': 1.0}
        self.num_updates += 1
        metrics = {
            'loss/critic': J_Q.detach(),
            'value/q_mean': Q.detach().mean(),
            'value/q_target_mean': Q_target.mean(),
            'grad_norm/critic': critic_norm,
        }
        if self.num_updates % self.cfg.actor_update_interval == 0:
            metrics.update(self._update_actor_and_alpha(s, alpha))
        # thetabar <- tau theta + (1 - tau) thetabar
        polyak_update(self.critic_target, self.critic, self.cfg.tau)
        metrics['alpha'] = self.alpha
        keys = list(metrics)
        values = torch.stack([torch.as_tensor(metrics[k], dtype=torch.float32) for k in keys])
        return dict(zip(keys, values.tolist()))  # one device sync per update

    def _update_actor_and_alpha(self, s: torch.Tensor, alpha: torch.Tensor) -> dict:
        """J_pi = E[alpha log pi(a|s) - min_i Q_theta_i(s, a)], then J_alpha; a ~ pi reparam."""
        a, log_pi = self.actor.sample(s)  # (B, d), (B,)
        self.critic.requires_grad_(False)  # the actor loss must not move the critics
        J_pi = (alpha * log_pi - self.critic.min_q(s, a)).mean()
        self.critic.requires_grad_(True)
        actor_norm = self._step(self.actor_optim, self.actor, J_pi)
        if actor_norm is None:
            return {}
        # J_alpha = E[-alpha (log pi(a|s) + H_bar)], stepping log alpha.
        J_alpha = -(self.log_alpha * (log_pi.detach() + self.target_entropy)).mean()
        self._step(self.alpha_optim, None, J_alpha, params=[self.log_alpha])
        return {
            'loss/actor': J_pi.detach(),
            'loss/alpha': J_alpha.detach(),
            'policy/entropy': -log_pi.detach().mean(),
            'grad_norm/actor': actor_norm,
        }

    def _step(self, optim, module: nn.Module | None, loss: torch.Tensor, params=None):
        """Backpropagate, clip the gradient norm, step; return None (no step) if non-finite."""
        params = list(module.parameters()) if params is None else params
        optim.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        if not (torch.isfinite(loss) and torch.isfinite(norm)):
            optim.zero_grad(set_to_none=True)
            self.num_skipped += 1
            return None
        optim.step()
        return norm.detach()

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
        self.num_updates = int(state['num_updates'])
        self.num_skipped = int(state['num_skipped'])
