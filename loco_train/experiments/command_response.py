"""Command response of policy files in MuJoCo: the velocity each reaches for single-axis commands.

`python -m loco_train.experiments.command_response FILE...` stands each policy up through the
deployment controller (as `loco-train eval` does), holds a single-axis command (walking straight,
sideways, turning on the spot) for HOLD_S seconds after STAND_S of standing, and reports the mean
measured velocity on that axis over the last MEASURE_S seconds, with exact sensors at nominal
dynamics. The evaluation schedule commands 0.5 and 1 m/s and 1 rad/s only; this finds the dead
zones below (a policy that stands when told to turn at 0.3 rad/s). Prints one JSON line per file,
and with `--plot` draws measured against commanded per axis.
"""

import argparse
import json
import os

import numpy as np

COMMANDS = {
    'vx': (0.2, 0.5, 1.0),
    'vy': (0.2, 0.5),
    'wz': (0.3, 0.6, 1.0),
}
"""Commanded values per axis (m/s, m/s, rad/s), each given alone."""

STAND_S = 2.0
"""Seconds of standing (command 0) after WALK begins, before the command."""

HOLD_S = 6.0
"""Seconds the command is held."""

MEASURE_S = 4.0
"""Seconds at the end of the hold the mean is taken over (the first two are the transient)."""


def response(policy_path, commands=None, seed=0):
    """{axis: [(commanded, measured mean, fell)]} of one file in MuJoCo (COMMANDS if None)."""
    from loco_policy.policy_file import OnnxPolicy
    from loco_policy.sim.backends import make_backend, Perturbation
    from loco_train.experiments import evaluate as ev

    commands = COMMANDS if commands is None else commands
    c = ev.EvalConfig(sim='mujoco', **ev.NO_NOISE)  # nominal dynamics, exact sensors
    policy = OnnxPolicy(policy_path)
    perturbation = Perturbation(c.payload, c.friction, c.gain_scale, c.latency, c.stiff_feet)
    backend = make_backend(c.sim, perturbation)
    out = {}
    for index, axis in enumerate(('vx', 'vy', 'wz')):
        rows = []
        for value in commands.get(axis, ()):
            command = tuple(float(value) if i == index else 0.0 for i in range(3))
            schedule = (('stand', STAND_S, (0.0, 0.0, 0.0)), (axis, HOLD_S, command))
            trace = ev.run_episode(policy, backend, c, seed, None, schedule)
            window = trace['t'] > STAND_S + HOLD_S - MEASURE_S  # (T,) bool
            measured = trace['ang_vel'] if axis == 'wz' else trace['lin_vel'][:, index]
            mean = float(np.mean(measured[window])) if np.any(window) else float('nan')
            rows.append((float(value), mean, bool(trace['fell'])))
        out[axis] = rows
    return out


def plot(results, path):
    """Measured against commanded, one panel per axis, one line per file."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    units = {'vx': 'm/s', 'vy': 'm/s', 'wz': 'rad/s'}
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    for ax, axis in zip(axes, ('vx', 'vy', 'wz')):
        top = max(COMMANDS[axis])
        ax.plot([0, top], [0, top], color='0.7', linestyle='--', label='commanded')
        for name, result in results.items():
            rows = result[axis]
            ax.plot([r[0] for r in rows], [r[1] for r in rows], marker='o', label=name)
        ax.set_xlabel(f'commanded {axis} ({units[axis]})')
        ax.set_ylabel(f'measured {axis} ({units[axis]})')
        ax.set_xlim(0, top * 1.05)
        ax.set_ylim(-0.05, top * 1.15)
    axes[0].legend(fontsize=7)
    fig.suptitle(
        'Command response in MuJoCo (nominal dynamics, exact sensors, single-axis commands)'
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    """Measure every file given; one JSON line each; the figure with --plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('policies', nargs='+', help='policy files (ONNX)')
    parser.add_argument('--plot', default='', help='PNG path of measured against commanded')
    args = parser.parse_args(argv)
    results = {}
    for path in args.policies:
        result = response(path)
        name = os.path.basename(path)[: -len('.onnx')]
        results[name] = result
        print(json.dumps({'policy': name, **result}), flush=True)
    if args.plot:
        plot(results, args.plot)


if __name__ == '__main__':
    main()
