"""The online fine-tuning learner (ROS-free): warm start, replay mixing, SAC.update, export.

Defaults follow As et al. 2026 (sim-to-online RL on real robots): critic update-to-data ratio
1.25, the actor updated once every 20 critic updates, actor lr 1e-5 against critic lr 3e-4,
simulation replay mixed in at 50 % decaying to 0 % over the first 15k updates.

Warm starts:

- from_onnx: a deployed policy file whose graph is the exporter's normaliser followed by a
  SquashedGaussianActor (what `loco-train shac` and `loco-train sac` export). Its weights are
  copied into the SAC actor, so the actor's mean action is the deployed policy's (checked against
  onnxruntime on held-out observations); the critics start fresh and are fitted for
  `warmup_updates` with the actor frozen before it moves.
- from_checkpoint: a `loco-train sac` checkpoint.pt (actor, critics, temperature, normaliser,
  optimisers), optionally with its simulation replay (replay.pt) as prior data; the critics
  refit to the robot's reward for `checkpoint_warmup_updates` with the actor frozen.

The observation normaliser stays as warm-started: its statistics are baked into every exported
policy, and moving them would change the robot's actions without a gradient step.
"""

import collections
import copy
from dataclasses import asdict, dataclass, replace
import io
import math
import os
import pickle

import numpy as np
import torch

from loco_policy import spec
from loco_train.finetune.ingest import replay_fields
from loco_train.policy.export import DeployedPolicy, export_policy
from loco_train.policy.onnx_import import actor_from_onnx, PolicyImportError
from loco_train.policy.onnx_template import OnnxTemplate
from loco_train.sac.batch import Batch
from loco_train.sac.replay_buffer import ReplayBuffer
from loco_train.sac.sac import SAC, SACConfig

NEVER = 2**62
"""Actor-update interval while the actor is frozen (no call count reaches a multiple of it)."""


class WarmStartError(ValueError):
    """A policy file or checkpoint the learner cannot start from; the message says why."""


KEPT_ACTOR_STATES = 16
"""Exported versions whose actor follow() can go back to (about 0.5 MB each at [256, 128, 64])."""


@dataclass
class FinetuneConfig:
    """What the sidecar learns with; defaults from As et al. 2026 where they give one."""

    utd_ratio: float = 1.25
    """Critic updates per robot transition."""
    actor_update_interval: int = 20
    """Critic updates per actor (and temperature) update."""
    actor_lr: float = 1e-5
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics."""
    alpha_lr: float = 3e-4
    """Adam learning rate of log alpha."""
    target_entropy: float | None = None
    """Entropy the temperature holds the policy at; None: the warm-start policy's own (its
    mean -log pi on normalised observations). A deployed policy's entropy is far below SAC's
    usual -d; that target would raise alpha until the entropy bonus swamps the reward."""
    init_alpha: float = 1e-3
    """Temperature of an ONNX warm start (a checkpoint brings its own); small beside the
    per-step reward, which is scaled by dt."""
    batch_size: int = 256
    """Transitions per update (robot and prior together)."""
    n_step: int = 3
    """n of the n-step return; windows stop at episode ends, gaps and segment ends. A SAC
    checkpoint warm start keeps its run's n and gamma, which its critics' values are made of."""
    gamma: float = 0.99
    """Discount factor (of fresh critics; see n_step)."""
    critic_hidden: tuple[int, ...] = (256, 256)
    """Hidden widths of fresh critics (ONNX warm start)."""
    num_critics: int = 2
    """Q-networks in the ensemble of fresh critics."""
    warmup_updates: int = 2000
    """Critic updates with the actor frozen after an ONNX warm start (0: none)."""
    checkpoint_warmup_updates: int = 10000
    """Critic updates with the actor frozen after a SAC checkpoint warm start (0: none): its
    critics learned the simulator's whole reward, the robot's leaves out what it cannot measure,
    and an actor that follows them before they refit walks worse within minutes."""
    prior_share: float = 0.5
    """Share of each batch drawn from the prior (simulation) replay at the start."""
    prior_decay_updates: int = 15000
    """Updates over which the prior share falls linearly to 0."""
    sim_share: float = 0.0
    """Co-training: share of each batch from the transitions of an unperturbed simulated robot
    that walks beside the robot (add_sim), for the whole run, once learning_starts of them are
    in (0: off). Fine-tuning then learns both robots, not the robot alone."""
    learning_starts: int = 256
    """Robot transitions stored before the first update."""
    replay_capacity: int = 100_000
    """Robot transitions kept in memory, 33 min at 50 Hz, about 40 MB (the store keeps all)."""
    max_grad_norm: float = 10.0
    """Gradient-norm clip of each network."""
    guard_rows: int = 0
    """On-robot regression guard (loco_train.finetune.regression): transitions of a version,
    matched by command with the reference's, before it is judged; 0 off. A version that tracks
    `guard_margin` worse than the best judged one, or falls more often than the first policy,
    sends the actor back to the best one, exported again at once; the next candidate waits for
    the running one's verdict."""
    guard_margin: float = 0.1
    """Relative tracking error above the best version's that counts as a regression."""
    anchor: float = 0.0
    """Pull towards the warm start (L2-SP, decoupled as AdamW decouples weight decay): after
    every actor step each actor weight moves this share of its distance back to the warm
    start's, phi <- phi - anchor (phi - phi_0). A drift of Adam's about lr per step then levels
    off near lr / anchor per weight; 0 off."""
    actor_trainable: str = 'all'
    """What of the actor learns: 'all' its weights, or 'head' only its output layer (the mean
    and log-std heads, 2d x (hidden + 1) weights), the trunk held at the warm start's: the
    policy can then move only along the features it walked with."""

    def __post_init__(self):
        """Refuse batch shares and settings that leave no sense (ValueError)."""
        if self.actor_trainable not in ('all', 'head'):
            raise ValueError(f"actor_trainable {self.actor_trainable!r}: 'all' or 'head'")
        if not 0.0 <= self.prior_share <= 1.0:
            raise ValueError(f'prior_share {self.prior_share}: in [0, 1]')
        if not 0.0 <= self.sim_share < 1.0:
            raise ValueError(f'sim_share {self.sim_share}: in [0, 1)')


def contract_command_ranges(path):
    """The command_ranges of a policy file's contract, as exported (dict name -> [low, high])."""
    from loco_policy.policy_file import OnnxPolicy

    policy = OnnxPolicy(path, warmup=0)
    return {k: list(v) for k, v in policy.contract.command_ranges.items()}


class FineTuner:
    """SAC on robot transitions: robot replay, optional prior replay, update schedule, export."""

    def __init__(self, sac, config, parent=None, prior=None):
        """Wrap a warm-started SAC.

        parent: {path, sha256, command_ranges, version} of the policy started from; prior: a
        ReplayBuffer of simulation transitions (or None).
        """
        self.sac, self.cfg = sac, config
        self.parent = dict(parent or {})
        self.prior = prior if prior is not None and len(prior) > 0 else None
        self.sim = None  # the co-training robot's replay (add_sim)
        self.robot = ReplayBuffer(
            config.replay_capacity,
            1,
            sac.actor_kwargs['obs_dim'],
            sac.actor.action_dim,
            device=sac.device,
        )
        self.generator = torch.Generator(sac.device).manual_seed(0)
        self.updates = 0  # critic updates done by this learner (all runs of it)
        self.robot_transitions = 0  # robot transitions given to add() (all runs)
        self.credit = 0.0  # fractional updates owed
        self.version = int(self.parent.get('version', 0))  # version of the last export
        self.version_floor = 0  # exports are numbered above it (files of an earlier lineage)
        self.exports = 0
        self.frozen_until = 0  # updates before which the actor stays frozen
        self.last_metrics = {}
        self.template = OnnxTemplate()  # candidates after the first swap weights, no re-trace
        self.actor_states = collections.OrderedDict()  # version -> (actor, optimiser) states
        self.follows = 0  # times the actor was reset to the policy the robot runs
        # phi_0 of the anchor: the warm start's actor weights (the policy the robot ran first)
        self.anchor_params = [p.detach().clone() for p in sac.actor.parameters()]
        self._apply_schedule()
        self._remember_actor(self.version)  # the warm start: what the robot runs at first

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_onnx(cls, path, config=None, device='cpu'):
        """Start from a deployed policy file: its actor and normaliser, fresh critics."""
        import hashlib

        config = config or FinetuneConfig()
        try:
            actor, normalizer = actor_from_onnx(path)
        except PolicyImportError as error:
            raise WarmStartError(f'{error}; warm-start from a SAC checkpoint instead') from None
        if actor.trunk[0].in_features != spec.OBS_DIM:  # the transition rows hold 48 terms
            raise WarmStartError(
                f'{path}: takes {actor.trunk[0].in_features} observation entries; fine-tuning '
                f'learns from /replay/transitions, whose rows hold the {spec.OBS_DIM}-term '
                'velocity observation (a gait-clock policy is not fine-tuned)'
            )
        if any(isinstance(layer, torch.nn.LayerNorm) for layer in actor.trunk):
            raise WarmStartError(
                f'{path}: its actor has LayerNorm layers (loco-train shac --layer-norm), which '
                "the SAC learner's actor does not; fine-tune a policy without them"
            )
        sac = SAC(
            actor.trunk[0].in_features, actor.b, actor.c, _sac_config(config, actor), device=device
        )
        sac.actor.load_state_dict(actor.state_dict())
        sac.normalizer.load_state_dict(normalizer.state_dict())
        sac.target_entropy = _target_entropy(config, sac.actor)
        with open(path, 'rb') as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        parent = {
            'path': str(path),
            'sha256': digest,
            'version': 0,
            'command_ranges': contract_command_ranges(path),
            'warm_start': 'onnx',
        }
        tuner = cls(sac, config, parent)
        tuner.frozen_until = config.warmup_updates
        tuner._apply_schedule()
        return tuner

    @classmethod
    def from_checkpoint(cls, path, config=None, device='cpu', prior_replay=None):
        """Start from a `loco-train sac` checkpoint.pt; prior_replay: its replay.pt (or None)."""
        from loco_train.policy.atomic_io import torch_load

        config = config or FinetuneConfig()
        try:
            state = torch_load(path, map_location=device)
            saved = state['sac']
        except (OSError, KeyError, RuntimeError, pickle.UnpicklingError) as error:
            raise WarmStartError(f'{path}: not a loco-train sac checkpoint ({error})') from None
        payload = state.get('policy', {})
        kwargs = payload.get('actor_kwargs') or {}
        if kwargs.get('obs_dim', spec.OBS_DIM) != spec.OBS_DIM:  # the transition rows hold 48
            raise WarmStartError(
                f'{path}: its actor takes {kwargs["obs_dim"]} observation entries; fine-tuning '
                f'learns from /replay/transitions, whose rows hold the {spec.OBS_DIM}-term '
                'velocity observation (a gait-clock policy is not fine-tuned)'
            )
        cfg = SACConfig(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in saved['config'].items()}
        )
        cfg.actor_lr, cfg.critic_lr, cfg.alpha_lr = (
            config.actor_lr,
            config.critic_lr,
            config.alpha_lr,
        )
        # the critics' values are n-step returns discounted by their run's gamma: keep both
        config = replace(config, n_step=cfg.n_step, gamma=cfg.gamma)
        cfg.batch_size = config.batch_size
        cfg.utd_ratio, cfg.max_grad_norm = config.utd_ratio, config.max_grad_norm
        cfg.actor_update_interval = config.actor_update_interval
        cfg.compile = False  # no torch.compile beside the exporter's tracing
        cfg.cuda_graphs = False  # the learning rates are set below, after loading
        sac = SAC(
            kwargs.get('obs_dim', spec.OBS_DIM),
            kwargs['action_bias'],
            kwargs['action_scale'],
            cfg,
            device=device,
        )
        sac.load_state_dict(saved)
        sac.target_entropy = _target_entropy(config, sac.actor)
        prior = None
        if prior_replay:
            prior = _load_replay(prior_replay, sac)
        ranges = payload.get('command_ranges') or spec.contract_metadata({})['command_ranges']
        parent = {
            'path': str(path),
            'sha256': '',
            'version': 0,
            'command_ranges': ranges,
            'warm_start': 'checkpoint',
        }
        tuner = cls(sac, config, parent, prior)
        tuner.set_learning_rates()  # the checkpoint's optimisers carry its run's rates
        tuner.frozen_until = config.checkpoint_warmup_updates
        tuner._apply_schedule()
        return tuner

    # -- data -----------------------------------------------------------------------------------

    @staticmethod
    def _store(buffer, transitions):
        """Extend a replay buffer with the finite rows of ingest.drain()'s dict; rows kept."""
        if len(transitions['seq']) == 0:
            return 0
        fields = [torch.as_tensor(np.asarray(f)) for f in replay_fields(transitions)]
        finite = torch.isfinite(fields[0]).all(1) & torch.isfinite(fields[3]).all(1)
        finite &= torch.isfinite(fields[1]).all(1) & torch.isfinite(fields[2])
        # a dropped row ends the segment of the kept row before it (no n-step window joins)
        fields[5] = fields[5] | torch.cat([~finite[1:], torch.zeros(1, dtype=torch.bool)])
        buffer.extend(*(f[finite] for f in fields))  # (kept, ...) rows, N = 1
        return int(finite.sum())

    def add(self, transitions):
        """Store robot transitions (ingest.drain()'s dict); owe utd_ratio updates for each."""
        kept = self._store(self.robot, transitions)
        if kept == 0:
            return 0
        before = self.robot_transitions
        self.robot_transitions += kept
        fresh = self.robot_transitions - max(before, self.cfg.learning_starts)
        if fresh > 0:
            self.credit += self.cfg.utd_ratio * fresh
        return kept

    def add_sim(self, transitions):
        """Store the co-training robot's transitions (ingest.drain()'s dict); no update owed.

        They go to a replay of their own (replay_capacity rows, made on first use), apart from
        a replay.pt prior, and are not checkpointed: they are made again in seconds.
        """
        if self.sim is None:
            self.sim = ReplayBuffer(
                self.cfg.replay_capacity, 1, self.sac.actor_kwargs['obs_dim'],
                self.sac.actor.action_dim, device=self.sac.device,
            )  # fmt: skip
        return self._store(self.sim, transitions)

    def sim_share(self):
        """Share of the batch from the co-training replay now (0 until learning_starts rows)."""
        if self.sim is None or len(self.sim) < max(1, self.cfg.learning_starts):
            return 0.0
        return self.cfg.sim_share

    def owed(self):
        """Whole updates owed by the data received (the update-to-data ratio)."""
        return math.floor(self.credit)

    def prior_share(self):
        """Share of the batch from the prior replay now: linear decay to 0."""
        if self.prior is None or self.cfg.prior_decay_updates <= 0:
            return 0.0
        left = max(0.0, 1.0 - self.updates / self.cfg.prior_decay_updates)
        return self.cfg.prior_share * left

    def sample(self):
        """One Batch: robot transitions, the prior's share, the co-training robot's share."""
        B, cfg = self.cfg.batch_size, self.cfg
        n_sim = int(round(B * self.sim_share()))
        n_prior = min(int(round(B * self.prior_share())), B - n_sim)
        parts = []
        if B - n_prior - n_sim > 0:
            n_robot = B - n_prior - n_sim
            parts.append(self.robot.sample(n_robot, cfg.n_step, cfg.gamma, self.generator))
        if n_prior > 0:
            parts.append(self.prior.sample(n_prior, cfg.n_step, cfg.gamma, self.generator))
        if n_sim > 0:
            parts.append(self.sim.sample(n_sim, cfg.n_step, cfg.gamma, self.generator))
        if len(parts) == 1:
            return parts[0]
        return Batch(
            **{
                name: torch.cat([getattr(p, name) for p in parts])
                for name in Batch.tensor_fields()
            }
        )

    # -- learning -------------------------------------------------------------------------------

    @property
    def actor_frozen(self):
        """True during the critic warm-up after a warm start (ONNX or checkpoint)."""
        return self.updates < self.frozen_until

    def _apply_schedule(self):
        """Freeze the actor (and temperature) during warm-up, else the configured interval."""
        interval = NEVER if self.actor_frozen else self.cfg.actor_update_interval
        self.sac.cfg.actor_update_interval = interval

    def update(self, limit=None):
        """Run the owed updates (at most limit); return how many ran."""
        if len(self.robot) < max(1, self.cfg.learning_starts):
            return 0
        count = self.owed() if limit is None else min(self.owed(), int(limit))
        for _ in range(count):
            self.last_metrics = self.sac.update(self.sample(), self.generator)
            if 'actor_updates' in self.last_metrics:  # this update stepped the actor
                if self.cfg.actor_trainable == 'head':
                    self._hold_trunk()
                if self.cfg.anchor > 0:
                    self._pull_to_anchor()
            self.updates += 1
            self.credit -= 1.0
            self._apply_schedule()
        return count

    @torch.no_grad()
    def _hold_trunk(self):
        """Put the actor's trunk back to the warm start's weights (actor_trainable 'head')."""
        trunk = list(self.sac.actor.trunk.parameters())  # registered before the head: the
        torch._foreach_copy_(trunk, self.anchor_params[: len(trunk)])  # first of parameters()

    @torch.no_grad()
    def _pull_to_anchor(self):
        """Move every actor weight: phi <- phi + anchor (phi_0 - phi) (after an actor step)."""
        torch._foreach_lerp_(
            list(self.sac.actor.parameters()), self.anchor_params, self.cfg.anchor
        )

    def anchor_distance(self):
        """How far the actor moved from the warm start: max |phi - phi_0| over its weights."""
        with torch.no_grad():
            return max(
                float((p - p0).abs().max())
                for p, p0 in zip(self.sac.actor.parameters(), self.anchor_params, strict=True)
            )

    def metrics(self):
        """The last update's metrics as floats (reads the device)."""
        return {key: float(value) for key, value in self.last_metrics.items()}

    # -- export ---------------------------------------------------------------------------------

    def deployed_policy(self):
        """The current deterministic policy (normaliser + actor mean), detached copies."""
        return DeployedPolicy(
            copy.deepcopy(self.sac.normalizer).cpu(), copy.deepcopy(self.sac.actor).cpu()
        ).eval()

    def prepare_export(self):
        """Trace the candidates' ONNX graph now (seconds), so each export only swaps weights."""
        self.template.model_for(self.deployed_policy())

    def snapshot(self):
        """Take the next candidate and count it: (version, parent_version, policy, provenance).

        The policy is a detached copy, so write_candidate may run on another thread while
        learning goes on. Versions only increase (a candidate that fails to write is skipped).
        """
        parent_version = self.version
        version = max(self.version, self.version_floor) + 1
        extra = {
            'parent_version': parent_version,
            'parent_sha256': self.parent.get('sha256', ''),
            'version': version,
            'updates': self.updates,
            'robot_transitions': self.robot_transitions,
            'warm_start': self.parent.get('warm_start', ''),
        }
        self.version, self.exports = version, self.exports + 1
        self._remember_actor(version)
        return version, parent_version, self.deployed_policy(), extra

    def set_learning_rates(self):
        """Give the optimisers this learner's configured rates (a loaded state brings its own)."""
        sac, cfg = self.sac, self.cfg
        for optim, lr in (
            (sac.actor_optim, cfg.actor_lr),
            (sac.critic_optim, cfg.critic_lr),
            (sac.alpha_optim, cfg.alpha_lr),
        ):
            for group in optim.param_groups:
                group['lr'] = lr

    def _remember_actor(self, version):
        """Keep an exported version's actor weights and optimiser state, for follow()."""
        sac = self.sac
        self.actor_states[version] = copy.deepcopy(
            (sac.actor.state_dict(), sac.actor_optim.state_dict())
        )
        while len(self.actor_states) > KEPT_ACTOR_STATES:
            self.actor_states.popitem(last=False)

    def follow(self, version, path=None):
        """Reset the actor to exported `version`, the one the robot runs; False if not found.

        After the robot rejects or rolls back a candidate the learner goes on from the policy
        that is running, so its next candidates stay within the robot's swap limits of it. The
        last KEPT_ACTOR_STATES versions are kept with their optimiser state; an older one (or
        one exported before a restart) is read back from its policy file `path`, with fresh
        Adam moments.
        """
        state = self.actor_states.get(version)
        if state is not None:
            self.actor_states.move_to_end(version)  # a streak of refusals must not evict it
            actor, optim = copy.deepcopy(state)
            self.sac.actor.load_state_dict(actor)
            self.sac.actor_optim.load_state_dict(optim)
        elif path is not None and os.path.isfile(path):
            try:
                actor, normalizer = actor_from_onnx(path)
                if not self._same_normalizer(normalizer):  # not of this learner's lineage
                    return False
                self.sac.actor.load_state_dict(actor.state_dict())
            except (PolicyImportError, RuntimeError, OSError):  # not this actor's shape
                return False
            self.sac.actor_optim.state.clear()
            self._remember_actor(version)
        else:
            return False
        self.follows += 1
        return True

    def _same_normalizer(self, normalizer):
        """True when a policy file's normaliser is this learner's (its actor fits our inputs)."""
        ours = self.sac.normalizer
        return all(
            torch.allclose(
                getattr(normalizer, name).double().cpu(),
                getattr(ours, name).double().cpu(),
                rtol=1e-4,
                atol=1e-5,
            )
            for name in ('mean', 'var')
        )

    def write_candidate(self, snapshot, path):
        """Write a snapshot through the common exporter, atomically; return its metadata."""
        _, _, policy, extra = snapshot
        return export_policy(
            policy,
            path,
            'sac_finetune',
            extra['updates'],
            0.0,
            self.parent.get('command_ranges'),
            extra_provenance=extra,
            template=self.template,
        )

    def export(self, path):
        """snapshot() and write_candidate() in one call; (version, parent, metadata)."""
        snapshot = self.snapshot()
        return snapshot[0], snapshot[1], self.write_candidate(snapshot, path)

    # -- checkpoint -----------------------------------------------------------------------------

    def state_dict(self):
        """Networks, optimisers, temperature, normaliser and the learner's counters."""
        return {
            'sac': self.sac.state_dict(),
            'actor_kwargs': self.sac.actor_kwargs,
            'finetune': asdict(self.cfg),
            'parent': self.parent,
            'updates': self.updates,
            'robot_transitions': self.robot_transitions,
            'credit': self.credit,
            'version': self.version,
            'exports': self.exports,
            'frozen_until': self.frozen_until,
        }

    def to_bytes(self):
        """state_dict() serialised (what the store's checkpoint slot keeps)."""
        buffer = io.BytesIO()
        torch.save(self.state_dict(), buffer)
        return buffer.getvalue()

    def load_bytes(self, data):
        """Restore from to_bytes() output: the counters continue (the next export is version+1)."""
        state = torch.load(io.BytesIO(data), map_location=self.sac.device, weights_only=True)
        self.sac.load_state_dict(state['sac'])
        self.parent = dict(state['parent'])
        self.updates = int(state['updates'])
        self.robot_transitions = int(state['robot_transitions'])
        self.credit = float(state['credit'])
        self.version = int(state['version'])
        self.exports = int(state['exports'])
        self.frozen_until = int(state['frozen_until'])
        stored = state.get('finetune', {})  # the returns the stored critics were fitted to
        if 'gamma' in stored and 'n_step' in stored:
            self.cfg = replace(
                self.cfg, gamma=float(stored['gamma']), n_step=int(stored['n_step'])
            )
            self.sac.cfg.gamma, self.sac.cfg.n_step = self.cfg.gamma, self.cfg.n_step
        self.set_learning_rates()  # the configuration's, not the stored run's
        self._apply_schedule()

    def refill(self, transitions):
        """Put stored robot transitions back in memory after a restart (no updates owed)."""
        credit, count = self.credit, self.robot_transitions
        seq, episode = np.asarray(transitions['seq']), np.asarray(transitions['episode'])
        if len(seq) > 1:  # runs of the node follow one another in the store: no window joins two
            transitions = dict(transitions)
            joins = (seq[1:] != seq[:-1] + 1) | (episode[1:] != episode[:-1])
            transitions['segment_end'] = np.asarray(transitions['segment_end']).copy()
            transitions['segment_end'][:-1] |= joins
        if self.add(transitions):  # the stream broke at the restart: end the last segment
            self.robot.truncated[(self.robot.ptr - 1) % self.robot.rows] = True
        self.credit, self.robot_transitions = credit, count


def _sac_config(config, actor):
    """SACConfig of an ONNX warm start: the actor's shape, fresh critics, the learner's rates."""
    return SACConfig(
        actor_hidden=tuple(
            layer.out_features for layer in actor.trunk if isinstance(layer, torch.nn.Linear)
        ),
        critic_hidden=tuple(config.critic_hidden),
        activation=_activation_name(actor),
        num_critics=config.num_critics,
        gamma=config.gamma,
        n_step=config.n_step,
        batch_size=config.batch_size,
        utd_ratio=config.utd_ratio,
        actor_lr=config.actor_lr,
        critic_lr=config.critic_lr,
        alpha_lr=config.alpha_lr,
        init_alpha=config.init_alpha,
        actor_update_interval=config.actor_update_interval,
        max_grad_norm=config.max_grad_norm,
        sigma0=float(
            math.exp(actor.head.bias[actor.action_dim :].detach().mean().clamp(-4.9, 1.9))
        ),
    )


def policy_entropy(actor, samples=4096, seed=0):
    """Mean -log pi(a|s) of an actor (nats) on standard-normal normalised observations."""
    generator = torch.Generator().manual_seed(seed)
    obs = torch.randn(samples, actor.trunk[0].in_features, generator=generator)
    with torch.no_grad():
        _, log_pi = actor.cpu().sample(obs.clamp(-3.0, 3.0), generator=generator)
    return float(-log_pi.mean())


def _target_entropy(config, actor):
    """The configured target entropy, else the warm-started actor's own."""
    if config.target_entropy is not None:
        return float(config.target_entropy)
    device = next(actor.parameters()).device
    entropy = policy_entropy(actor)
    actor.to(device)
    return entropy


def _activation_name(actor):
    """The activation name of an actor's trunk (elu, tanh, relu or silu)."""
    names = {'ELU': 'elu', 'Tanh': 'tanh', 'ReLU': 'relu', 'SiLU': 'silu'}
    for layer in actor.trunk:
        if type(layer).__name__ in names:
            return names[type(layer).__name__]
    return 'elu'


def _load_replay(path, sac):
    """A ReplayBuffer from a `loco-train sac --save-replay` replay.pt, on the learner's device."""
    from loco_train.policy.atomic_io import torch_load

    state = torch_load(path, map_location=sac.device)
    shape = state['obs'].shape  # (T, N, obs_dim)
    buffer = ReplayBuffer(
        shape[0] * shape[1], shape[1], shape[2], sac.actor.action_dim, device=sac.device
    )
    buffer.load_state_dict(state)
    return buffer
