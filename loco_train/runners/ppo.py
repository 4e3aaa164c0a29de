"""`loco-train ppo`: rsl-rl-lib's PPO on the same environment, the baseline SHAC and SAC face.

Under `torchrun --nproc-per-node K` it trains through rsl-rl-lib's own multi-GPU path (gradient
all-reduce, normaliser all-reduce, rank-0 logging and checkpoints), on CPU with gloo as well:
rsl-rl-lib would insist on cuda:LOCAL_RANK and NCCL, so the process group is set up by
loco_train.runners.distributed and only the runner's rank bookkeeping is taken over here.
--num-envs is the total, N/K per rank.
"""

from dataclasses import asdict, dataclass
import json
import os
import sys
import time

import numpy as np
import torch

from loco_train.envs import add_observation_argument, env_overrides
from loco_train.envs.actuator_fit import add_actuator_argument
from loco_train.envs.commands import add_command_argument
from loco_train.envs.randomization import add_override_argument as add_randomize_argument
from loco_train.envs.rewards import add_override_argument
from loco_train.runners import distributed


@dataclass
class PpoRunConfig:
    """rsl-rl-lib PPO settings (legged_gym's ANYmal defaults) and the run around it."""

    env: str = 'anymal'
    """Environment name for loco_train.envs.vec_env.make_env."""
    num_envs: int = 64
    """Environments stepped together (the total over all data-parallel ranks)."""
    iterations: int = 500
    """PPO iterations (rollout + update)."""
    steps_per_env: int = 24
    """Rollout length per iteration."""
    max_episode_length: int = 1000
    """Control steps per episode before truncation (20 s at 50 Hz)."""
    hidden: tuple = (512, 256, 128)
    """Actor and critic MLP hidden sizes."""
    learning_rate: float = 1e-3
    """Adam learning rate (adaptive KL schedule)."""
    entropy_coef: float = 0.005
    """Entropy bonus."""
    init_std: float = 1.0
    """Initial action standard deviation."""
    seed: int = 0
    """Seed."""
    device: str = 'cpu'
    """Torch device."""
    log_dir: str = ''
    """Run directory; '' picks logs/ppo/<env>-<time>."""
    save_interval: int = 50
    """Iterations between rsl-rl checkpoints."""
    resume: str = ''
    """rsl-rl checkpoint (model_<iter>.pt) to continue from: `iterations` more are run."""


def train_cfg(cfg):
    """The rsl-rl-lib 5.x training configuration dict for cfg."""
    mlp = {'hidden_dims': list(cfg.hidden), 'activation': 'elu', 'obs_normalization': True}
    return {
        'num_steps_per_env': cfg.steps_per_env,
        'save_interval': cfg.save_interval,
        'obs_groups': {'actor': ['policy'], 'critic': ['policy']},
        'logger': 'tensorboard',
        'check_for_nan': True,
        'actor': {
            'class_name': 'MLPModel',
            **mlp,
            'distribution_cfg': {'class_name': 'GaussianDistribution', 'init_std': cfg.init_std},
        },
        'critic': {'class_name': 'MLPModel', **mlp},
        'algorithm': {
            'class_name': 'PPO',
            'num_learning_epochs': 5,
            'num_mini_batches': 4,
            'clip_param': 0.2,
            'gamma': 0.99,
            'lam': 0.95,
            'value_loss_coef': 1.0,
            'entropy_coef': cfg.entropy_coef,
            'learning_rate': cfg.learning_rate,
            'max_grad_norm': 1.0,
            'schedule': 'adaptive',
            'desired_kl': 0.01,
        },
    }


def _runner_class():
    """rsl-rl-lib's OnPolicyRunner, taking its ranks from an already joined process group."""
    from rsl_rl.runners import OnPolicyRunner

    class Runner(OnPolicyRunner):
        def _configure_multi_gpu(self):
            """Ranks from torchrun's variables; the group (gloo or NCCL) is joined already."""
            ranks = distributed.ranks_from_environment()
            self.gpu_world_size, self.is_distributed = ranks.world_size, ranks.enabled
            self.gpu_local_rank, self.gpu_global_rank = ranks.local_rank, ranks.rank
            self.cfg['multi_gpu'] = (
                {
                    'global_rank': ranks.rank,
                    'local_rank': ranks.local_rank,
                    'world_size': ranks.world_size,
                }
                if ranks.enabled
                else None
            )

    return Runner


def train(env, cfg, iterations=None, ranks=None):
    """Train PPO on a loco_train VecEnv (this rank's under torchrun); return (runner, summary)."""
    from loco_train.runners.rsl_rl_env import RslRlEnv

    ranks = ranks or distributed.Ranks()
    wrapped = RslRlEnv(env, cfg.max_episode_length, cfg.device)
    run_dir = distributed.broadcast_object(
        cfg.log_dir
        or os.path.join('logs', 'ppo', cfg.env.replace(':', '_') + time.strftime('-%Y%m%d-%H%M%S'))
    )
    if ranks.is_main:
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, 'run.json'), 'w') as handle:  # read by compare, export
            info = {'command_ranges': getattr(env, 'command_ranges', None)}
            info['provenance'] = getattr(env, 'provenance', {})  # e.g. the actuator file
            json.dump(asdict(cfg) | info, handle)
    runner = _runner_class()(wrapped, train_cfg(cfg), log_dir=run_dir, device=cfg.device)
    if cfg.resume:
        runner.load(cfg.resume, map_location=cfg.device)
        runner.current_learning_iteration += 1  # model_<it> holds the weights after update it
    first = runner.current_learning_iteration
    start = time.time()
    runner.learn(cfg.iterations if iterations is None else iterations)
    seconds = time.time() - start
    done = runner.current_learning_iteration + 1
    ran = done - first
    reward_buffer = list(getattr(runner.logger, 'rewbuffer', []))
    summary = {
        'algorithm': 'ppo',
        'env': cfg.env,
        'iterations': done,
        'env_steps': done * cfg.steps_per_env * env.num_envs * ranks.world_size,
        'final_return': float(np.mean(reward_buffer)) if reward_buffer else None,
        'seconds_per_iteration': seconds / max(1, ran),
        'log_dir': run_dir,
        'world_size': ranks.world_size,
    }
    return runner, summary


def add_arguments(parser):
    """Add `loco-train ppo` options from PpoRunConfig."""
    for name, default in asdict(PpoRunConfig()).items():
        if isinstance(default, tuple):
            continue
        parser.add_argument(
            '--' + name.replace('_', '-'),
            type=type(default),
            default=default,
            help=f'{PpoRunConfig.__dataclass_fields__[name].type} (default %(default)s)',
        )
    parser.add_argument(
        '--hidden',
        type=lambda text: tuple(int(v) for v in text.split(',')),
        default=PpoRunConfig.hidden,
        help='actor and critic hidden sizes, comma-separated (default 512,256,128)',
    )
    add_override_argument(parser)
    add_command_argument(parser)
    add_randomize_argument(parser)
    add_observation_argument(parser)
    add_actuator_argument(parser)


def run(args):
    """Train PPO (data-parallel under torchrun) and print one JSON line with the result."""
    return distributed.run_ranked('ppo', args, _train)


def _train(args, ranks):
    """Build this rank's environments, train, and print the summary on rank 0."""
    from loco_train.envs.vec_env import make_env

    cfg = PpoRunConfig(**{k: getattr(args, k) for k in asdict(PpoRunConfig()) if hasattr(args, k)})
    torch.manual_seed(cfg.seed + ranks.rank)  # rank 0's weights are broadcast at the start
    np.random.seed(cfg.seed + ranks.rank)
    try:
        _, count = ranks.shard(cfg.num_envs)
        extra = env_overrides(args)
        if extra.get('observation', 'velocity') != 'velocity':  # rsl-rl's checkpoints and
            # run.json carry no layout for the exporter
            raise ValueError('--observation gait_clock trains with loco-train shac or sac')
        extra |= ranks.population(cfg.env, cfg.num_envs)
        env = make_env(cfg.env, count, cfg.device, cfg.seed, **extra)
    except ValueError as error:  # unknown or missing environment, bad split: say so, exit 2
        print(f'loco-train ppo: {error}', file=sys.stderr)
        return 2
    try:
        _, summary = train(env, cfg, ranks=ranks)
    finally:
        env.close()
    distributed.main_print(json.dumps(summary), flush=True)
    return 0
