"""The fine-tuning loop without ROS, faster than real time: for choosing its settings.

    python -m loco_train.experiments.finetune_offline --minutes 10 --gain-scale 0.75 \
        --warm-start checkpoints/sac_anymal_paper/checkpoint.pt --out DIR

The same parts as the robot's loop, in one process and one thread: MuJoCo with the demo's
perturbation in place of sim_robot, the deployment Controller with behaviour noise (what
policy_node runs), the repeating schedule of `make finetune-demo`, rows packed and read back
through loco_policy.transition and TransitionAssembler, FineTuner learning every update the
update-to-data ratio owes after each tick (the robot never waits for it: here the robot waits, so
the learner is never behind), candidates exported as ONNX every `export_every` updates and
checked with hot_swap.action_check against the running policy before the Controller swaps them
in. Every `--eval-every` minutes of robot data the running policy is scored with `loco-train
eval`'s episode on the perturbed robot (paired seeds); at the end on the nominal robot too.
Writes rows.jsonl, curve.png and a JSON last line. Not a test of DDS or of the node: the demo
(`finetune_demo`) is the measurement.
"""

import argparse
import dataclasses
import json
import os
import sys
import time

import numpy as np

from loco_policy import spec
from loco_train.experiments.finetune_demo import SCHEDULE, tracking_error

ROWS_PER_MESSAGE = 10
"""Rows per /replay/transitions message, as policy_node batches them."""


def parse_args(argv=None):
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        '--warm-start',
        default='checkpoints/sac_anymal_paper/checkpoint.pt',
        help='SAC checkpoint.pt or policy .onnx',
    )
    p.add_argument('--prior-replay', default='', help='replay.pt (sac --save-replay): prior')
    p.add_argument('--minutes', type=float, default=10.0, help='minutes of robot data')
    p.add_argument('--payload', type=float, default=0.0, help='kg on the base')
    p.add_argument(
        '--gain-scale', type=float, default=1.0, help='multiplier on kp and kd (< 1: weaker)'
    )
    p.add_argument('--latency', type=float, default=0.0, help='s from command to drives')
    p.add_argument('--exploration', type=float, default=0.05, help='behaviour noise std')
    p.add_argument('--export-every', type=int, default=2000, help='updates between candidates')
    p.add_argument('--eval-every', type=float, default=2.0, help='minutes of data between evals')
    p.add_argument('--eval-seeds', type=int, default=3)
    p.add_argument(
        '--eval-phase-jitter', type=float, default=0.0,
        help="s: the evaluations' per-seed shift of the command changes (loco-train eval's)",
    )  # fmt: skip
    p.add_argument(
        '--sensor-noise', action=argparse.BooleanOptionalAction, default=True,
        help="noise on the robot's and the evaluations' measured velocities (--no-sensor-noise: "
        'exact, as sim_robot sends them; the nominal gate keeps its own)',
    )  # fmt: skip
    p.add_argument(
        '--reward',
        action='append',
        default=None,
        help="reward weight NAME=VALUE of the warm start's training (repeatable)",
    )
    p.add_argument('--set', action='append', default=[], help='FinetuneConfig NAME=VALUE')
    p.add_argument('--max-action-deviation', type=float, default=1.0)
    p.add_argument('--max-mean-action-deviation', type=float, default=0.3)
    p.add_argument(
        '--gate-seeds',
        type=int,
        default=0,
        help='episodes on the nominal simulated robot a candidate must walk without a fall and '
        'within --gate-margin of the frozen policy before the robot gets it (0: no gate); a '
        "rejected candidate's actor is reset to the running policy's",
    )
    p.add_argument('--gate-margin', type=float, default=0.25)
    p.add_argument(
        '--gate-sensor-noise', action=argparse.BooleanOptionalAction, default=True,
        help="noise on the gate's measured velocities (--no-gate-sensor-noise: the stack's)",
    )  # fmt: skip
    p.add_argument(
        '--gate-phase-jitter', type=float, default=0.0,
        help="s: the gate episodes' per-seed shift of the command changes",
    )  # fmt: skip
    p.add_argument(
        '--sim-share', type=float, default=0.0,
        help='co-training: the unperturbed MuJoCo robot walks the running policy beside the '
        'robot, tick for tick, on the same repeating schedule on its own clock, and this share '
        'of every batch comes from its transitions (FinetuneConfig sim_share; 0: off)',
    )  # fmt: skip
    p.add_argument(
        '--no-follow-robot',
        dest='follow_robot',
        action='store_false',
        help="keep learning from a candidate the swap check rejected (sac_finetune's "
        "follow_robot false); by default its actor is reset to the running policy's",
    )
    p.add_argument(
        '--gate-follow', action=argparse.BooleanOptionalAction, default=True,
        help="reset the actor to the running policy's after the nominal gate refuses a "
        'candidate (--no-gate-follow: the learner keeps its actor; the robot keeps its policy)',
    )  # fmt: skip
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--threads', type=int, default=1)
    p.add_argument(
        '--compare',
        action='append',
        default=[],
        metavar='LABEL=ROWS',
        help="draw runs' rows.jsonl in one figure, OUT (a .png), and exit (repeatable)",
    )
    p.add_argument('--out', required=True)
    return p.parse_args(argv)


def finetune_config(items):
    """FinetuneConfig from NAME=VALUE strings (types of the defaults)."""
    import yaml

    from loco_train.finetune.learner import FinetuneConfig

    defaults, values = FinetuneConfig(), {}
    for item in items:
        name, _, text = item.partition('=')
        if not hasattr(defaults, name):
            raise SystemExit(f'FinetuneConfig has no field {name!r}')
        value, default = yaml.safe_load(text), getattr(defaults, name)
        if isinstance(value, list):
            value = tuple(value)
        elif isinstance(default, (int, float)) and not isinstance(default, bool):
            value = type(default)(float(value))  # yaml reads 3e-5 as a string
        values[name] = value
    try:
        return dataclasses.replace(defaults, **values)
    except ValueError as error:
        raise SystemExit(f'finetune_offline: --set: {error}') from None


def score(path, perturbation, seeds, phase_jitter=0.0):
    """evaluate() of a policy file on a perturbed robot: (tracking error, summary)."""
    from loco_train.experiments.evaluate import EvalConfig, evaluate

    config = EvalConfig(seeds=seeds, phase_jitter=phase_jitter, **perturbation)
    summary = evaluate(path, config)
    return tracking_error(summary), summary


def plot(rows, path, frozen, runs=None):
    """Tracking error against minutes of robot data; runs: {label: rows} drawn together."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    runs = runs or {'running policy, perturbed robot': rows}
    many = len(runs) > 4  # the legend then goes beside the axes, not over the curves
    fig, ax = plt.subplots(figsize=(9, 3.8) if many else (6, 3.5))
    for label, run in runs.items():
        minutes = [r['robot_minutes'] for r in run]
        line = ax.plot(minutes, [r['tracking_error'] for r in run], 'o-', ms=3, label=label)[0]
        falls = [r for r in run if r.get('falls')]  # evaluations with a fall: open markers
        ax.plot(
            [r['robot_minutes'] for r in falls],
            [r['tracking_error'] for r in falls],
            'o', ms=8, mfc='none', color=line.get_color(),
        )  # fmt: skip
    if any(r.get('falls') for run in runs.values() for r in run):
        ax.plot([], [], 'o', ms=8, mfc='none', color='grey', label='a fall in the evaluation')
    ax.axhline(frozen, color='grey', ls='--', label='frozen')
    ax.axhline(0.7 * frozen, color='green', ls=':', label='30 % lower')
    ax.set_xlabel('robot data (min)')
    ax.set_ylabel('tracking error (m/s + rad/s)')
    if many:
        ax.legend(fontsize=8, loc='upper left', bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def compare(items, path):
    """Draw LABEL=ROWS runs (each run's rows.jsonl) in one figure at path."""
    runs = {}
    for item in items:
        label, _, rows_path = item.rpartition('=')
        with open(rows_path) as handle:
            runs[label or rows_path] = [json.loads(line) for line in handle if line.strip()]
    # the frozen policy: version 1, the warm start exported as is (the first run's first such row)
    rows = next(iter(runs.values()))
    frozen = next(r['tracking_error'] for r in rows if r['version'] == 1)
    plot(None, path, frozen, runs)
    print(json.dumps({'figure': path, 'runs': list(runs), 'frozen': frozen}))


def main(argv=None):
    """Run the loop; print progress to stderr and one JSON line to stdout."""
    import torch

    from loco_policy.control import hot_swap
    from loco_policy.policy_file import OnnxPolicy
    from loco_policy.transition import pack_rows
    from loco_train.experiments.evaluate import EvalConfig, NO_NOISE
    from loco_train.finetune import learner
    from loco_train.finetune.gate import GateRefused, NominalGate
    from loco_train.finetune.ingest import TransitionAssembler
    from loco_train.finetune.regression import RegressionGuard
    from loco_train.finetune.reward import weights_from_overrides
    from loco_train.finetune.walker import Walker

    args = parse_args(argv)
    if args.compare:
        return compare(args.compare, args.out)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    config = finetune_config(args.set)
    try:
        config = dataclasses.replace(config, sim_share=args.sim_share or config.sim_share)
    except ValueError as error:
        raise SystemExit(f'finetune_offline: --sim-share: {error}') from None
    if str(args.warm_start).endswith('.onnx'):
        tuner = learner.FineTuner.from_onnx(args.warm_start, config)
    else:
        tuner = learner.FineTuner.from_checkpoint(
            args.warm_start, config, prior_replay=args.prior_replay or None
        )
    tuner.generator.manual_seed(args.seed)
    reward = args.reward if args.reward is not None else ['feet_air_time=0.125']
    weights = weights_from_overrides(reward)
    assembler = TransitionAssembler(weights)
    for flag, jitter in (('eval', args.eval_phase_jitter), ('gate', args.gate_phase_jitter)):
        try:
            EvalConfig(phase_jitter=jitter)
        except ValueError as error:
            raise SystemExit(f'finetune_offline: --{flag}-phase-jitter: {error}') from None
    noise = {} if args.sensor_noise else dict(NO_NOISE)  # EvalConfig's sensor-noise fields
    perturbation = {
        'payload': args.payload,
        'gain_scale': args.gain_scale,
        'latency': args.latency,
        **noise,
    }
    jitter = args.eval_phase_jitter
    limits = hot_swap.SwapLimits(
        max_action_deviation=args.max_action_deviation,
        max_mean_action_deviation=args.max_mean_action_deviation,
    )

    def export():
        path = os.path.join(args.out, f'v{tuner.version + 1:03d}.onnx')  # the version it takes
        tuner.export(path)
        return path

    frozen_path = running_path = export()  # version 1: the warm start itself
    running_version = tuner.version
    robot = Walker(OnnxPolicy(frozen_path), perturbation, args.exploration, args.seed, SCHEDULE)
    sim = sim_assembler = None  # the unperturbed robot of --sim-share, and its rows' assembler
    sim_pending = []
    if config.sim_share > 0.0:
        sim = Walker(OnnxPolicy(frozen_path), noise, args.exploration, args.seed + 1, SCHEDULE)
        sim_assembler = TransitionAssembler(weights)
    gate = None
    if args.gate_seeds:
        gate = NominalGate(
            args.gate_seeds, args.gate_margin, frozen_path,
            sensor_noise=args.gate_sensor_noise, phase_jitter=args.gate_phase_jitter,
        )  # fmt: skip
    gated = 0
    guard = None
    if config.guard_rows > 0:
        guard = RegressionGuard(config.guard_rows, config.guard_margin, reference=running_version)
    start_id = robot.ctrl.policy_version
    judged = guard is None  # the running version's verdict is in: the next candidate may come
    frozen, _ = score(frozen_path, perturbation, args.eval_seeds, jitter)
    rows_out = [
        {'robot_minutes': 0.0, 'version': running_version, 'updates': 0, 'tracking_error': frozen}
    ]
    print(f'frozen: tracking error {frozen:.3f}', file=sys.stderr)
    with open(os.path.join(args.out, 'rows.jsonl'), 'w') as handle:  # a fresh file per run
        handle.write(json.dumps(rows_out[0]) + '\n')
    target = int(args.minutes * 60 / spec.CONTROL_DT)
    pending, recent, learned = [], [], 0
    next_eval, exported_at, rejected, began = args.eval_every, 0, 0, time.monotonic()
    metrics = {}
    while learned < target:
        for row in robot.step():
            pending.append(row)
            if row.mode == 'WALK' and robot.ctrl.policy_obs is not None:
                recent.append(np.asarray(robot.ctrl.policy_obs, dtype=np.float64))
        recent = recent[-100:]
        if sim is not None:
            sim_pending.extend(sim.step())
            if len(sim_pending) >= ROWS_PER_MESSAGE:
                sim_assembler.feed(*pack_rows(sim_pending), 0)
                sim_pending = []
                tuner.add_sim(sim_assembler.drain())
        if len(pending) >= ROWS_PER_MESSAGE:
            dims, data = pack_rows(pending)
            pending = []
            assembler.feed(dims, data, 0)
            done = assembler.drain()
            learned += tuner.add(done)
            if guard is not None and len(done['seq']):
                # the controller names the file it started with by its sha256, as policy_node
                versions = np.where(
                    done['policy_version'] == start_id, guard.reference, done['policy_version']
                )
                guard.add(versions, done['next_obs'], done['terminated'])
                verdict = None if judged else guard.judge(running_version)
                judged = judged or verdict is not None or guard.settled(running_version)
                if verdict is not None and verdict.regressed:
                    best = verdict.best_version
                    if tuner.follow(best, os.path.join(args.out, f'v{best:03d}.onnx')):
                        exported_at = -args.export_every  # the best one goes out again, now
                    print(f'  v{running_version} regressed: {verdict.reason}', file=sys.stderr)
        # as sac_finetune: a due candidate goes out before this tick's updates
        due = tuner.updates - exported_at >= args.export_every and not tuner.actor_frozen
        if due and judged:
            exported_at = tuner.updates
            candidate_path = export()
            candidate = OnnxPolicy(candidate_path)
            try:
                figures = hot_swap.action_check(candidate, robot.ctrl.policy, recent, limits)
                try:
                    if gate is not None:
                        gate.check(candidate_path)
                except GateRefused as reason:
                    gated += 1
                    if not args.gate_follow:  # learn on from the refused actor
                        raise hot_swap.UpdateRejected(f'gate: {reason}') from None
                    tuner.follow(running_version)  # learn on from the policy the robot runs
                    raise hot_swap.UpdateRejected(f'gate: {reason}; actor reset') from None
                robot.ctrl.swap_policy(candidate, tuner.version)
                if sim is not None:
                    sim.ctrl.swap_policy(OnnxPolicy(candidate_path), tuner.version)
                running_path, running_version = candidate_path, tuner.version
                judged = guard is None
                print(
                    f'  v{tuner.version} swapped in: deviation mean '
                    f'{figures["deviation_mean"]:.3f} max {figures["deviation_max"]:.3f}',
                    file=sys.stderr,
                )
            except hot_swap.UpdateRejected as error:
                rejected += 1
                reset = ''
                if args.follow_robot and not str(error).startswith('gate: '):
                    tuner.follow(running_version)  # as sac_finetune's follow_robot does
                    reset = '; actor reset'
                print(f'  v{tuner.version} rejected: {error}{reset}', file=sys.stderr)
        if tuner.update():
            metrics = tuner.metrics()
        minutes = learned * spec.CONTROL_DT / 60.0
        if minutes >= next_eval or learned >= target:
            next_eval += args.eval_every
            error, summary = score(running_path, perturbation, args.eval_seeds, jitter)
            rows_out.append(
                {
                    'robot_minutes': round(minutes, 2),
                    'version': running_version,  # the running policy's
                    'exported': tuner.version,
                    'updates': tuner.updates,
                    'tracking_error': error,
                    'falls': summary['falls'],
                    'robot_falls': robot.falls,
                    'sim_falls': sim.falls if sim is not None else None,
                    'sim_share': round(tuner.sim_share(), 4),
                    'anchor_distance': round(tuner.anchor_distance(), 6),
                    'metrics': metrics,
                }
            )
            if guard is not None and guard.last is not None:
                rows_out[-1]['guard'] = dataclasses.asdict(guard.last) | {'resets': guard.resets}
            print(
                f'{minutes:5.1f} min ({time.monotonic() - began:5.0f} s): updates '
                f'{tuner.updates}, running version {running_version}, error {error:.3f} '
                f'({error / frozen - 1:+.1%}), eval falls {summary["falls"]}, robot falls '
                f'{robot.falls}, q {metrics.get("value/q_mean", float("nan")):.3f} alpha '
                f'{metrics.get("alpha", float("nan")):.2e}',
                file=sys.stderr,
            )
            with open(os.path.join(args.out, 'rows.jsonl'), 'a') as handle:
                handle.write(json.dumps(rows_out[-1]) + '\n')
    last = rows_out[-1]
    nominal_frozen, _ = score(frozen_path, noise, args.eval_seeds, jitter)
    nominal_last, _ = score(running_path, noise, args.eval_seeds, jitter)
    plot(rows_out, os.path.join(args.out, 'curve.png'), frozen)
    result = {
        'frozen': frozen,
        'last': last['tracking_error'],
        'reduction': 1.0 - last['tracking_error'] / frozen,
        'best': min(r['tracking_error'] for r in rows_out),
        'nominal_frozen': nominal_frozen,
        'nominal_last': nominal_last,
        'robot_falls': robot.falls,
        'sim_falls': sim.falls if sim is not None else None,
        'rejected': rejected,
        'gated': gated,
        'guard_resets': guard.resets if guard is not None else None,
        'updates': tuner.updates,
        'args': vars(args),
    }
    with open(os.path.join(args.out, 'result.json'), 'w') as handle:
        handle.write(json.dumps(result) + '\n')
    print(json.dumps(result))


if __name__ == '__main__':
    main()
