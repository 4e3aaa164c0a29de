"""The paper's horizon sweep (Schwarke et al., Fig. 5): SHAC's final return per window length.

`python -m loco_train.experiments.horizon_sweep --horizons 8,16,32,64 --iterations 200
--num-envs 128 --out runs/horizons`
trains one SHAC run per horizon h (control steps per window, the length the actor's gradient
flows back through the simulator) for the same number of iterations, seed and reward on the
forward task (vx = 1 m/s, no standing share), and records each run's mean episode return at the
end and its actor gradient norm before clipping (median over the last quarter of the
iterations; longer windows give larger, noisier gradients through the contacts). A longer window
also draws h/8 times the samples of the shortest per iteration. Prints one JSON line per run and
one for the sweep; writes a PNG (return and gradient norm against h, return curves).
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

FORWARD = ('vx=1', 'vy=0', 'wz=0', 'zero_share=0')
"""The forward task's command overrides (loco_train.envs.commands)."""

FORWARD_REWARD = ('orientation=-5', 'torque=-2.5e-5', 'lin_vel_error=-1', 'alive=2')
"""The forward task's reward overrides, as in the SHAC-against-PPO comparison (docs/training)."""


def run_horizon(horizon, args):
    """Train one SHAC run of window length horizon; its figures and curves."""
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    cfg = ShacRunConfig(
        num_envs=args.num_envs,
        iterations=args.iterations,
        seed=args.seed,
        log_dir=os.path.join(args.out, f'h{horizon}'),
        checkpoint_interval=0,
        progress=False,
        shac=SHACConfig(horizon=horizon, actor_lr=args.actor_lr),
    )
    env = make_env(
        'anymal', args.num_envs, 'cpu', args.seed, differentiable=True,
        reward_overrides=list(args.reward or FORWARD_REWARD), command_overrides=list(FORWARD),
    )  # fmt: skip
    runner = ShacRunner(env, cfg)
    grad_norms, returns = [], []  # per iteration: actor gradient norm, running mean return
    window = runner.shac.train_window

    def recorded(*a, **k):
        out = window(*a, **k)
        grad_norms.append(float(out[1].get('actor_grad_norm', float('nan'))))
        returns.append(runner.mean_return())  # the episodes up to the previous window
        return out

    runner.shac.train_window = recorded
    start = time.time()
    summary = runner.learn()
    env.close()
    tail = grad_norms[-max(1, len(grad_norms) // 4) :]
    return {
        'horizon': horizon,
        'final_return': summary['final_return'],
        'mean_episode_length': summary['mean_episode_length'],
        'actor_grad_norm_median_last_quarter': float(np.nanmedian(tail)),
        'env_steps': summary['env_steps'],
        'train_seconds': round(time.time() - start, 1),
        'returns': [None if np.isnan(r) else round(r, 3) for r in returns],
        'actor_grad_norms': [round(g, 4) for g in grad_norms],
    }


def plot(results, path):
    """Three panels: final return and gradient norm against horizon, return curves (PNG)."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    horizons = [r['horizon'] for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    axes[0].plot(horizons, [r['final_return'] or 0.0 for r in results], 'o-')
    axes[0].set_ylabel('mean episode return at the end')
    axes[1].plot(horizons, [r['actor_grad_norm_median_last_quarter'] for r in results], 'o-')
    axes[1].set_ylabel('actor gradient norm before clipping')
    axes[1].set_yscale('log')
    for axis in axes[:2]:
        axis.set_xscale('log', base=2)
        axis.set_xticks(horizons, [str(h) for h in horizons])
        axis.set_xlabel('horizon (control steps per window)')
        axis.grid(alpha=0.3)
    for r in results:
        curve = [np.nan if v is None else v for v in r['returns']]
        axes[2].plot(np.arange(1, len(curve) + 1), curve, label=f'h = {r["horizon"]}')
    axes[2].set_xlabel('iteration')
    axes[2].set_ylabel('mean episode return')
    axes[2].legend()
    axes[2].grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def merge(dirs, out):
    """Merge the results.json of several sweeps (by horizon) into out; plot; print JSON."""
    results = {}
    for path in dirs:
        with open(os.path.join(path, 'results.json')) as handle:
            for result in json.load(handle):
                if result['horizon'] in results:
                    raise SystemExit(f'horizon_sweep: horizon {result["horizon"]} twice in {dirs}')
                results[result['horizon']] = result
    merged = [results[h] for h in sorted(results)]
    with open(os.path.join(out, 'results.json'), 'w') as handle:
        json.dump(merged, handle)
    png = os.path.join(out, 'horizon_sweep.png')
    plot(merged, png)
    for result in merged:
        print(
            json.dumps(
                {k: v for k, v in result.items() if k not in ('returns', 'actor_grad_norms')}
            )
        )
    print(json.dumps({'horizons': sorted(results), 'plot': png}))
    return 0


def main(argv=None):
    """Train one run per horizon, print JSON, plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--horizons', default='8,16,32,64')
    parser.add_argument('--iterations', type=int, default=200)
    parser.add_argument('--num-envs', type=int, default=128)
    parser.add_argument('--actor-lr', type=float, default=5e-4)
    parser.add_argument('--seed', type=int, default=0)
    add_override_argument(parser)
    parser.add_argument('--out', default=os.path.join('runs', 'horizon_sweep'))
    parser.add_argument(
        '--merge', default='',
        help='DIR,DIR: merge the results.json of sweeps run in parallel into --out, no training',
    )  # fmt: skip
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    if args.merge:
        return merge(args.merge.split(','), args.out)
    results = []
    for horizon in (int(h) for h in args.horizons.split(',')):
        result = run_horizon(horizon, args)
        results.append(result)
        brief = {k: v for k, v in result.items() if k not in ('returns', 'actor_grad_norms')}
        print(json.dumps(brief), flush=True)
        with open(os.path.join(args.out, 'results.json'), 'w') as handle:
            json.dump(results, handle)  # after every run: a stopped sweep keeps what it has
    png = os.path.join(args.out, 'horizon_sweep.png')
    plot(results, png)
    print(json.dumps({'iterations': args.iterations, 'num_envs': args.num_envs, 'plot': png}))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
