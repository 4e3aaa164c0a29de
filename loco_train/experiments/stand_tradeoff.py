"""Standing still against robustness: one point per policy from nominal and screen rows.

`python -m loco_train.experiments.stand_tradeoff NOMINAL SCREEN... --plot PNG` reads the nominal
evaluation rows (`policy`, `segments` of `loco-train eval`) and the screen rows (`file`,
`first_seed`, `falls` per cell of robustness_sweep.evaluate_cell) and prints, per policy, the
stand error, the forward 0.5 m/s error and the cells with a fall on the screen's first seed set;
with --plot it draws stand error against cells with a fall, coloured by the forward 0.5 error.
"""

import argparse
import json
import sys


def read_rows(path):
    """JSON lines of path; ValueError naming the line that does not parse."""
    rows = []
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(f'{path}:{number}: not JSON ({error.msg})') from None
    return rows


def tradeoff(nominal, screen, first_seed=0):
    """{policy: {stand, forward_0.5, lin, yaw, falls, cells, screened}} of both row lists.

    stand and forward_0.5 are the base speed errors (m/s) of those segments; cells counts the
    screen cells with a fall among the rows of first_seed (None when the policy has none).
    """
    out = {}
    for row in nominal:
        segments = row.get('segments', {})
        out[row['policy']] = {
            'stand': segments.get('stand', {}).get('lin_err'),
            'forward_0.5': segments.get('forward_0.5', {}).get('lin_err'),
            'lin': row.get('lin_err'),
            'yaw': row.get('yaw_err'),
            'falls': row.get('falls'),
            'cells': None,
            'screened': 0,
        }
    for row in screen:
        entry = out.get(row['file'])
        if entry is None or row.get('first_seed', 0) != first_seed:
            continue
        entry['screened'] += 1
        entry['cells'] = (entry['cells'] or 0) + int(row['falls'] > 0)
    return out


def plot(points, path, dpi=110):
    """Stand error (x) against cells with a fall (y), coloured by the forward 0.5 error; PNG.

    Policies evaluated without a fall but not screened are drawn as dotted reference lines.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    shown = {k: v for k, v in points.items() if v['cells'] is not None and v['stand'] is not None}
    if not shown:
        raise ValueError('no policy has both a nominal row and screen rows')
    figure = Figure(figsize=(8, 5.5), layout='constrained')
    FigureCanvasAgg(figure)
    axis = figure.subplots()
    names = sorted(shown)
    x = [shown[n]['stand'] for n in names]
    y = [shown[n]['cells'] for n in names]
    c = [shown[n]['forward_0.5'] if shown[n]['forward_0.5'] is not None else 0.5 for n in names]
    dots = axis.scatter(x, y, c=c, cmap='viridis_r', vmin=0.0, vmax=0.5, s=60)
    rank = {name: i for i, name in enumerate(sorted(names, key=lambda n: shown[n]['stand']))}
    for name, xi, yi in zip(names, x, y):
        offset = (5, 4) if rank[name] % 2 == 0 else (5, -10)  # close neighbours stay legible
        axis.annotate(name, (xi, yi), textcoords='offset points', xytext=offset, fontsize=7)
    for name, values in sorted(points.items()):  # evaluated, not screened: a reference line
        if values['cells'] is None and values['stand'] is not None and not values['falls']:
            axis.axvline(values['stand'], color='grey', linestyle=':', linewidth=1)
            axis.annotate(
                name, (values['stand'], 1.0), xycoords=('data', 'axes fraction'),
                rotation=90, va='top', ha='right', fontsize=7, color='grey',
            )  # fmt: skip
    figure.colorbar(dots, ax=axis, label='forward 0.5 m/s error (m/s)')
    axis.set_xlabel('base speed error while told to stand (m/s)')
    axis.set_ylabel('screen cells with a fall')
    axis.set_title('Standing still against robustness (MuJoCo, nominal eval and screen)')
    axis.grid(alpha=0.3)
    figure.savefig(path, dpi=dpi)
    return path


def main(argv=None):
    """CLI: print the table as JSON lines; --plot writes the figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        'nominal', help='nominal evaluation rows (JSON lines); several files joined by commas'
    )
    parser.add_argument('screen', nargs='+', help='screen rows (JSON lines), one file or more')
    parser.add_argument('--first-seed', type=int, default=0, help='screen seed set (default 0)')
    parser.add_argument('--plot', default='', help='PNG to write')
    args = parser.parse_args(argv)
    try:
        screen = [row for path in args.screen for row in read_rows(path)]
        nominal = [row for path in args.nominal.split(',') for row in read_rows(path)]
        points = tradeoff(nominal, screen, args.first_seed)
        for name, values in sorted(points.items()):
            print(json.dumps({'policy': name, **values}))
        if args.plot:
            plot(points, args.plot)
    except (OSError, ValueError, KeyError) as error:
        print(f'stand_tradeoff: {error}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
