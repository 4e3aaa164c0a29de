"""Sample efficiency over seeds: environment steps to a fraction of PPO's final return.

`python -m loco_train.experiments.sample_efficiency --ppo 'PPO 4096x24=RUN,RUN' --shac
'SHAC 64x32=RUN,RUN' [--plot PNG] [--markdown]` reads the TensorBoard scalars of every run (the
readers of `loco-train compare`). Per PPO setting the target is `fraction` of its final return
(each seed's mean of its last 10 logged returns, averaged over the setting's seeds); every run is
then placed against every setting's target: env steps to reach it (mean over seeds, and per
seed), PPO's steps over each group's. A run that never reaches a target counts as its last env
step and is marked, so that a mean is a lower bound rather than a silent omission. Beside the
first crossing (a single noisy value can make it), `held` is the first step at the target from
which the median return over the next `hold` env steps stays at it. With `--tracking F
--tracking-max M` each run also gets the env steps until its per-step linear-velocity tracking
term first reaches F x M (walking at the commanded speed, falls aside). Last line: one JSON
object.
"""

import argparse
import json
import sys

import numpy as np

from loco_train.experiments.compare import (
    FINAL_WINDOW,
    ppo_curve,
    ppo_steps_per_iteration,
    shac_curve,
    steps_to_reach,
    tracking_curve,
)


def parse_group(text):
    """'LABEL=DIR,DIR' -> (LABEL, [DIR, ...])."""
    label, sep, dirs = text.partition('=')
    if not sep or not dirs:
        raise ValueError(f'{text!r}: expected LABEL=DIR[,DIR...]')
    return label, [d for d in dirs.split(',') if d]


def final_return(curve):
    """A run's final return: the mean of its last FINAL_WINDOW logged returns."""
    return float(np.mean(curve[1][-FINAL_WINDOW:]))


def place(curve, threshold):
    """(env steps to threshold or the run's last step, reached) of one run."""
    steps = steps_to_reach(curve[0], curve[1], threshold)
    if steps is None:
        return float(curve[0][-1]), False
    return steps, True


def place_held(curve, threshold, hold):
    """(first env step at the threshold whose next `hold` env steps keep a median above, found).

    Only steps with a full `hold` of logged returns after them qualify; none: the last step.
    """
    steps, returns = curve[0], curve[1]
    for k, start in enumerate(steps):
        end = np.searchsorted(steps, start + hold, side='right')
        if steps[-1] < start + hold:
            break
        if returns[k] >= threshold and np.median(returns[k:end]) >= threshold:
            return float(start), True
    return float(steps[-1]), False


def summarise(ppo_groups, other_groups, fraction=0.9, hold=200_000.0):
    """Targets per PPO setting and every group's steps to them.

    ppo_groups, other_groups: [(label, [curve, ...])] with curve = (env steps (K,), returns (K,),
    seconds per iteration). Returns a JSON-ready dict.
    """
    targets = []
    for label, curves in ppo_groups:
        finals = [final_return(c) for c in curves]
        final = float(np.mean(finals))
        if final <= 0.0:
            raise ValueError(f'{label}: final return {final:.3g} <= 0, no target')
        targets.append({'setting': label, 'final_returns': finals, 'threshold': fraction * final})
    groups = []
    for label, curves in list(ppo_groups) + list(other_groups):
        row = {'group': label, 'seeds': len(curves), 'against': []}
        for target in targets:
            placed = [place(c, target['threshold']) for c in curves]
            held = [place_held(c, target['threshold'], hold) for c in curves]
            row['against'].append({
                'setting': target['setting'],
                'env_steps': [s for s, _ in placed],
                'reached': [r for _, r in placed],
                'mean_env_steps': float(np.mean([s for s, _ in placed])),
                'held_env_steps': [s for s, _ in held],
                'held': [r for _, r in held],
                'mean_held_env_steps': float(np.mean([s for s, _ in held])),
            })  # fmt: skip
        row['best_return'] = [float(np.max(c[1])) for c in curves]
        row['env_steps_run'] = [float(c[0][-1]) for c in curves]
        groups.append(row)
    own = {
        g['group']: a
        for g in groups[: len(ppo_groups)]
        for a in g['against']
        if a['setting'] == g['group']
    }  # each PPO setting against its own target
    for row in groups[len(ppo_groups) :]:
        for entry in row['against']:
            ppo = own[entry['setting']]
            entry['ppo_over_steps'] = ppo['mean_env_steps'] / entry['mean_env_steps']
            entry['ppo_over_held_steps'] = (
                ppo['mean_held_env_steps'] / entry['mean_held_env_steps']
            )
            entry['all_reached'] = all(entry['reached'])
            entry['all_held'] = all(entry['held'])
    return {'fraction': fraction, 'hold_env_steps': hold, 'targets': targets, 'groups': groups}


def ratio_text(ratio, reached):
    """PPO's steps over a group's: the ratio, at most it where some seeds never got there."""
    if not any(reached):
        return 'not reached'
    return f'{ratio:.1f}×' if all(reached) else f'≤ {ratio:.1f}×'


def tracking_steps(groups, level):
    """{group: [env steps until lin_vel_tracking >= level, or None, per run]} of (label, dirs)."""
    out = {}
    for label, dirs, kind in groups:
        steps = []
        for path in dirs:
            per_iteration = ppo_steps_per_iteration(path) if kind == 'ppo' else None
            curve = tracking_curve(path, kind, per_iteration)
            steps.append(None if curve is None else steps_to_reach(*curve, level))
        out[label] = steps
    return out


def markdown(summary):
    """The summary as one markdown table: a row per group, a column per PPO target.

    A cell: first crossing / held (both in M env steps), then PPO's steps over the group's.
    """
    settings = [t['setting'] for t in summary['targets']]
    tracking = summary.get('tracking')
    head = '| | seeds | ' + ' | '.join(
        f'to {t["threshold"]:.1f} ({t["setting"]}: 90 % of {np.mean(t["final_returns"]):.1f})'
        for t in summary['targets']
    )
    if tracking:
        head += f' | tracking at {tracking["level"]:.4g} (per seed)'
    lines = [head + ' |', '|' + '---|' * (len(settings) + 2 + bool(tracking))]
    for row in summary['groups']:
        cells = []
        for entry in row['against']:
            text = (
                f'{entry["mean_env_steps"] / 1e6:.2f} / {entry["mean_held_env_steps"] / 1e6:.2f} M'
            )
            if not all(entry['reached']):
                text += f' ({sum(entry["reached"])} of {len(entry["reached"])} reached)'
            if not all(entry['held']):
                text += f' ({sum(entry["held"])} of {len(entry["held"])} held)'
            if 'ppo_over_steps' in entry:
                first = ratio_text(entry['ppo_over_steps'], entry['reached'])
                held = ratio_text(entry['ppo_over_held_steps'], entry['held'])
                text += f', **{first} / {held}**'
            cells.append(text)
        if tracking:
            steps = tracking['env_steps'][row['group']]
            cells.append(', '.join('never' if x is None else f'{x / 1e6:.2f} M' for x in steps))
        lines.append(f'| {row["group"]} | {row["seeds"]} | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def plot(ppo_groups, other_groups, summary, path):
    """Return against environment steps, every run, one colour per group, targets dashed."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(8, 4.5))
    colours = plt.rcParams['axes.prop_cycle'].by_key()['color']
    for k, (label, curves) in enumerate(list(ppo_groups) + list(other_groups)):
        for j, curve in enumerate(curves):
            axis.plot(curve[0], curve[1], color=colours[k % len(colours)], lw=1.0, alpha=0.8,
                      label=label if j == 0 else None)  # fmt: skip
    for k, target in enumerate(summary['targets']):
        axis.axhline(target['threshold'], color=colours[k % len(colours)], ls='--', lw=0.8)
    axis.set_xscale('log')
    axis.set_xlabel('environment steps')
    axis.set_ylabel('mean episode return')
    axis.set_title(f"dashed: {summary['fraction']:.0%} of each PPO setting's final return")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    """Read the runs, print the table (with --markdown) and one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--ppo', action='append', required=True, help='LABEL=DIR[,DIR...]')
    parser.add_argument('--shac', action='append', default=[], help='LABEL=DIR[,DIR...]')
    parser.add_argument('--fraction', type=float, default=0.9)
    parser.add_argument(
        '--hold', type=float, default=200_000.0,
        help='env steps over which the median return must stay at the target (held)',
    )  # fmt: skip
    parser.add_argument('--plot', default='', help='PNG of return against env steps')
    parser.add_argument('--tracking', type=float, default=0.0, help='fraction F (0: off)')
    parser.add_argument(
        '--tracking-max', type=float, default=0.02,
        help="the tracking term's most per step: its weight x the control step (1 x 0.02 s)",
    )  # fmt: skip
    parser.add_argument('--markdown', action='store_true', help='print the markdown table')
    args = parser.parse_args(argv)
    try:
        ppo_groups = [(lab, [ppo_curve(d) for d in ds]) for lab, ds in map(parse_group, args.ppo)]
        shac_groups = [
            (lab, [shac_curve(d) for d in ds]) for lab, ds in map(parse_group, args.shac)
        ]
        summary = summarise(ppo_groups, shac_groups, args.fraction, args.hold)
        if args.tracking > 0.0:
            level = args.tracking * args.tracking_max
            dirs = [(*parse_group(t), 'ppo') for t in args.ppo]
            dirs += [(*parse_group(t), 'shac') for t in args.shac]
            summary['tracking'] = {'level': level, 'env_steps': tracking_steps(dirs, level)}
    except ValueError as error:
        print(f'sample_efficiency: {error}', file=sys.stderr)
        return 2
    if args.plot:
        plot(ppo_groups, shac_groups, summary, args.plot)
        summary['plot'] = args.plot
    if args.markdown:
        print(markdown(summary))
    print(json.dumps(summary))
    return 0


if __name__ == '__main__':
    sys.exit(main())
