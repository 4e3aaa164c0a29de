"""`loco-train shac`: the SHAC training loop, progress bar, TensorBoard, checkpoints, resume.

The runner owns every side effect; loco_train.shac only computes. Checkpoints hold the whole
algorithm state plus the exporter's policy entry, written atomically every K iterations and at
the end, so `loco-train export RUN/checkpoint.pt -o policy.onnx` works on any of them.

Under `torchrun --nproc-per-node K` the same command trains data-parallel
(loco_train.runners.distributed): --num-envs is the total, N/K per rank; rank 0 alone shows the
progress bar, writes TensorBoard, checkpoints and the JSON line; --resume loads on every rank.
"""

import argparse
from collections import deque
from dataclasses import asdict, dataclass, field
import json
import math
import os
import sys
import time

import numpy as np
import torch
from tqdm import tqdm

from loco_train.envs import add_observation_argument, env_overrides
from loco_train.envs.actuator_fit import add_actuator_argument
from loco_train.envs.anymal import PRIVILEGED
from loco_train.envs.commands import add_command_argument
from loco_train.envs.randomization import add_override_argument as add_randomize_argument
from loco_train.envs.rewards import add_override_argument
from loco_train.policy.atomic_io import atomic_torch_save, torch_load
from loco_train.policy.export import policy_payload
from loco_train.runners import distributed
from loco_train.sac.actor import bounds_from_box
from loco_train.shac import SHAC, SHACConfig

START_COUNT = 1e6
"""Samples the normaliser of a run started from a policy file counts as already seen."""


@dataclass
class ShacRunConfig:
    """What the SHAC training loop does around the windows."""

    env: str = 'anymal'
    """Environment name for loco_train.envs.vec_env.make_env; SHAC needs a differentiable one."""
    num_envs: int = 64
    """N, environments rolled out together (the total over all data-parallel ranks)."""
    iterations: int = 500
    """Windows (actor updates) in total."""
    seed: int = 0
    """Seed of torch, numpy and the environment."""
    device: str = 'cpu'
    """Torch device."""
    log_dir: str = ''
    """Run directory for TensorBoard and checkpoints; '' picks logs/shac/<env>-<time>."""
    checkpoint_interval: int = 50
    """Iterations between checkpoints (0: only the final one)."""
    return_window: int = 100
    """Completed episodes averaged into the reported return and length."""
    progress: bool = True
    """Show a tqdm progress bar on stderr."""
    init_policy: str = ''
    """Exported policy file (ONNX) whose actor and normaliser the run starts from ('' fresh)."""
    threads: int = 1
    """Torch CPU threads of a one-process run (0: torch's default, one per core). SHAC's networks
    are small and Warp's CPU kernels run on one thread: a second thread gains nothing alone and
    slows the run 2x and more beside other busy processes (`loco-train bench contention`)."""
    shac: SHACConfig = field(default_factory=SHACConfig)
    """The algorithm's hyperparameters."""


class ShacRunner:
    """Run SHAC windows on a differentiable VecEnv; log, checkpoint and resume."""

    def __init__(self, env, config, ranks=None):
        """Build SHAC for the env's observation size and action box (ranks: data parallel)."""
        self.env, self.cfg = env, config
        self.ranks = ranks or distributed.Ranks()
        b, c = bounds_from_box(env.action_low, env.action_high)
        parallel = self.ranks.enabled
        self.shac = SHAC(
            env.obs_dim,
            b,
            c,
            config.shac,
            config.device,
            seed=config.seed,
            sync=distributed if parallel else None,
            env_offset=getattr(env, 'offset', 0) if parallel else 0,
            population=config.num_envs if parallel else None,
            privileged_dim=getattr(env, 'privileged_dim', 0),
        )
        self.init_sha256 = ''
        if config.init_policy:  # every rank reads it (one node's copy may differ or be missing)
            error = ''
            try:
                self._start_from(config.init_policy)
            except Exception as refused:  # any failure must reach every rank
                error = str(refused) or repr(refused)
            if not distributed.all_true(not error):  # a refusal anywhere stops every rank
                raise ValueError(error or f'--init-policy {config.init_policy}: refused on a rank')
        distributed.broadcast_modules_(  # rank 0's initial weights everywhere
            self.shac.actor, self.shac.critic, self.shac.target_critic, self.shac.normalizer
        )
        self.run_dir = distributed.broadcast_object(
            config.log_dir
            or os.path.join(
                'logs', 'shac', config.env.replace(':', '_') + time.strftime('-%Y%m%d-%H%M%S')
            )
        )
        self.returns = deque(maxlen=config.return_window)
        self.lengths = deque(maxlen=config.return_window)
        self.env_steps = 0
        self.skipped = 0
        self.writer = None
        self.iteration_seconds = []  # wall time of each iteration of this invocation (s)
        self.iteration_cpu_seconds = []  # this process's CPU time of each iteration (s)

    def _start_from(self, path):
        """Load an exported policy's actor mean and normaliser (ValueError when they differ).

        A 48-term (velocity) policy may start a run with a wider layout (the gait clock).
        The normaliser's count is set to START_COUNT, so the new run's observations move its
        statistics slowly instead of replacing them with the first window's.
        """
        from loco_policy import spec
        from loco_policy.policy_file import file_sha256
        from loco_train.policy.onnx_import import actor_from_onnx, PolicyImportError

        if not self.shac.cfg.normalize_obs:
            raise ValueError(f'--init-policy {path}: needs the observation normaliser on')
        try:
            actor, normalizer = actor_from_onnx(path, sigma0=self.shac.cfg.sigma0)
        except PolicyImportError as error:
            raise ValueError(f'--init-policy {path}: {error}') from None
        own = self.shac.actor_kwargs
        hidden = tuple(m.out_features for m in actor.trunk if isinstance(m, torch.nn.Linear))
        found = {
            'hidden': hidden,
            'activation': type(actor.trunk[1]).__name__.lower(),
            'layer_norm': any(isinstance(m, torch.nn.LayerNorm) for m in actor.trunk),
        }
        wanted = {
            'hidden': tuple(own['hidden']),
            'activation': own['activation'],
            'layer_norm': bool(own.get('layer_norm', False)),
        }
        differences = [f'{k} {v} here {wanted[k]}' for k, v in found.items() if v != wanted[k]]
        for key, value in (('action_bias', actor.b), ('action_scale', actor.c)):
            if not np.allclose(value.tolist(), own[key], atol=1e-6):
                differences.append(f'{key} {value.tolist()} here {own[key]}')
        theirs, ours = actor.trunk[0].in_features, self.shac.actor.trunk[0].in_features
        if theirs != ours and not (theirs == spec.OBS_DIM and ours > theirs):
            differences.append(f'observation width {theirs} here {ours}')
        if differences:
            raise ValueError(f"--init-policy {path}: the file's actor differs: {differences}")
        state = actor.state_dict()
        mean, var = normalizer.mean, normalizer.var
        if ours > theirs:  # a velocity-task policy starting a gait-clock run: the clock's
            # inputs get zero weights, so the start acts exactly as the file; sin and cos of a
            # uniform phase have mean 0 and variance 1/2
            first = state['trunk.0.weight']  # (hidden, theirs)
            state['trunk.0.weight'] = torch.cat(
                [first, first.new_zeros(len(first), ours - theirs)], 1
            )
            mean = torch.cat([mean, mean.new_zeros(ours - theirs)])
            var = torch.cat([var, var.new_full((ours - theirs,), 0.5)])
        self.shac.actor.load_state_dict(state)
        with torch.no_grad():
            self.shac.normalizer.mean.copy_(mean)
            self.shac.normalizer.var.copy_(var)
            self.shac.normalizer.count.fill_(START_COUNT)
        self.init_sha256 = file_sha256(path)

    @property
    def checkpoint_path(self):
        """Where save() writes."""
        return os.path.join(self.run_dir, 'checkpoint.pt')

    def mean_return(self):
        """Average return of the last completed episodes (nan before the first)."""
        return float(np.mean(self.returns)) if self.returns else float('nan')

    def save(self):
        """Write algorithm state, runner counters and the exportable policy atomically (rank 0)."""
        if not self.ranks.is_main:
            return self.checkpoint_path
        state = {
            'shac': self.shac.state_dict(),
            'runner': asdict(self.cfg),
            'init_policy_sha256': self.init_sha256,
            'env_steps': self.env_steps,
            'skipped': self.skipped,
            'returns': list(self.returns),
            'lengths': list(self.lengths),
            'policy': policy_payload(
                self.shac.actor,
                self.shac.actor_kwargs,
                self.shac.normalizer,
                'shac',
                self.shac.iterations,
                0.0 if math.isnan(self.mean_return()) else self.mean_return(),
                getattr(self.env, 'command_ranges', None),
                self.provenance(),
                getattr(self.env, 'layout_name', 'velocity'),
            ),
        }
        atomic_torch_save(state, self.checkpoint_path)
        return self.checkpoint_path

    def provenance(self):
        """Provenance keys of the exported policy: the env's, and the policy started from."""
        keys = dict(getattr(self.env, 'provenance', None) or {})
        if self.init_sha256:
            keys['init_policy_sha256'] = self.init_sha256
        return keys

    def load(self, path):
        """Resume from a checkpoint written by save()."""
        state = torch_load(path, map_location=self.cfg.device)
        self.shac.load_state_dict(state['shac'])
        self.init_sha256 = state.get('init_policy_sha256', '')
        self.env_steps, self.skipped = int(state['env_steps']), int(state['skipped'])
        self.returns.extend(state['returns'])
        self.lengths.extend(state['lengths'])

    def learn(self):
        """Train until cfg.iterations windows; return the summary."""
        from torch.utils.tensorboard import SummaryWriter  # slow import, only when training

        cfg, env, main = self.cfg, self.env, self.ranks.is_main
        self.writer = SummaryWriter(self.run_dir) if main else None
        obs = env.reset(seed=cfg.seed + self.shac.iterations)
        running = torch.zeros(env.num_envs)
        length = torch.zeros(env.num_envs)
        bar = tqdm(
            total=cfg.iterations,
            initial=self.shac.iterations,
            unit='it',
            disable=not (cfg.progress and main),
        )
        while self.shac.iterations < cfg.iterations:
            start, cpu_start = time.time(), time.process_time()
            self.shac.set_progress(self.shac.iterations / max(1, cfg.iterations))
            obs, metrics, batch = self.shac.train_window(env, obs)
            returns, lengths = [], []
            rewards = batch['reward'].cpu()  # (T, N): one copy from the device per window
            ended = (batch['terminated'] | batch['truncated']).cpu()
            for t in range(rewards.shape[0]):
                running += rewards[t]
                length += 1
                done = ended[t]
                if bool(done.any()):
                    returns.extend(running[done].tolist())
                    lengths.extend(length[done].tolist())
                    running[done], length[done] = 0.0, 0.0
            if self.ranks.enabled:  # every rank's episodes, metrics averaged over ranks
                pairs = distributed.gather_lists(list(zip(returns, lengths)))
                returns, lengths = [r for r, _ in pairs], [n for _, n in pairs]
                metrics = distributed.mean_metrics(metrics)
            self.returns.extend(returns)
            self.lengths.extend(lengths)
            self.env_steps += batch['reward'].numel() * self.ranks.world_size
            self.skipped += int(metrics['skipped_window'])
            if metrics['skipped_window'] and main:
                tqdm.write(
                    f'iteration {self.shac.iterations}: non-finite actor loss or gradient,'
                    ' window skipped (weights unchanged)'
                )
            seconds = time.time() - start
            self.iteration_seconds.append(seconds)
            self.iteration_cpu_seconds.append(time.process_time() - cpu_start)
            if main:
                self._log(metrics, seconds)
            bar.set_postfix(
                ret=f'{self.mean_return():.2f}',
                len=f'{np.mean(self.lengths) if self.lengths else 0:.0f}',
                s_it=f'{seconds:.2f}',
            )
            bar.update(1)
            if cfg.checkpoint_interval and self.shac.iterations % cfg.checkpoint_interval == 0:
                self.save()
        bar.close()
        self.save()
        if self.writer is not None:
            self.writer.close()
        return self.summary()

    def _log(self, metrics, seconds):
        """Write one iteration's scalars to TensorBoard."""
        step = self.shac.iterations
        for key, value in metrics.items():
            group = key if '/' in key else f'shac/{key}'
            self.writer.add_scalar(group, value, step)
        if self.returns:
            self.writer.add_scalar('train/episode_return', self.mean_return(), step)
            self.writer.add_scalar('train/episode_length', np.mean(self.lengths), step)
        self.writer.add_scalar('perf/iteration_s', seconds, step)
        self.writer.add_scalar('perf/env_steps', self.env_steps, step)

    def summary(self):
        """The run's result as a JSON-ready dict."""
        return {
            'algorithm': 'shac',
            'env': self.cfg.env,
            'iterations': self.shac.iterations,
            'env_steps': self.env_steps,
            'final_return': None if math.isnan(self.mean_return()) else self.mean_return(),
            'mean_episode_length': float(np.mean(self.lengths)) if self.lengths else None,
            'skipped_windows': self.skipped,
            'checkpoint': self.checkpoint_path,
            'world_size': self.ranks.world_size,
            'num_envs': self.cfg.num_envs,
            # median wall time of this invocation's iterations after its first (Warp's first
            # launches and allocator warm-up), None with fewer than two; rank 0's
            'iteration_s': distributed.median_after_first(self.iteration_seconds),
            'iteration_cpu_s': distributed.median_after_first(self.iteration_cpu_seconds),
        }


OPTIONS = {
    # flag: (config attribute path, help)
    'env': ('env', 'differentiable environment (default %(default)s)'),
    'num_envs': (
        'num_envs',
        'environments rolled out together; under torchrun the total, split evenly over the ranks'
        ' (default %(default)s)',
    ),
    'iterations': ('iterations', 'SHAC windows in total (default %(default)s)'),
    'seed': ('seed', 'seed (default %(default)s)'),
    'device': ('device', 'torch device (default %(default)s)'),
    'log_dir': ('log_dir', 'run directory (default logs/shac/<env>-<time>)'),
    'checkpoint_interval': ('checkpoint_interval', 'iterations between checkpoints'),
    'horizon': ('shac.horizon', 'control steps per window (default %(default)s)'),
    'gamma': ('shac.gamma', 'discount (default %(default)s)'),
    'lam': ('shac.lam', 'TD(lambda) lambda (default %(default)s)'),
    'actor_lr': ('shac.actor_lr', 'actor learning rate (default %(default)s)'),
    'critic_lr': ('shac.critic_lr', 'critic learning rate (default %(default)s)'),
    'grad_norm': ('shac.grad_norm', 'gradient-norm clip (default %(default)s)'),
    'betas': ('shac.betas', "Adam's beta1,beta2 of both optimisers (default %(default)s)"),
    'sigma0': ('shac.sigma0', 'initial exploration std (default %(default)s)'),
    'normalizer_update': (
        'shac.normalizer_update',
        "when the observation normaliser merges new data: 'step' (each control step) or 'window' "
        '(after each window, acting on its start statistics; one all-reduce per window under '
        'torchrun) (default %(default)s)',
    ),
    'actor_warmup': (
        'shac.actor_warmup',
        'first iterations without an actor step, the critic learning first (default %(default)s)',
    ),
    'terminal_gradient': (
        'shac.terminal_gradient',
        "weight of the target critic's slope at an early termination, added to the actor loss"
        ' with value 0 (a fall still bootstraps 0); 0 off (default %(default)s)',
    ),
    'critic_privileged': (
        'shac.critic_privileged',
        "the critic also sees the env's privileged state (ANYmal: --privileged), which the"
        ' policy does not observe',
    ),
    'max_action_change': (
        'shac.max_action_change',
        "scale back an actor step whose mean change of the deterministic action's tanh on the"
        " window's observations exceeds this; 0 off (default %(default)s)",
    ),
    'layer_norm': (
        'shac.layer_norm',
        'a LayerNorm after every hidden activation of the actor and the critic (Xu et al.)',
    ),
    'spike_factor': (
        'shac.spike_factor',
        'hold back a window whose actor gradient norm exceeds this many times the median of the'
        ' last applied windows; 0 off (default %(default)s)',
    ),
    'rollback_drop': (
        'shac.rollback_drop',
        'go back to the state of the best mean reward per step over --rollback-windows windows'
        ' when that mean falls by this fraction of it; 0 off (default %(default)s)',
    ),
    'rollback_windows': (
        'shac.rollback_windows',
        'windows the rollback rule averages the reward over (default %(default)s)',
    ),
    'threads': (
        'threads',
        "torch CPU threads of a one-process run, 0 = torch's default; under torchrun"
        ' OMP_NUM_THREADS, else 1 (default %(default)s)',
    ),
    'init_policy': (
        'init_policy',
        'start the actor and normaliser from this exported policy file (ONNX; its network must '
        'match --actor-hidden), e.g. to adapt a deployed policy to fitted drives',
    ),
}


def _owner(cfg, path):
    """Return (object, attribute) for a dotted config path."""
    if path.startswith('shac.'):
        return cfg.shac, path[5:]
    return cfg, path


def _floats(text):
    """'0.9,0.999' -> (0.9, 0.999)."""
    try:
        return tuple(float(v) for v in text.split(','))
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r}: comma-separated numbers') from None


def add_arguments(parser):
    """Add `loco-train shac` options; defaults come from the dataclasses."""
    defaults = ShacRunConfig()
    for flag, (path, text) in OPTIONS.items():
        owner, name = _owner(defaults, path)
        default = getattr(owner, name)
        if isinstance(default, bool):
            parser.add_argument('--' + flag.replace('_', '-'), action='store_true', help=text)
            continue
        if isinstance(default, tuple):
            parser.add_argument(
                '--' + flag.replace('_', '-'),
                type=_floats,
                default=default,
                help=text.replace('%(default)s', ','.join(str(v) for v in default)),
            )
            continue
        parser.add_argument(
            '--' + flag.replace('_', '-'), type=type(default), default=default, help=text
        )
    parser.add_argument(
        '--contact',
        default='smooth',
        choices=('smooth', 'hard', 'soft'),
        help='simulator contact model (default %(default)s)',
    )
    parser.add_argument(
        '--soft-stiffness',
        type=float,
        default=2.0e4,
        help='normal stiffness (N/m) of --contact soft (default %(default)s; about 8e3 sinks the'
        " feet as deep as MuJoCo's description)",
    )
    parser.add_argument(
        '--adjoint-clip',
        type=float,
        default=10.0,
        help="clip each step's state-adjoint rows to this many times their median norm; 0 off"
        ' (default %(default)s)',
    )
    parser.add_argument(
        '--privileged',
        default=None,
        choices=sorted(PRIVILEGED),
        help="what --critic-privileged's critic sees of the anymal env: height (the base height)"
        ' or dynamics (also the drawn gain scale, payload, friction and delay) (default height)',
    )
    add_override_argument(parser)
    add_command_argument(parser)
    add_randomize_argument(parser)
    add_observation_argument(parser)
    add_actuator_argument(parser)
    parser.add_argument('--resume', default='', help='checkpoint.pt to continue from')
    parser.add_argument('--no-progress', action='store_true', help='hide the progress bar')


def config_from_args(args):
    """Build ShacRunConfig from parsed arguments."""
    cfg = ShacRunConfig(progress=not args.no_progress)
    for flag, (path, _) in OPTIONS.items():
        owner, name = _owner(cfg, path)
        setattr(owner, name, getattr(args, flag))
    return cfg


def run(args):
    """Train SHAC (data-parallel under torchrun) and print one JSON line with the result."""
    return distributed.run_ranked('shac', args, _train)


def _train(args, ranks):
    """Build this rank's environments and runner, train, and print the summary on rank 0."""
    cfg = config_from_args(args)
    if args.resume and cfg.init_policy:
        print('loco-train shac: --resume continues a run; --init-policy starts one, not both',
              file=sys.stderr)  # fmt: skip
        return 2
    if args.privileged and not cfg.shac.critic_privileged:
        print('loco-train shac: --privileged chooses what --critic-privileged shows the critic;'
              ' give both', file=sys.stderr)  # fmt: skip
        return 2
    if args.resume and not cfg.log_dir:
        cfg.log_dir = os.path.dirname(os.path.abspath(args.resume))
    # torchrun's ranks keep distributed.setup's choice
    with distributed.torch_threads(cfg.threads, apply=not ranks.enabled):
        return _train_with(args, cfg, ranks)


def _train_with(args, cfg, ranks):
    """_train on this process's torch threads."""
    from loco_train.envs.vec_env import make_env

    try:
        _, count = ranks.shard(cfg.num_envs)
        population = ranks.population(cfg.env, cfg.num_envs)
        torch.manual_seed(cfg.seed)  # the networks start alike on every rank
        np.random.seed(cfg.seed + ranks.rank)
        env = make_env(
            cfg.env,
            count,
            cfg.device,
            cfg.seed,  # one population seed; each rank keeps its rows of it
            differentiable=True,
            contact=args.contact,
            adjoint_clip=args.adjoint_clip,
            soft_stiffness=args.soft_stiffness,
            **population,
            **env_overrides(args),
        )
    except ValueError as error:  # unknown or missing environment, bad split: say so, exit 2
        print(f'loco-train shac: {error}', file=sys.stderr)
        return 2
    if not hasattr(env, 'detach'):
        print(f'loco-train shac: {cfg.env} is not differentiable (no detach())', file=sys.stderr)
        return 2
    try:
        try:
            runner = ShacRunner(env, cfg, ranks)
        except ValueError as error:  # an --init-policy that does not fit
            print(f'loco-train shac: {error}', file=sys.stderr)
            return 2
        torch.manual_seed(cfg.seed + ranks.rank)  # anything else random differs per rank
        if args.resume:
            runner.load(args.resume)
        summary = runner.learn()
    finally:
        env.close()
    distributed.main_print(json.dumps(summary), flush=True)
    return 0
