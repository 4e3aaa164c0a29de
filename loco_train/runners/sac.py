"""`loco-train sac`: the SAC training loop, progress bar, TensorBoard, checkpoints and resume.

The runner owns everything with side effects; the algorithm (loco_train.sac) only updates.
Each vector step stores N transitions whose next observation is the pre-reset one where an
episode ended (extras['final_obs']), then runs utd_ratio * N gradient updates.

Under torchrun (loco_train.runners.distributed) --num-envs N is the total: rank r steps its N/K
environments of one population and keeps their transitions in its own replay buffer. Every rank
draws the same global batch indices and noise and learns on its own part of them; gradients
(weighted by each part's share) and normaliser statistics are summed over ranks, so K ranks
update exactly as one process with all N environments would. Rank 0 logs and checkpoints.
"""

import argparse
from collections import deque
from dataclasses import asdict, dataclass, field
import json
import math
import os
import sys
import time
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm import tqdm

from loco_train.envs import add_observation_argument, env_overrides
from loco_train.envs.actuator_fit import add_actuator_argument
from loco_train.envs.commands import add_command_argument
from loco_train.envs.randomization import add_override_argument as add_randomize_argument
from loco_train.envs.rewards import add_override_argument
from loco_train.policy.atomic_io import atomic_torch_save, torch_load
from loco_train.policy.export import POLICY_KEY, policy_payload
from loco_train.runners import distributed
from loco_train.sac import bounds_from_box, ReplayBuffer, SAC, SACConfig
from loco_train.sac.background import BackgroundUpdates

if TYPE_CHECKING:
    from loco_train.envs.vec_env import VecEnv


@dataclass
class RunnerConfig:
    """What the SAC training loop does around the updates."""

    env: str = 'gymnasium:Pendulum-v1'
    """Environment: 'anymal' or 'gymnasium:<ID>' (any Box-action gymnasium id)."""
    num_envs: int = 4
    """N, environments stepped together (under torchrun the total over all ranks)."""
    total_steps: int = 20_000
    """Environment transitions to collect in total (all N environments together)."""
    learning_starts: int = 1_000
    """Transitions collected before the first gradient update."""
    random_steps: int = 0
    """Transitions collected with uniform random actions inside the bounds before the policy."""
    replay_capacity: int = 1_000_000
    """Replay buffer capacity in transitions."""
    seed: int = 0
    """Seed of torch, numpy and the environments."""
    device: str = 'cpu'
    """Torch device of networks, replay buffer and (for torch environments) the env."""
    threads: int = 1
    """Torch CPU threads (0: torch's default); small networks gain little from more."""
    learner_threads: int = 0
    """Torch CPU threads of the overlapped learner thread (0: the same as threads); the
    collecting thread keeps `threads`."""
    log_dir: str = ''
    """Run directory for TensorBoard events and checkpoints; '' picks logs/sac/<env>-<time>."""
    log_interval: int = 1_000
    """Transitions between TensorBoard writes."""
    checkpoint_interval: int = 10_000
    """Transitions between checkpoints (0: only the final one)."""
    save_replay: bool = False
    """Also save the replay buffer (replay.pt) with every checkpoint."""
    eval_episodes: int = 10
    """Deterministic evaluation episodes at the end (0 to skip)."""
    return_window: int = 20
    """Completed training episodes averaged into the reported return."""
    progress: bool = True
    """Show a tqdm progress bar on stderr."""
    timeout_bootstrap: bool = True
    """Fix 3: bootstrap timeouts from the pre-reset observation; False stores them as
    terminations (value 0), the common mistake, for the ablation."""
    action_bound_scale: float = 1.0
    """Fix 1 ablation: >1 widens the policy's action box beyond the real bounds (env clips)."""
    overlap: bool = False
    """Run each step's gradient updates in a learner thread while the environments step (the
    updates then see the buffer up to the previous step); False runs them after the step."""
    sac: SACConfig = field(default_factory=SACConfig)
    """The algorithm's hyperparameters."""


class SACRunner:
    """Collect transitions from a VecEnv, feed SAC.update, log, checkpoint, resume."""

    def __init__(self, env: 'VecEnv', config: RunnerConfig, ranks=None):
        """env: this rank's environments (N/K of config.num_envs under torchrun)."""
        self.env, self.cfg = env, config
        self.ranks = ranks or distributed.Ranks()
        K = self.ranks.world_size
        # (offset, total): this rank's environments among all ranks'; None in one process.
        self.shard = None
        if self.ranks.enabled:
            offset, count = self.ranks.shard(config.num_envs)
            if count != env.num_envs:
                raise ValueError(f'rank {self.ranks.rank} has {env.num_envs} envs, not {count}')
            if config.sac.compile:  # each rank's part of a batch changes size every update
                distributed.main_print('torchrun: the SAC update runs eagerly (no --compile)')
                config.sac.compile = False
            if config.sac.cuda_graphs:  # the same, and the gradients' all-reduce is not captured
                raise ValueError('--cuda-graphs is not supported under torchrun')
            if config.sac.batch_size < 16 * K:
                size = config.sac.batch_size
                raise ValueError(f'--batch-size {size} is below 16 per rank over {K} ranks')
            self.shard = (offset, config.num_envs)
        b, c = bounds_from_box(env.action_low, env.action_high)
        c = c * config.action_bound_scale
        self.sac = SAC(env.obs_dim, b, c, config.sac, config.device)
        # The rows one buffer of all N environments would have, each rank its N/K columns.
        rows = math.ceil(config.replay_capacity / config.num_envs) if self.shard else None
        capacity = rows * env.num_envs if rows else config.replay_capacity
        self.buffer = ReplayBuffer(
            capacity, env.num_envs, env.obs_dim, env.action_dim, config.device
        )
        if self.ranks.enabled:
            self.sac.grad_sync = distributed.sum_shares_
            distributed.broadcast_modules_(self.sac.actor, self.sac.critic, self.sac.critic_target)
        self.run_dir = distributed.broadcast_object(
            config.log_dir
            or os.path.join(
                'logs', 'sac', config.env.replace(':', '_') + time.strftime('-%Y%m%d-%H%M%S')
            )
        )
        self.steps = 0  # transitions collected
        # Transitions collected before the buffer's oldest stored one: 0 in a fresh run, the
        # checkpoint's steps when a resume finds no replay file (the buffer refills to
        # learning_starts before updates go on).
        self.refill_offset = 0
        self.update_credit = 0.0  # updates owed: utd_ratio per transition, fractions carried
        self.recent_returns = deque(maxlen=config.return_window)
        self.recent_lengths = deque(maxlen=config.return_window)  # in env steps
        self.episodes = 0
        self.dropped_steps = 0  # env transitions replaced because the env returned NaN/inf
        # Wall and process CPU time (s) of the latest vector steps that ran updates.
        self.step_seconds, self.step_cpu_seconds = deque(maxlen=1000), deque(maxlen=1000)
        self.writer = None
        # The learner's own random stream (replay indices, policy noise), apart from acting's.
        self.learner_rng = torch.Generator(config.device).manual_seed(config.seed + 1)

    # -- checkpoints ---------------------------------------------------------------------------

    @property
    def checkpoint_path(self) -> str:
        """Where save() writes the checkpoint."""
        return os.path.join(self.run_dir, 'checkpoint.pt')

    @property
    def num_envs(self) -> int:
        """N, the environments of all ranks together."""
        return self.env.num_envs * self.ranks.world_size

    def _replay_path(self, directory: str) -> str:
        """replay.pt, or replay-rank<r>.pt for a rank's own buffer under torchrun."""
        name = f'replay-rank{self.ranks.rank}.pt' if self.ranks.enabled else 'replay.pt'
        return os.path.join(directory, name)

    def save(self) -> str:
        """Write the checkpoint (rank 0) and replay buffers if configured, atomically; path.

        Under torchrun every rank calls it (its episode statistics are gathered for rank 0).
        """
        if self.cfg.save_replay:  # every rank its own buffer
            self.buffer.save(self._replay_path(self.run_dir))
        returns, lengths = self._episodes()
        episodes, _ = self._totals()
        if not self.ranks.is_main:
            return self.checkpoint_path
        window = self.cfg.return_window
        state = {
            'sac': self.sac.state_dict(),
            'runner': asdict(self.cfg) | {'sac': None},
            'steps': self.steps,
            'update_credit': self.update_credit,
            'episodes': episodes,
            'recent_returns': returns[-window:],
            'recent_lengths': lengths[-window:],
            'torch_rng': torch.get_rng_state(),
            'learner_rng': self.learner_rng.get_state(),
            # What `loco-train export` reads: the same exporter and contract as SHAC.
            POLICY_KEY: policy_payload(
                self.sac.actor,
                self.sac.actor_kwargs,
                self.sac.normalizer,
                'sac',
                self.sac.num_updates,
                float(np.mean(returns)) if returns else 0.0,
                getattr(self.env, 'command_ranges', None),
                getattr(self.env, 'provenance', None),
                getattr(self.env, 'layout_name', 'velocity'),
            ),
        }
        atomic_torch_save(state, self.checkpoint_path)
        return self.checkpoint_path

    def load(self, path: str) -> None:
        """Resume from a checkpoint (and the replay file beside it, if present); envs start fresh.

        Every rank loads the same file, so networks and the shared random streams agree; the
        episode statistics (all ranks' together) go to rank 0. The replay files are loaded only
        if every rank has one and all hold the same number of steps (else none is, and the
        buffers start empty), so that every rank draws the same batches.
        """
        state = torch_load(path, map_location=self.cfg.device)
        self.sac.load_state_dict(state['sac'])
        self.steps = int(state['steps'])
        self.update_credit = float(state['update_credit'])
        if self.ranks.is_main:
            self.episodes = int(state['episodes'])
            self.recent_returns.extend(state['recent_returns'])
            self.recent_lengths.extend(state.get('recent_lengths', []))
        torch.set_rng_state(state['torch_rng'].cpu())
        if 'learner_rng' in state:
            self.learner_rng.set_state(state['learner_rng'].cpu())
        replay = self._replay_path(os.path.dirname(os.path.abspath(path)))
        loaded = distributed.all_true(os.path.exists(replay))
        if loaded:
            self.buffer.load(replay)
            sizes = distributed.gather_lists([self.buffer.size])
            if len(set(sizes)) > 1:
                raise ValueError(f"the ranks' replay files hold {sizes} steps: they must agree")
        self.refill_offset = max(self.steps - self.buffer.size * self.num_envs, 0)
        if not loaded and self.steps and self.ranks.is_main:
            print(
                f'loco-train sac: no replay file beside {path}; collecting '
                f'{self.cfg.learning_starts} transitions before the next update',
                file=sys.stderr,
            )

    # -- training ------------------------------------------------------------------------------

    def _own_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Return this rank's rows of a (N_total, ...) draw (all of it in one process)."""
        if self.shard is None:
            return x
        offset = self.shard[0]
        return x[offset : offset + self.env.num_envs]

    def _random_actions(self) -> torch.Tensor:
        low = torch.as_tensor(self.env.action_low, dtype=torch.float32)
        high = torch.as_tensor(self.env.action_high, dtype=torch.float32)
        u = self._own_rows(torch.rand(self.num_envs, self.env.action_dim))
        return (low + (high - low) * u).to(self.cfg.device)

    def _act(self, obs: torch.Tensor) -> torch.Tensor:
        """Sampled actions (N/K, d); the noise is drawn for all ranks' envs, rows kept."""
        if self.shard is None:
            return self.sac.act(obs)
        eps = torch.randn(self.num_envs, self.env.action_dim)
        return self.sac.act(obs, eps=self._own_rows(eps).to(self.cfg.device))

    def _updates_owed(self, new_steps: int) -> int:
        """Add utd_ratio per transition past learning_starts; return the whole updates owed.

        learning_starts counts the transitions since the buffer began (after a resume without
        the replay file, since the resume), so that no update samples a nearly empty buffer.
        """
        stored = self.steps - self.refill_offset
        fresh = stored + new_steps - max(stored, self.cfg.learning_starts)
        if fresh <= 0:
            return 0
        self.update_credit += self.cfg.sac.utd_ratio * fresh
        owed = math.floor(self.update_credit)
        self.update_credit -= owed
        return owed

    def _run_updates(self, count: int) -> dict:
        """Sample and apply `count` updates; return the summed metrics (tensors, not read)."""
        sac, cfg, sums = self.sac, self.cfg.sac, {}
        for _ in range(count):
            batch = self.buffer.sample(
                cfg.batch_size, cfg.n_step, cfg.gamma, self.learner_rng, self.shard
            )
            for key, value in sac.update(batch, self.learner_rng).items():
                sums[key] = sums[key] + value if key in sums else value
        return sums

    def learn(self) -> dict:
        """Train until total_steps transitions; return the summary (also logged)."""
        from torch.utils.tensorboard import SummaryWriter  # slow import, only when training

        cfg, env, N = self.cfg, self.env, self.num_envs
        self.writer = SummaryWriter(self.run_dir) if self.ranks.is_main else None
        learner = BackgroundUpdates(cfg.learner_threads or None) if cfg.overlap else None
        try:
            return self._learn(cfg, env, N, learner)
        finally:
            if learner is not None:
                learner.close()
            if self.writer is not None:
                self.writer.close()

    def _learn(self, cfg, env, N, learner) -> dict:
        """The loop of learn(); N counts every rank's environments."""
        obs = env.reset(seed=cfg.seed + self.steps)
        episode_return = torch.zeros(env.num_envs, device=cfg.device)  # this rank's envs
        episode_length = torch.zeros(env.num_envs, dtype=torch.long, device=cfg.device)
        # Update metrics are summed as tensors and read once per log interval (no device wait).
        sums, count, last_log, start, env_log = {}, 0, self.steps, time.time(), {}
        bar = tqdm(
            total=cfg.total_steps,
            initial=self.steps,
            unit='step',
            disable=not (cfg.progress and self.ranks.is_main),
        )
        while self.steps < cfg.total_steps:
            tick, cpu_tick = time.time(), time.process_time()
            if self.steps < cfg.random_steps:
                actions = self._random_actions()
            else:
                actions = self._act(obs)
                # A NaN observation gives a NaN action: send the box centre (default pose).
                actions = torch.where(torch.isfinite(actions), actions, self.sac.actor.b)
            owed = self._updates_owed(N)
            overlapped = learner is not None and owed and len(self.buffer) > 0
            if overlapped:  # the learner works on the buffer as it stands while the env steps
                learner.submit(self._run_updates, owed)
            next_obs, reward, terminated, truncated, extras = env.step(actions)
            round_sums = learner.wait() if overlapped else None
            # The transition's successor is the pre-reset observation where an episode ended.
            if not cfg.timeout_bootstrap:  # ablation: a timeout counts as a failure
                terminated, truncated = terminated | truncated, torch.zeros_like(truncated)
            final_obs = extras['final_obs']
            bad = ~torch.isfinite(torch.cat([obs, final_obs, reward[:, None]], dim=1)).all(dim=1)
            if bad.any():
                # A NaN from the env never reaches the buffer, the normaliser or the networks:
                # the bad environments' transitions are stored as zero-reward terminations from
                # a zero state, so every other environment's n-step window stays aligned.
                self.dropped_steps += int(bad.sum())
                obs = torch.where(bad[:, None], torch.zeros_like(obs), obs)
                final_obs = torch.where(bad[:, None], torch.zeros_like(final_obs), final_obs)
                reward = torch.where(bad, torch.zeros_like(reward), reward)
                terminated, truncated = terminated | bad, truncated & ~bad
            self.buffer.add(obs, actions, reward, final_obs, terminated, truncated)
            self.sac.normalizer.update(
                obs[~bad], distributed.all_reduce_sum_ if self.ranks.enabled else None
            )
            done = terminated | truncated
            episode_return += torch.nan_to_num(reward, nan=0.0, posinf=0.0, neginf=0.0)
            episode_length += 1
            env_log = extras.get('log', env_log)  # the env's named reward terms, if any
            if done.any():
                self.recent_returns.extend(episode_return[done].tolist())
                self.recent_lengths.extend(episode_length[done].tolist())
                episode_length[done] = 0
                self.episodes += int(done.sum())
                episode_return[done] = 0.0
            obs = next_obs
            self.steps += N  # every rank's transitions
            bar.update(N)
            if owed and not overlapped:
                round_sums = self._run_updates(owed)
            if owed:
                for key, value in round_sums.items():
                    sums[key] = sums[key] + value if key in sums else value
                count += owed
                self.step_seconds.append(time.time() - tick)
                self.step_cpu_seconds.append(time.process_time() - cpu_tick)
            if self.steps - last_log >= cfg.log_interval or self.steps >= cfg.total_steps:
                rate = (self.steps - last_log) / max(time.time() - start, 1e-9)
                returns = self._log(self._mean_metrics(sums, count) | env_log, rate)
                if returns:
                    bar.set_postfix(ret=f'{np.mean(returns):.1f}')
                sums, count, last_log, start = {}, 0, self.steps, time.time()
            if cfg.checkpoint_interval and self.steps % cfg.checkpoint_interval < N:
                self.save()
        bar.close()
        self.save()
        return self.summary()

    @staticmethod
    def _mean_metrics(sums: dict, count: int) -> dict:
        """Average summed update metrics over the updates that took them (one device read).

        Critic metrics over the updates not skipped, the actor's over the actor updates (one in
        actor_update_interval), 'skipped' and alpha over every call.
        """
        if not sums:
            return {}
        keys = list(sums)
        values = torch.stack([sums[k].float() for k in keys]).tolist()  # the one device read
        totals = dict(zip(keys, values))
        skipped = totals.get('skipped', 0.0)
        taken = max(count - skipped, 1.0)
        actor_taken = max(totals.pop('actor_updates', taken), 1.0)

        def mean(key, value):
            if key in ('skipped', 'alpha'):
                return value / count
            return value / (actor_taken if key in SAC.ACTOR_METRICS else taken)

        return {k: mean(k, v) for k, v in totals.items()}

    def _totals(self) -> tuple[int, int]:
        """Episodes ended and env steps dropped, over all ranks (a collective under torchrun)."""
        if not self.ranks.enabled:
            return self.episodes, self.dropped_steps
        counts = torch.tensor([self.episodes, self.dropped_steps], dtype=torch.float64)
        distributed.all_reduce_sum_(counts)
        return int(counts[0]), int(counts[1])

    def _episodes(self) -> tuple[list, list]:
        """Recent episode returns and lengths of every rank (a collective under torchrun)."""
        if not self.ranks.enabled:
            return list(self.recent_returns), list(self.recent_lengths)
        pairs = distributed.gather_lists(list(zip(self.recent_returns, self.recent_lengths)))
        return [r for r, _ in pairs], [n for _, n in pairs]

    def _log(self, metrics: dict, rate: float) -> list:
        """Write update metrics and episode statistics, averaged over ranks, to TensorBoard.

        Returns the recent episode returns of every rank.
        """
        metrics = distributed.mean_metrics(metrics) if self.ranks.enabled else metrics
        returns, lengths = self._episodes()
        if self.writer is None:  # ranks other than 0 only took part in the collectives
            return returns
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, self.steps)
        if returns:
            self.writer.add_scalar('train/episode_return', np.mean(returns), self.steps)
        if lengths:
            self.writer.add_scalar('train/episode_length', np.mean(lengths), self.steps)
        self.writer.add_scalar('perf/env_steps_per_s', rate, self.steps)
        self.writer.add_scalar('train/updates', self.sac.num_updates, self.steps)
        return returns

    @torch.no_grad()
    def evaluate(self, episodes: int) -> float:
        """Mean return of the deterministic policy b + c tanh(mu) over the next `episodes`."""
        env = self.env
        obs = env.reset(seed=self.cfg.seed + 10_000)
        running = torch.zeros(env.num_envs, device=self.cfg.device)
        returns = []
        while len(returns) < episodes:
            obs, reward, terminated, truncated, _ = env.step(self.sac.act(obs, deterministic=True))
            running += reward
            done = terminated | truncated
            returns += running[done].tolist()
            running[done] = 0.0
        return float(np.mean(returns[:episodes]))

    def summary(self) -> dict:
        """The run's result: the final average training return and the deterministic return.

        Under torchrun the returns are every rank's; rank 0 alone evaluates, on its own envs.
        """
        returns, lengths = self._episodes()
        episodes, dropped = self._totals()
        evaluate = self.cfg.eval_episodes and self.ranks.is_main
        eval_return = self.evaluate(self.cfg.eval_episodes) if evaluate else None
        final = float(np.mean(returns)) if returns else None
        if self.writer is not None and eval_return is not None:
            self.writer.add_scalar('eval/episode_return', eval_return, self.steps)
        return {
            'algorithm': 'sac',
            'env': self.cfg.env,
            'env_steps': self.steps,
            'episodes': episodes,
            'final_return': final,
            'return_window': len(returns),
            'episode_length': float(np.mean(lengths)) if lengths else None,
            'eval_return': eval_return,
            'eval_episodes': self.cfg.eval_episodes,
            'updates': self.sac.num_updates,
            'skipped_updates': self.sac.num_skipped,
            'dropped_env_steps': dropped,
            'alpha': float(self.sac.alpha),
            'checkpoint': self.checkpoint_path,
            'world_size': self.ranks.world_size,
            # Median over the vector steps that ran updates, after the first (s): rank 0's.
            'step_s': distributed.median_after_first(self.step_seconds),
            'step_cpu_s': distributed.median_after_first(self.step_cpu_seconds),
        }


# -- command line ------------------------------------------------------------------------------

ARGUMENTS = {
    # flag: (config attribute, in RunnerConfig or its .sac)
    'env': 'env',
    'num_envs': 'num_envs',
    'total_steps': 'total_steps',
    'learning_starts': 'learning_starts',
    'random_steps': 'random_steps',
    'replay_capacity': 'replay_capacity',
    'seed': 'seed',
    'device': 'device',
    'threads': 'threads',
    'learner_threads': 'learner_threads',
    'log_dir': 'log_dir',
    'checkpoint_interval': 'checkpoint_interval',
    'eval_episodes': 'eval_episodes',
    'utd_ratio': 'sac.utd_ratio',
    'n_step': 'sac.n_step',
    'batch_size': 'sac.batch_size',
    'num_critics': 'sac.num_critics',
    'sigma0': 'sac.sigma0',
    'actor_update_interval': 'sac.actor_update_interval',
    'gamma': 'sac.gamma',
    'tau': 'sac.tau',
    'init_alpha': 'sac.init_alpha',
    'target_entropy': 'sac.target_entropy',
    'actor_lr': 'sac.actor_lr',
    'critic_lr': 'sac.critic_lr',
    'alpha_lr': 'sac.alpha_lr',
    'activation': 'sac.activation',
    'matmul_dtype': 'sac.matmul_dtype',
}

HELP = {
    'env': "'gymnasium:<ID>' (any Box-action gymnasium id) or 'anymal'",
    'num_envs': 'environments stepped together',
    'total_steps': 'environment transitions in total, all envs together',
    'learning_starts': 'transitions before the first update',
    'random_steps': 'transitions with uniform random actions first',
    'replay_capacity': 'replay buffer capacity in transitions',
    'seed': 'seed of torch, numpy and the environments',
    'device': 'torch device',
    'threads': 'torch CPU threads, 0 = torch default',
    'learner_threads': 'torch CPU threads of the overlapped learner, 0 = --threads',
    'log_dir': 'run directory for TensorBoard and checkpoints (default logs/sac/<env>-<time>)',
    'checkpoint_interval': 'transitions between checkpoints, 0 = end only',
    'eval_episodes': 'deterministic evaluation episodes at the end',
    'utd_ratio': 'gradient updates per collected transition',
    'n_step': 'n of the n-step return',
    'batch_size': 'transitions per gradient update',
    'num_critics': 'Q-networks in the ensemble',
    'sigma0': 'initial policy standard deviation',
    'actor_update_interval': 'critic updates per actor update',
    'gamma': 'discount factor gamma',
    'tau': 'Polyak rate of the target critics',
    'init_alpha': 'initial temperature alpha',
    'target_entropy': 'target entropy of the temperature (None: -|A|)',
    'actor_lr': 'Adam learning rate of the actor (after --lr)',
    'critic_lr': 'Adam learning rate of the critics (after --lr)',
    'alpha_lr': 'Adam learning rate of log alpha (after --lr)',
    'activation': 'hidden activation: relu, elu, tanh or silu',
    'matmul_dtype': "hidden layers' matrix products in the update: auto (bfloat16 on a CPU with "
    'AVX512-BF16 or AMX), float32 or bfloat16',
}


PRESETS = {
    # Any 'gymnasium:<ID>' without a preset of its own: Stable-Baselines3's SAC defaults, where
    # people first try SAC (MuJoCo tasks): one environment, one update per transition, 100
    # uniform random transitions first, [256, 256] ReLU, Adam 3e-4, alpha from 1, n = 1, and the
    # initial sigma and log-std clamp of a default-initialised log-std head.
    # Pendulum-v1, the check in the docs and the tests: SACConfig's own defaults (4 envs, utd
    # 0.25, [128, 128]) learn it in 20k steps, at a quarter of the updates of the entry below.
    'gymnasium:Pendulum-v1': {'overlap': True},
    'gymnasium': {
        'num_envs': 1,
        'learning_starts': 100,
        'random_steps': 100,
        'replay_capacity': 1_000_000,
        'overlap': True,
        'sac.actor_hidden': (256, 256),
        'sac.critic_hidden': (256, 256),
        'sac.activation': 'relu',
        'sac.actor_lr': 3e-4,
        'sac.critic_lr': 3e-4,
        'sac.alpha_lr': 3e-4,
        'sac.init_alpha': 1.0,
        'sac.batch_size': 256,
        'sac.utd_ratio': 1.0,
        'sac.n_step': 1,
        'sac.sigma0': 1.0,
        'sac.log_sigma_bounds': (-20.0, 2.0),
        'sac.max_grad_norm': None,
        'sac.compile': True,
    },
    # ANYmal velocity tracking: RSL-RL-SAC's flat-terrain settings scaled to a 2-core CPU (512
    # environments, [256, 128, 64] SiLU, n-step 5, gamma 0.97, tau 0.003, lr 2e-4 and 2e-5 for
    # the temperature from alpha 1e-3, sigma0 0.15) on Sabatini et al.'s ANYmal reward (Table B5:
    # the task's weights with feet air time 0.125). Walked at 9-11 M env steps in two runs; a
    # third, on two learner threads, at 11.5 M; in bfloat16 products on the compiled update at
    # 9.0 M (docs/training.md#sac-on-anymal). 4 updates of 2048 per 512-env step take the
    # learner thread 5-7 times as long as the step takes the collecting thread in float32.
    'anymal': {
        'num_envs': 512,
        'learning_starts': 512 * 64,
        'replay_capacity': 512 * 8000,
        'sac.actor_hidden': (256, 128, 64),
        'sac.critic_hidden': (256, 128, 64),
        'sac.activation': 'silu',
        'sac.actor_lr': 2e-4,
        'sac.critic_lr': 2e-4,
        'sac.alpha_lr': 2e-5,
        'sac.init_alpha': 1e-3,
        'sac.target_entropy': -2.0,
        'sac.gamma': 0.97,
        'sac.tau': 0.003,
        'sac.n_step': 5,
        'sac.sigma0': 0.15,
        'sac.batch_size': 2048,
        'sac.utd_ratio': 1 / 128,
        'sac.compile': True,
        'sac.matmul_dtype': 'auto',  # bfloat16 products on a CPU with units for them (~1.6x)
        'threads': 1,  # the collecting thread: a 512-env step is 20-30 ms of one core
        'learner_threads': 2,  # the update's products on both cores while the env steps
        'overlap': True,
        'env.reward': ('feet_air_time=0.125',),  # before any --reward given
    },
}
"""Overrides of RunnerConfig/SACConfig defaults per --env ('gymnasium' for any gymnasium id
without its own entry); explicit flags override them again."""


def preset_for(env: str) -> dict:
    """The PRESETS entry of an --env name: its own, else 'gymnasium' for 'gymnasium:<ID>'."""
    if env in PRESETS:
        return PRESETS[env]
    return PRESETS['gymnasium'] if env.startswith('gymnasium:') else {}


def preset_env_options(env: str, extra: dict) -> dict:
    """make_env options with the preset's reward overrides first; a --reward flag wins."""
    rewards = preset_for(env).get('env.reward', ())
    if rewards:
        extra = {**extra, 'reward_overrides': [*rewards, *extra.get('reward_overrides', [])]}
    return extra


def set_option(cfg: RunnerConfig, attr: str, value) -> None:
    """Set 'name' on cfg or 'sac.name' on cfg.sac."""
    owner, name = (cfg.sac, attr[4:]) if attr.startswith('sac.') else (cfg, attr)
    setattr(owner, name, value)


def add_arguments(parser) -> None:
    """Add `loco-train sac` options; defaults come from RunnerConfig, SACConfig and PRESETS."""
    runner = RunnerConfig()
    for flag, attr in ARGUMENTS.items():
        owner, name = (runner.sac, attr[4:]) if attr.startswith('sac.') else (runner, attr)
        default = getattr(owner, name)
        help_text = f'{HELP[flag]} (default {default!r} or the --env preset)'
        kind = float if default is None else type(default)  # target_entropy: None or a number
        parser.add_argument('--' + flag.replace('_', '-'), type=kind, help=help_text)
    parser.add_argument(
        '--hidden',
        type=lambda text: tuple(int(v) for v in text.split(',')),
        default=None,
        help='actor and critic hidden sizes, comma-separated (default: SACConfig or the preset)',
    )
    parser.add_argument(
        '--lr', type=float, default=None, help='actor, critic and temperature learning rate'
    )
    parser.add_argument('--save-replay', action='store_true', help='checkpoint the replay buffer')
    parser.add_argument(
        '--overlap',
        type=int,
        choices=(0, 1),
        default=None,
        help='1: updates in a learner thread while the envs step, 0: after each step '
        '(default: the preset; off without one)',
    )
    parser.add_argument(
        '--critic-layer-norm',
        type=int,
        choices=(0, 1),
        default=None,
        help='1: layer normalisation before each hidden activation of the critics (default 0)',
    )
    parser.add_argument(
        '--compile',
        action=argparse.BooleanOptionalAction,
        default=None,
        help='torch.compile the update (default: the --env preset; off without one)',
    )
    parser.add_argument(
        '--cuda-graphs',
        action='store_true',
        help='replay each update from a captured CUDA graph (CUDA, float32, one process)',
    )
    add_override_argument(parser)
    add_command_argument(parser)
    add_randomize_argument(parser)
    add_observation_argument(parser)
    add_actuator_argument(parser)
    parser.add_argument('--resume', default='', help='checkpoint.pt to continue from')
    parser.add_argument('--no-progress', action='store_true', help='hide the progress bar')


def config_from_args(args) -> RunnerConfig:
    """Build the RunnerConfig (with its SACConfig): defaults, then the env's preset, then flags."""
    cfg = RunnerConfig(save_replay=args.save_replay, progress=not args.no_progress)
    env = args.env or cfg.env
    for attr, value in preset_for(env).items():
        if not attr.startswith('env.'):  # environment options go to make_env (preset_env_options)
            set_option(cfg, attr, value)
    if getattr(args, 'lr', None):  # all three, then --actor-lr etc. override it
        cfg.sac.actor_lr = cfg.sac.critic_lr = cfg.sac.alpha_lr = float(args.lr)
    for flag, attr in ARGUMENTS.items():
        if getattr(args, flag) is not None:
            set_option(cfg, attr, getattr(args, flag))
    if getattr(args, 'compile', None) is not None:
        cfg.sac.compile = bool(args.compile)
    if getattr(args, 'cuda_graphs', False):
        cfg.sac.cuda_graphs = True
    if getattr(args, 'overlap', None) is not None:
        cfg.overlap = bool(args.overlap)
    if getattr(args, 'critic_layer_norm', None) is not None:
        cfg.sac.critic_layer_norm = bool(args.critic_layer_norm)
    if getattr(args, 'hidden', None):
        cfg.sac.actor_hidden = cfg.sac.critic_hidden = tuple(args.hidden)
    return cfg


def run(args) -> int:
    """Train SAC (data-parallel under torchrun) and print one JSON line with the result."""
    return distributed.run_ranked('sac', args, _train)


def _train(args, ranks) -> int:
    """Build this rank's environments and runner, train, print the summary on rank 0."""
    from loco_train.envs.vec_env import make_env  # imports gymnasium

    cfg = config_from_args(args)
    if args.resume and not cfg.log_dir:
        cfg.log_dir = os.path.dirname(os.path.abspath(args.resume))
    # One seed on every rank: networks, acting noise and replay draws are the whole population's.
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed + ranks.rank)
    try:
        extra = preset_env_options(cfg.env, env_overrides(args))
        _, count = ranks.shard(cfg.num_envs)
        extra |= ranks.population(cfg.env, cfg.num_envs)
        env = make_env(cfg.env, count, cfg.device, cfg.seed, **extra)
    except ValueError as error:  # unknown or missing environment, bad split: say so, exit 2
        print(f'loco-train sac: {error}', file=sys.stderr)
        return 2
    # Under torchrun each rank keeps the set-up's threads (OMP_NUM_THREADS, else 1), and its
    # learner thread the same unless --learner-threads says otherwise.
    apply = not ranks.enabled or args.threads is not None
    if ranks.enabled and getattr(args, 'learner_threads', None) is None:
        cfg.learner_threads = 0
    try:
        with distributed.torch_threads(cfg.threads, apply):
            try:
                runner = SACRunner(env, cfg, ranks)
                if args.resume:
                    runner.load(args.resume)
            except ValueError as error:  # a setting or a checkpoint this run cannot take
                print(f'loco-train sac: {error}', file=sys.stderr)
                return 2
            summary = runner.learn()
    finally:
        env.close()
    distributed.main_print(json.dumps({k: _json_safe(v) for k, v in summary.items()}), flush=True)
    return 0


def _json_safe(value):
    """Map non-finite floats to None so the JSON line stays valid."""
    return None if isinstance(value, float) and not math.isfinite(value) else value
