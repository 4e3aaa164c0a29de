"""`loco-train compare --shac RUN --ppo RUN [--sac RUN ...]`: sample efficiency against PPO.

Reads the TensorBoard scalars both trainers write: SHAC's `train/episode_return` against
`perf/env_steps`, PPO's `Train/mean_reward` (rsl-rl-lib's mean episode return) against iteration
times the environment steps per iteration (from the run's `run.json`). Both are returns of the
same reward when the runs used the same reward weights. Reports the environment steps each took to
reach a fraction (default 90 %) of PPO's final return, their ratio, and the wall-clock per
iteration of each; a SAC run (its return logged against env steps) is placed beside them the same
way (several SAC runs: `--sac LABEL=DIR` repeated). Writes a PNG of return against environment
steps, beside it the per-step linear-velocity tracking term where the runs logged it. Last
line: one JSON object.
"""

import glob
import json
import os
import sys

import numpy as np

FINAL_WINDOW = 10
"""PPO's final return is the mean of its last this many logged values."""


def read_scalars(run_dir, tag):
    """(steps (K,), values (K,)) of one scalar tag over every event file of run_dir."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points = {}
    for path in sorted(glob.glob(os.path.join(run_dir, 'events.out.tfevents.*'))):
        events = EventAccumulator(path, size_guidance={'scalars': 0})
        events.Reload()
        if tag in events.Tags()['scalars']:
            points.update({e.step: e.value for e in events.Scalars(tag)})  # resumed runs overlap
    if not points:
        raise ValueError(f'{run_dir}: no {tag!r} scalars (not a run directory of this trainer?)')
    steps = np.array(sorted(points))
    return steps, np.array([points[s] for s in steps])


def shac_curve(run_dir):
    """SHAC run: env steps (K,), episode returns (K,), seconds per iteration (mean)."""
    iterations, returns = read_scalars(run_dir, 'train/episode_return')
    step_its, env_steps = read_scalars(run_dir, 'perf/env_steps')
    _, seconds = read_scalars(run_dir, 'perf/iteration_s')
    return np.interp(iterations, step_its, env_steps), returns, float(np.mean(seconds))


def sac_curve(run_dir):
    """SAC run (logged against env steps): env steps (K,), returns (K,), s per 1,000 steps."""
    steps, returns = read_scalars(run_dir, 'train/episode_return')
    rate_steps, rates = read_scalars(run_dir, 'perf/env_steps_per_s')
    return steps.astype(float), returns, float(1000.0 / np.mean(rates))


def ppo_steps_per_iteration(run_dir, given=None):
    """Environment steps per PPO iteration: given, else num_envs x steps_per_env of run.json."""
    if given is not None:
        return given
    path = os.path.join(run_dir, 'run.json')
    if not os.path.isfile(path):
        raise ValueError(f'{path} is missing: give --ppo-steps-per-iteration')
    with open(path) as handle:
        config = json.load(handle)
    return config['num_envs'] * config['steps_per_env']


def ppo_curve(run_dir, steps_per_iteration=None):
    """PPO run: env steps (K,), mean episode returns (K,), seconds per iteration (mean)."""
    steps_per_iteration = ppo_steps_per_iteration(run_dir, steps_per_iteration)
    iterations, returns = read_scalars(run_dir, 'Train/mean_reward')
    _, collect = read_scalars(run_dir, 'Perf/collection_time')
    _, learn = read_scalars(run_dir, 'Perf/learning_time')
    seconds = float(np.mean(collect) + np.mean(learn))
    return (iterations + 1) * float(steps_per_iteration), returns, seconds


TRACKING_TAGS = ('reward/lin_vel_tracking', '/reward/lin_vel_tracking')
"""The per-step linear-velocity tracking term: SHAC's and SAC's tag, then PPO's (rsl-rl-lib)."""


def tracking_curve(run_dir, kind, steps_per_iteration=None):
    """(env steps (K,), per-step lin_vel_tracking (K,)) of a run, or None where not logged."""
    for tag in TRACKING_TAGS:
        try:
            x, values = read_scalars(run_dir, tag)
        except ValueError:
            continue
        if kind == 'ppo':
            return (x + 1) * float(steps_per_iteration), values
        if kind == 'shac':
            step_its, env_steps = read_scalars(run_dir, 'perf/env_steps')
            return np.interp(x, step_its, env_steps), values
        return x.astype(float), values
    return None


def parse_labelled(text):
    """'LABEL=DIR' -> (LABEL, DIR); a bare DIR is labelled by its folder name."""
    label, sep, path = text.partition('=')
    if not sep:
        return os.path.basename(os.path.normpath(text)), text
    return label, path


def steps_to_reach(env_steps, returns, threshold):
    """Environment steps at which the return first reaches threshold (None if never)."""
    hits = np.nonzero(returns >= threshold)[0]
    return float(env_steps[hits[0]]) if hits.size else None


def compare(shac, ppo, fraction=0.9, sac=None, more_sac=()):
    """Summary dict from (env_steps, returns, seconds) curves of PPO and of SHAC and/or SAC.

    more_sac: further (label, curve) SAC runs, reported under 'sac_runs' with the first one.
    """
    final = float(np.mean(ppo[1][-FINAL_WINDOW:]))
    if final <= 0.0:
        raise ValueError(f'PPO final return {final:.3g} <= 0: a fraction of it is no target')
    threshold = fraction * final
    ppo_steps = steps_to_reach(ppo[0], ppo[1], threshold)
    summary = {
        'ppo_final_return': final,
        'fraction': fraction,
        'threshold': threshold,
        'ppo_env_steps_to_threshold': ppo_steps,
        'ppo_env_steps': float(ppo[0][-1]),
        'ppo_s_per_iteration': ppo[2],
    }

    def beside_ppo(curve):
        """A run's figures against PPO's: steps to the threshold, their ratio, best, last."""
        steps = steps_to_reach(curve[0], curve[1], threshold)
        return {
            'env_steps_to_threshold': steps,
            'ppo_over_steps': (ppo_steps / steps) if ppo_steps and steps else None,
            'best_return': float(np.max(curve[1])),
            'ppo_return_at_steps': float(np.interp(curve[0][-1], ppo[0], ppo[1])),
            'env_steps': float(curve[0][-1]),
        }

    for name, curve in (('shac', shac), ('sac', sac)):
        if curve is not None:
            figures = beside_ppo(curve)
            summary.update({
                f'{name}_env_steps_to_threshold': figures['env_steps_to_threshold'],
                f'ppo_over_{name}_steps': figures['ppo_over_steps'],
                f'{name}_best_return': figures['best_return'],
                f'ppo_return_at_{name}_steps': figures['ppo_return_at_steps'],
                f'{name}_env_steps': figures['env_steps'],
            })  # fmt: skip
    if more_sac:
        summary['sac_runs'] = [
            {'label': label, **beside_ppo(curve), 's_per_1000_steps': curve[2]}
            for label, curve in more_sac
        ]
    if shac is not None:
        summary['shac_s_per_iteration'] = shac[2]
    if sac is not None:
        summary['sac_s_per_1000_steps'] = sac[2]
    return summary


def plot(shac, ppo, summary, path, sac=None, labelled=(), tracking=()):
    """Write return against environment steps of the runs as a PNG.

    labelled: (label, curve) runs drawn instead of the single SHAC/SAC pair when given;
    tracking: (label, (steps, per-step lin_vel_tracking)) drawn in a second panel.
    """
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    panels = 2 if tracking else 1
    fig, axes = plt.subplots(1, panels, figsize=(8 * panels, 4.5), squeeze=False)
    axis = axes[0, 0]
    axis.plot(ppo[0], ppo[1], label='PPO (rsl-rl-lib)')
    runs = list(labelled) or [(n, c) for n, c in (('SHAC', shac), ('SAC', sac)) if c is not None]
    for name, curve in runs:
        axis.plot(curve[0], curve[1], label=name)
    axis.axhline(summary['threshold'], color='k', ls='--', lw=0.8, label='90 % of PPO final')
    axis.set_xscale('log')
    axis.set_xlabel('environment steps')
    axis.set_ylabel('mean episode return')
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    if tracking:
        axis = axes[0, 1]
        for name, (steps, values) in tracking:
            axis.plot(steps, values, label=name)
        axis.set_xscale('log')
        axis.set_xlabel('environment steps')
        axis.set_ylabel('lin_vel_tracking per step (max = its weight x dt)')
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_arguments(parser):
    """`loco-train compare --ppo RUN [--shac RUN] [--sac RUN] [--plot PNG]`."""
    parser.add_argument('--shac', default='', help='SHAC run directory (TensorBoard logs)')
    parser.add_argument('--ppo', required=True, help='PPO run directory (TensorBoard logs)')
    parser.add_argument(
        '--sac',
        action='append',
        default=[],
        help='SAC run directory, or LABEL=DIR (repeatable; optional)',
    )
    parser.add_argument('--fraction', type=float, default=0.9, help='of PPO final return')
    parser.add_argument('--ppo-steps-per-iteration', type=int, default=None)
    parser.add_argument('--plot', default='', help='PNG of return against env steps')


def run(args):
    """Compare the runs; print a short table and one JSON line."""
    if not (args.shac or args.sac):
        print('loco-train compare: give --shac and/or --sac beside --ppo', file=sys.stderr)
        return 2
    sac_dirs = [parse_labelled(text) for text in args.sac]
    try:
        shac = shac_curve(args.shac) if args.shac else None
        ppo = ppo_curve(args.ppo, args.ppo_steps_per_iteration)
        sacs = [(label, sac_curve(path)) for label, path in sac_dirs]
    except ValueError as error:  # not a run directory, or no steps per iteration: say so
        print(f'loco-train compare: {error}', file=sys.stderr)
        return 2
    sac = sacs[0][1] if sacs else None
    try:
        summary = compare(shac, ppo, args.fraction, sac, sacs if len(sacs) > 1 else ())
    except ValueError as error:
        print(f'loco-train compare: {error}', file=sys.stderr)
        return 2
    if args.plot:
        names = [f'SAC {label}' if len(sacs) > 1 else 'SAC' for label, _ in sacs]
        labelled = [('SHAC', shac)] if shac is not None else []
        labelled += [(name, curve) for name, (_, curve) in zip(names, sacs)]
        per_iteration = ppo_steps_per_iteration(args.ppo, args.ppo_steps_per_iteration)
        tracking = [('PPO (rsl-rl-lib)', tracking_curve(args.ppo, 'ppo', per_iteration))]
        if shac is not None:
            tracking.append(('SHAC', tracking_curve(args.shac, 'shac')))
        tracking += [(n, tracking_curve(path, 'sac')) for n, (_, path) in zip(names, sac_dirs)]
        tracking = [(name, curve) for name, curve in tracking if curve is not None]
        plot(shac, ppo, summary, args.plot, sac, labelled, tracking if len(tracking) > 1 else ())
        summary['plot'] = os.path.abspath(args.plot)
    for key, value in summary.items():
        if 'steps' in key:
            print(f'{key:<30} {value}')
    print(json.dumps(summary))
    return 0
