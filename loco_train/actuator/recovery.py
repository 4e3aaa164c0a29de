"""Recovery proof: known actuator parameters, a synthetic hanging-robot recording, the fit.

``python -m loco_train.actuator.recovery [--duration 20] [--seed 0] [--noise]`` draws per-joint
truth within +-30 % of the reference drive (kp, kd scales around 1, armature around 0.02 kg m^2,
friction around the description's 0.1 N m, damping around 1 N m s/rad) with an 11.3 ms delay,
records the excitation on the MuJoCo backend (loco_train.actuator.synthetic), runs
``loco-train fit-actuator`` on it and prints one JSON object: the relative errors per field (%),
the delay error (ms), the held-out fit and the times.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from loco_train.actuator.model import ActuatorParams

REFERENCE = {'kp_scale': 1.0, 'kd_scale': 1.0, 'armature': 0.02, 'friction': 0.1, 'damping': 1.0}
"""The drive the truth is drawn around (armature: a typical reflected rotor inertia)."""

GOALS = {'kp_scale': 1.0, 'kd_scale': 1.0, 'armature': 1.0, 'friction': 10.0, 'damping': 10.0}
"""Largest relative error (%) per field on noise-free data; the delay within DELAY_GOAL."""

DELAY_GOAL = 0.5e-3
"""Largest delay error (s)."""


def draw_truth(seed, delay=0.0113, spread=0.3):
    """ActuatorParams with every per-joint value within +-spread of REFERENCE."""
    rng = np.random.default_rng(seed)
    values = {k: v * rng.uniform(1 - spread, 1 + spread, 12) for k, v in REFERENCE.items()}
    return ActuatorParams(**values, delay=delay)


def errors(truth, fitted):
    """{field: (12,) relative error in %}, and the delay error (s)."""
    table = {k: 100 * (getattr(fitted, k) / getattr(truth, k) - 1) for k in REFERENCE}
    return table, fitted.delay - truth.delay


def run(directory, duration=20.0, seed=0, noise=None, max_iters=30, report=False):
    """Record, fit and compare in directory; return the summary dict."""
    from loco_train import cli
    from loco_train.actuator import model, synthetic
    from loco_train.actuator.excitation import Excitation, ExcitationConfig

    truth = draw_truth(seed)
    started = time.monotonic()
    bag = synthetic.record(
        os.path.join(directory, 'bag'),
        Excitation(ExcitationConfig(duration=duration)),
        truth,
        noise=noise,
    )
    recorded = time.monotonic()
    output = os.path.join(directory, 'actuator.yaml')
    argv = ['fit-actuator', bag, '--output', output, '--max-iters', str(max_iters)]
    if report:
        argv += ['--report', os.path.join(directory, 'report')]
    code = cli.main(argv)
    if code != 0:
        raise RuntimeError(f'fit-actuator exited {code}')
    fitted = model.read(output)
    table, delay_error = errors(truth, fitted)
    worst = {k: float(np.abs(v).max()) for k, v in table.items()}
    return {
        'duration_s': duration,
        'seed': seed,
        'noise': noise,
        'worst_relative_error_pct': worst,
        'delay_error_ms': 1e3 * delay_error,
        'goals_met': bool(
            all(worst[k] <= GOALS[k] for k in GOALS) and abs(delay_error) <= DELAY_GOAL
        ),  # fmt: skip
        'record_s': recorded - started,
        'fit_s': time.monotonic() - recorded,
        'output': output,
    }


def main(argv=None):
    """Parse the arguments, run once, print the JSON summary; exit 1 if a goal is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--duration', type=float, default=20.0, help='excitation (s)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument(
        '--noise', action='store_true', help='add 1 mrad / 0.1 N m white noise to the joint states'
    )
    parser.add_argument('--max-iters', type=int, default=30)
    parser.add_argument('--directory', help='keep the bag, YAML and report here')
    args = parser.parse_args(argv)
    noise = (1e-3, 0.1) if args.noise else None
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.directory or scratch
        os.makedirs(directory, exist_ok=True)
        summary = run(directory, args.duration, args.seed, noise, args.max_iters,
                      report=bool(args.directory))  # fmt: skip
    print(json.dumps(summary))
    return 0 if summary['goals_met'] or args.noise else 1


if __name__ == '__main__':
    sys.exit(main())
