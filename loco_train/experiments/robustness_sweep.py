"""Robustness of policy files in MuJoCo over payload × drive gains × friction × command latency.

`python -m loco_train.experiments.robustness_sweep --out runs/robustness`
evaluates each policy (default: the shipped SHAC and PPO files) in every cell of the grid with
`loco-train eval`'s episode (the deployment controller on the fixed 20 s command schedule, MuJoCo
as the independent simulator), `--seeds` episodes per cell, cells spread over `--workers`
processes. Each finished cell is appended to OUT/cells.jsonl at once, keyed by the policy file's
sha256, the cell and the seeds, so a killed sweep resumes where it stopped (and a retrained
file of the same name is evaluated afresh); a cell whose evaluation fails is reported and left
for the next run. `--first-seed` repeats a sweep on fresh seeds into the same file, and `--pool`
summarises every seed set of a cell together: one lucky pair of episodes does not make a cell
walked. `--where-walks REF` screens: only the cells where REF (a file with rows in
OUT/cells.jsonl) walked in every one of at least `--where-walks-episodes` episodes on record
are evaluated, summarised and drawn. Writes OUT/robustness.png (one heat-map of the tracking
error per policy, friction and latency, payload against gain scale, the falls written in each
cell) and prints one JSON line: per policy the cells it walks in (no fall), and the cells where
the first policy falls while another walks.
"""

import argparse
from concurrent.futures import as_completed, ProcessPoolExecutor
import contextlib
import itertools
import json
import os
import sys
import time

import numpy as np

from loco_policy.policy_file import file_sha256
from loco_train.policy.atomic_io import append_json_line, read_json_lines

POLICIES = ('anymal_c_walk.onnx', 'anymal_c_walk_ppo.onnx')
"""The shipped files compared by default (loco_policy/policies)."""

AXES = ('payload', 'gain_scale', 'friction', 'latency')
"""A cell's coordinates: kg on the base, kp and kd multiplier, ground friction, seconds."""


def shipped(name):
    """The path of a shipped policy file."""
    import loco_policy

    return os.path.join(os.path.dirname(loco_policy.__file__), 'policies', name)


def floats(text):
    """'0,5,10' -> (0.0, 5.0, 10.0)."""
    return tuple(float(v) for v in text.split(','))


def evaluate_cell(policy, sha256, cell, seeds, stiff_feet=False, first_seed=0):
    """Evaluate one policy in one cell (a dict of AXES); its falls and tracking errors."""
    from loco_train.experiments.evaluate import EvalConfig, evaluate

    config = EvalConfig(
        sim='mujoco', seeds=seeds, first_seed=first_seed, stiff_feet=stiff_feet, **cell
    )
    with contextlib.redirect_stderr(open(os.devnull, 'w')):  # the per-seed lines
        result = evaluate(policy, config)
    return {
        'policy': os.path.basename(policy),
        'sha256': sha256,
        **cell,
        'seeds': seeds,
        'first_seed': first_seed,
        'falls': result['falls'],
        'fell_in': result['fell_in'],
        'lin_err': result['mean_lin_err'],
        'yaw_err': result['mean_yaw_err'],
        'stiff_feet': bool(stiff_feet),
    }


def key(row):
    """A cell row's identity for the figure and summary: policy name and coordinates."""
    return (row['policy'],) + coordinates(row[a] for a in AXES)


def coordinates(values):
    """A cell's AXES values as a comparable tuple (rounded to 1e-6)."""
    return tuple(round(float(v), 6) for v in values)


def resume_key(row):
    """A cell row's identity for resuming: the file's sha256, coordinates, seeds, feet."""
    seeds = (int(row['seeds']), int(row.get('first_seed', 0)))
    return (row.get('sha256'), *seeds, bool(row.get('stiff_feet'))) + key(row)[1:]


def pool(rows):
    """One row per policy and cell from all its seed sets (rows of seeds [first_seed, +seeds)).

    A repeat of the same set replaces the earlier row; a set overlapping one already taken
    (the larger sets first) is left out, so no seed counts twice. Seeds and falls are summed,
    errors weighted by seeds; fell_in is None where a set did not record it.
    """
    groups = {}
    for row in rows:
        first, seeds = int(row.get('first_seed', 0)), int(row['seeds'])
        groups.setdefault(key(row), {})[(first, seeds)] = row  # a repeat replaces
    out = []
    for sets in groups.values():
        taken, parts = set(), []
        for first, seeds in sorted(sets, key=lambda fs: (-fs[1], fs[0])):
            span = set(range(first, first + seeds))
            if not span & taken:
                taken |= span
                parts.append(sets[(first, seeds)])
        parts.sort(key=lambda r: int(r.get('first_seed', 0)))
        merged = dict(parts[0])
        merged['seeds'] = sum(int(r['seeds']) for r in parts)
        merged['falls'] = sum(int(r['falls']) for r in parts)
        known = all('fell_in' in r for r in parts)
        merged['fell_in'] = [s for r in parts for s in r['fell_in']] if known else None
        for name in ('lin_err', 'yaw_err'):
            values = [(r[name], int(r['seeds'])) for r in parts if r.get(name) is not None]
            weight = sum(w for _, w in values)
            merged[name] = sum(v * w for v, w in values) / weight if weight else None
        out.append(merged)
    return out


def walked_cells(rows, sha256, min_episodes=1, stiff_feet=False):
    """Coordinates (AXES tuples) where the file of sha256 has no fall over all its seed sets.

    rows: cell rows of any files; only cells with at least min_episodes episodes of that file
    (pooled) count.
    """
    mine = [
        r for r in rows
        if r.get('sha256') == sha256 and bool(r.get('stiff_feet')) == stiff_feet
    ]  # fmt: skip
    return {key(r)[1:] for r in pool(mine) if r['falls'] == 0 and int(r['seeds']) >= min_episodes}


def summarise(rows, names):
    """Per policy: cells, cells walked (0 falls), episodes and falls.

    Also the cells where names[0] falls and another policy walks.
    """
    by_key = {key(r): r for r in rows}
    cells = sorted({k[1:] for k in by_key})
    out = {'cells': len(cells), 'policies': {}}
    for name in names:
        mine = [by_key[(name, *c)] for c in cells if (name, *c) in by_key]
        walked = [r for r in mine if r['falls'] == 0]
        errors = [r['lin_err'] for r in walked if r['lin_err'] is not None]
        out['policies'][name] = {
            'evaluated': len(mine),
            'walks': len(walked),
            'episodes': sum(int(r['seeds']) for r in mine),
            'falls': sum(int(r['falls']) for r in mine),
            'mean_lin_err_where_walking': float(np.mean(errors)) if errors else None,
        }
    first, others = names[0], names[1:]
    worse = []
    for c in cells:
        mine = by_key.get((first, *c))
        if mine is None or mine['falls'] == 0:
            continue
        if any(by_key.get((o, *c), {'falls': 1})['falls'] == 0 for o in others):
            worse.append(dict(zip(AXES, c)))
    out[f'{first}_falls_where_another_walks'] = worse
    return out


def plot(rows, names, grid, path, feet=''):
    """One heat-map per policy × friction × latency: payload (rows) by gain scale (columns)."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    by_key = {key(r): r for r in rows}
    frictions, latencies = grid['friction'], grid['latency']
    payloads, gains = grid['payload'], grid['gain_scale']
    n_rows, n_cols = len(frictions), len(latencies) * len(names)
    fig, axes = plt.subplots(
        n_rows,
        n_cols,
        figsize=(2.3 * n_cols + 1.5, 2.1 * n_rows + 0.8),
        squeeze=False,
        layout='constrained',
    )
    image = None
    for (i, mu), (j, (name, lat)) in itertools.product(
        enumerate(frictions), enumerate(itertools.product(names, latencies))
    ):
        ax = axes[i, j]
        err = np.full((len(payloads), len(gains)), np.nan)
        for (a, kg), (b, g) in itertools.product(enumerate(payloads), enumerate(gains)):
            row = by_key.get(key({'policy': name, 'payload': kg, 'gain_scale': g,
                                  'friction': mu, 'latency': lat}))  # fmt: skip
            if row is None:
                continue
            err[a, b] = row['lin_err'] if row['lin_err'] is not None else np.nan
            mark = f'F{row["falls"]}' if row['falls'] else ''
            ax.text(b, a, mark, ha='center', va='center', fontsize=7, color='white',
                    fontweight='bold')  # fmt: skip
        image = ax.imshow(err, origin='lower', cmap='viridis', vmin=0.0, vmax=0.6, aspect='auto')
        ax.set_xticks(range(len(gains)), [f'{g:g}' for g in gains], fontsize=7)
        ax.set_yticks(range(len(payloads)), [f'{p:g}' for p in payloads], fontsize=7)
        if i == 0:
            ax.set_title(f'{name.removesuffix(".onnx")}\nlatency {lat * 1e3:g} ms', fontsize=8)
        if j == 0:
            ax.set_ylabel(f'friction {mu:g}\npayload (kg)', fontsize=8)
        if i == n_rows - 1:
            ax.set_xlabel('drive gain scale', fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.6, label='mean |velocity error| (m/s); F<n>: falls')
    counts = sorted({int(r['seeds']) for r in rows if 'seeds' in r})
    episodes = f', {"/".join(map(str, counts))} episodes per cell' if counts else ''
    fig.suptitle(
        f'MuJoCo robustness sweep (deployment controller, evaluation schedule{feet}{episodes})'
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    """Run the sweep (or only redraw it with --plot-only); print the summary JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--policies', nargs='+', default=[shipped(p) for p in POLICIES])
    parser.add_argument('--payload', type=floats, default=(0.0, 5.0, 10.0, 15.0), help='kg')
    parser.add_argument('--gain-scale', type=floats, default=(0.7, 0.85, 1.0, 1.15, 1.3))
    parser.add_argument('--friction', type=floats, default=(0.4, 0.8, 1.2))
    parser.add_argument('--latency', type=floats, default=(0.0, 0.01, 0.02), help='s')
    parser.add_argument('--seeds', type=int, default=2, help='episodes per cell')
    parser.add_argument(
        '--first-seed', type=int, default=0,
        help='seed of the first episode of a cell (a repeat on fresh seeds: e.g. 2 after 0-1)',
    )  # fmt: skip
    parser.add_argument(
        '--stiff-feet', action='store_true',
        help="MuJoCo feet that sink ~1 mm instead of the description's ~17 mm (loco-train eval's)",
    )  # fmt: skip
    parser.add_argument(
        '--where-walks', default='', metavar='REF',
        help='a screen: only the cells where the policy file REF walked (no fall) in all its '
        'episodes in OUT/cells.jsonl, e.g. the PPO file after a --pool sweep of it',
    )  # fmt: skip
    parser.add_argument(
        '--where-walks-episodes', type=int, default=1,
        help='with --where-walks: only cells where REF has at least this many episodes',
    )  # fmt: skip
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--out', required=True)
    parser.add_argument('--plot-only', action='store_true', help='redraw from OUT/cells.jsonl')
    parser.add_argument(
        '--pool', action='store_true',
        help='summarise and draw every seed set in OUT/cells.jsonl together (a cell walked: no '
        'fall in any of its episodes), not only --seeds from --first-seed; cells missing for '
        '--seeds and --first-seed are evaluated first unless --plot-only',
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.first_seed < 0 or args.where_walks_episodes < 1:
        parser.error(
            '--seeds and --where-walks-episodes must be at least 1 and --first-seed at least 0'
        )
    os.makedirs(args.out, exist_ok=True)
    cells_path = os.path.join(args.out, 'cells.jsonl')
    grid = {'payload': args.payload, 'gain_scale': args.gain_scale,
            'friction': args.friction, 'latency': args.latency}  # fmt: skip
    names = [os.path.basename(p) for p in args.policies]
    digests = {p: file_sha256(p) for p in args.policies}
    rows = [
        r for r in read_json_lines(cells_path)
        if r.get('sha256') in digests.values() and bool(r.get('stiff_feet')) == args.stiff_feet
    ]  # fmt: skip
    done = {resume_key(r) for r in rows}
    cells = list(itertools.product(*(grid[a] for a in AXES)))
    screen = {}
    if args.where_walks:
        reference = file_sha256(args.where_walks)
        allowed = walked_cells(
            read_json_lines(cells_path), reference, args.where_walks_episodes, args.stiff_feet
        )
        cells = [c for c in cells if coordinates(c) in allowed]
        if not cells:
            parser.error(
                f'--where-walks: {args.where_walks} walks in no cell of the grid with at least '
                f'{args.where_walks_episodes} episodes in {cells_path} (sweep it first)'
            )
        screen = {
            'where_walks': {
                'policy': os.path.basename(args.where_walks),
                'episodes': args.where_walks_episodes,
                'cells': len(cells),
            }
        }
    inside = {coordinates(c) for c in cells}
    todo = []
    for policy in args.policies:
        for values in cells:
            cell = dict(zip(AXES, values))
            row = {'policy': os.path.basename(policy), 'sha256': digests[policy],
                   'seeds': args.seeds, 'first_seed': args.first_seed,
                   'stiff_feet': args.stiff_feet, **cell}  # fmt: skip
            if resume_key(row) not in done:
                todo.append((policy, cell))
    rows = [
        r for r in rows
        if int(r['seeds']) == args.seeds and int(r.get('first_seed', 0)) == args.first_seed
    ]  # fmt: skip
    if todo and not args.plot_only:
        start, failed = time.monotonic(), 0
        print(f'{len(todo)} cells to evaluate ({len(done)} already in {cells_path})',
              file=sys.stderr)  # fmt: skip
        with ProcessPoolExecutor(args.workers) as executor:
            futures = {
                executor.submit(
                    evaluate_cell, p, digests[p], c, args.seeds, args.stiff_feet, args.first_seed
                ): (p, c)
                for p, c in todo
            }
            for n, future in enumerate(as_completed(futures), 1):
                try:
                    row = future.result()
                except Exception as error:  # one broken cell must not lose the others
                    failed += 1
                    print(f'[{n}/{len(todo)}] {futures[future]} failed: {error!r}',
                          file=sys.stderr)  # fmt: skip
                    continue
                append_json_line(cells_path, row)  # at once: a killed sweep resumes past it
                rows.append(row)
                elapsed = time.monotonic() - start
                print(f'[{n}/{len(todo)}] {row["policy"]} payload {row["payload"]:g} gain '
                      f'{row["gain_scale"]:g} friction {row["friction"]:g} latency '
                      f'{row["latency"] * 1e3:g} ms: falls {row["falls"]}, eta '
                      f'{elapsed / n * (len(todo) - n):.0f} s', file=sys.stderr)  # fmt: skip
        if failed:
            print(f'{failed} cells failed; run again to retry them', file=sys.stderr)
    seeds = {'seeds': args.seeds, 'first_seed': args.first_seed}
    if args.pool:  # every seed set of these files with these feet
        rows = pool([
            r for r in read_json_lines(cells_path)
            if r.get('sha256') in digests.values() and bool(r.get('stiff_feet')) == args.stiff_feet
        ])  # fmt: skip
        seeds = {'pooled': True}
    rows = [r for r in rows if key(r)[1:] in inside]  # a screen shows its cells only
    figure = os.path.join(args.out, 'robustness.png')
    plot(rows, names, grid, figure, ', stiff feet' if args.stiff_feet else '')
    summary = summarise(rows, names) | {'grid': grid, **seeds, **screen, 'plot': figure}
    print(json.dumps(summary))
    return 0


if __name__ == '__main__':
    sys.exit(main())
