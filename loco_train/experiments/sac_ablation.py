"""SAC ablation (a script, not a test): train briefly with each of the four fixes turned off.

    python -m loco_train.experiments.sac_ablation --env gymnasium:Pendulum-v1 --total-steps 10000

prints one line per variant and, last, one JSON object with every variant's returns beside the
full method. Same seed, same budget for all. The four switches:

1. bounded actions off: the policy's box is 50x wider than the real action bounds (the env clips);
2. small initial sigma off: sigma0 = 1 and ordinary mean-head weights (std 0.1);
3. timeout-aware targets off: timeouts are stored as terminations (bootstrap 0);
4. n-step returns off: n = 1.
"""

import argparse
from dataclasses import replace
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch

from loco_train.runners.sac import PRESETS, RunnerConfig, SACRunner, set_option

VARIANTS = {
    'full': {},
    'no_bounded_actions': {'action_bound_scale': 50.0},
    'no_small_sigma0': {'sac.sigma0': 1.0, 'sac.mean_init_std': 0.1},
    'no_timeout_bootstrap': {'timeout_bootstrap': False},
    'no_n_step': {'sac.n_step': 1},
}
"""Variant name -> overrides of RunnerConfig ('sac.' prefix: its SACConfig)."""


def variant_config(base: RunnerConfig, overrides: dict) -> RunnerConfig:
    """Return a copy of base with the overrides applied."""
    sac = replace(base.sac, **{k[4:]: v for k, v in overrides.items() if k.startswith('sac.')})
    return replace(base, sac=sac, **{k: v for k, v in overrides.items() if '.' not in k})


def train(cfg: RunnerConfig) -> dict:
    """Train one variant from the same seed; return its summary."""
    from loco_train.envs.vec_env import make_env

    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    env = make_env(cfg.env, cfg.num_envs, cfg.device, cfg.seed)
    try:
        start = time.time()
        summary = SACRunner(env, cfg).learn()
        summary['wall_s'] = round(time.time() - start, 1)
        return summary
    finally:
        env.close()


def main(argv=None) -> int:
    """Run every variant (or those named) and print the comparison as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--env', default='gymnasium:Pendulum-v1')
    parser.add_argument('--total-steps', type=int, default=10_000)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--num-envs', type=int, default=0, help='0: the default or --env preset')
    parser.add_argument('--variants', nargs='*', default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument('--log-dir', default='', help='default: a temporary directory')
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    log_root = args.log_dir or tempfile.mkdtemp(prefix='sac_ablation_')
    base = RunnerConfig(
        env=args.env, total_steps=args.total_steps, seed=args.seed, progress=False,
        checkpoint_interval=0,
    )  # fmt: skip
    for attr, value in PRESETS.get(args.env, {}).items():  # e.g. the ANYmal preset
        set_option(base, attr, value)
    if args.num_envs:
        base.num_envs = args.num_envs
    results = {}
    for name in args.variants:
        cfg = variant_config(base, VARIANTS[name])
        cfg.log_dir = os.path.join(log_root, name)
        summary = train(cfg)
        results[name] = {
            k: summary[k] for k in ('final_return', 'eval_return', 'updates', 'wall_s')
        }
        print(name, json.dumps(results[name]), file=sys.stderr, flush=True)
    print(json.dumps({'ablation': 'sac', 'env': args.env, 'env_steps': args.total_steps,
                      'seed': args.seed, 'results': results}), flush=True)  # fmt: skip
    return 0


if __name__ == '__main__':
    sys.exit(main())
