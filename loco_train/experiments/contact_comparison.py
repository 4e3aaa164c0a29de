"""The paper's contact-model comparison in small: SHAC per contact model, evaluated under hard.

`python -m loco_train.experiments.contact_comparison --iterations 100 --num-envs 64
--out runs/contacts`
trains one SHAC run per model (smooth, hard, soft) with the same seed, reward and settings, then
rolls each deterministic policy out for one 20 s episode in N environments of the plain (not
differentiable) environment under `hard` contact and reports the mean return and episode length
there beside the training return. Schwarke et al. find smoothed-contact training best after
transfer and soft-contact policies failing to transfer. Prints one JSON line; writes a PNG.
"""

import argparse
import json
import os
import time

import numpy as np
import torch

from loco_train.envs.rewards import add_override_argument
from loco_train.envs.vec_env import make_env
from loco_train.runners.shac import ShacRunConfig, ShacRunner
from loco_train.shac import SHACConfig

MODELS = ('smooth', 'hard', 'soft')
"""Contact models trained with, in the paper's order."""


@torch.no_grad()
def hard_contact_return(shac, num_envs, seed, reward_overrides):
    """Mean return and episode length (steps) of the deterministic policy, one 20 s episode."""
    env = make_env(
        'anymal', num_envs, 'cpu', seed, contact='hard', reward_overrides=reward_overrides
    )
    obs = env.reset(seed=seed)
    total = torch.zeros(num_envs)
    alive = torch.ones(num_envs, dtype=torch.bool)
    length = torch.zeros(num_envs)
    for _ in range(env.max_episode_length):
        action = shac.actor(shac.normalize(obs))
        obs, reward, terminated, truncated, _ = env.step(action)
        total += torch.where(alive, reward, torch.zeros_like(reward))
        length += alive.float()
        alive &= ~(terminated | truncated)
        if not bool(alive.any()):
            break
    env.close()
    return float(total.mean()), float(length.mean())


def plot(results, path):
    """Bar chart of training return and hard-contact return per contact model (PNG)."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    names = list(results)
    x = np.arange(len(names))
    fig, axis = plt.subplots(figsize=(7, 4))
    axis.bar(x - 0.2, [results[n]['train_return'] or 0.0 for n in names], 0.4, label='training')
    axis.bar(x + 0.2, [results[n]['hard_return'] for n in names], 0.4, label='under hard')
    axis.set_xticks(x, [f'{n} contact' for n in names])
    axis.set_ylabel('mean episode return')
    axis.axhline(0.0, color='k', lw=0.6)
    axis.legend()
    axis.grid(alpha=0.3, axis='y')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    """Train each contact model, evaluate under hard contact, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iterations', type=int, default=100)
    parser.add_argument('--num-envs', type=int, default=64)
    parser.add_argument('--horizon', type=int, default=32)
    parser.add_argument('--actor-lr', type=float, default=5e-4)
    parser.add_argument('--seed', type=int, default=0)
    add_override_argument(parser)
    parser.add_argument('--models', default=','.join(MODELS))
    parser.add_argument('--out', default=os.path.join('runs', 'contact_comparison'))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = {}
    for model in args.models.split(','):
        torch.manual_seed(args.seed)
        np.random.seed(args.seed)
        cfg = ShacRunConfig(
            num_envs=args.num_envs,
            iterations=args.iterations,
            seed=args.seed,
            log_dir=os.path.join(args.out, model),
            checkpoint_interval=0,
            shac=SHACConfig(horizon=args.horizon, actor_lr=args.actor_lr),
        )
        env = make_env(
            'anymal', args.num_envs, 'cpu', args.seed, differentiable=True, contact=model,
            reward_overrides=args.reward,
        )  # fmt: skip
        start = time.time()
        runner = ShacRunner(env, cfg)
        summary = runner.learn()
        env.close()
        hard_return, hard_length = hard_contact_return(
            runner.shac, args.num_envs, args.seed + 1000, args.reward
        )
        results[model] = {
            'train_return': summary['final_return'],
            'hard_return': hard_return,
            'hard_episode_length': hard_length,
            'train_seconds': time.time() - start,
        }
        print(f'{model}: {json.dumps(results[model])}', flush=True)
    os.makedirs(args.out, exist_ok=True)
    png = os.path.join(args.out, 'contact_comparison.png')
    plot(results, png)
    print(json.dumps({'iterations': args.iterations, 'results': results, 'plot': png}))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
