"""`make finetune-demo`: online SAC fine-tuning on a perturbed simulated ANYmal, measured.

Starts `loco-launch` with sim_robot perturbed (default: a 2 kg payload on the base, which the
shipped policy tracks about 8 % worse than the nominal robot without falling; --gain-scale
weakens the drives), policy_node with behaviour noise, the recorder and sac_finetune
(warm-started from the shipped policy, candidates signed with a fresh key). As an operator:
stands the robot up once the learner is up, walks it on a repeating command schedule, resets
and restarts it after any fault, and logs /policy/status and sac_finetune's /diagnostics. After
`--minutes` of robot data it stops the stack and evaluates, paired (same perturbed robot, same
fixed schedule, same seeds, `loco-train eval`'s evaluate), the frozen policy against the
candidates the robot accepted (`--curve-points` of them, evenly spread, the last always); and
the last one against the frozen policy on the unperturbed
robot. Prints a table, writes finetune_curve.png (tracking error against minutes of robot data)
and ends with one JSON line.

With --stack-episodes the frozen policy, the one active at the end and --stack-points
candidates between are evaluated again on the stack itself (loco_train.experiments.stack_eval:
sim_robot with the same perturbation and policy_node over DDS, no exploration), the robot the
learner saw: MuJoCo's own loop applies a command delay exactly, the stack adds the sample's age,
the tick phase and transport to it. When it runs, the goal is judged on it.

Tracking error: the evaluation's mean planar-velocity error (m/s) plus its mean yaw-rate error
(rad/s) over the schedule's segments, after each segment's settling time.
"""

import argparse
import json
import os
import sys
import time

from loco_policy.tools import command_schedule

SCHEDULE = (
    'stand:2:0,0,0;forward:6:0.8,0,0;stand:2:0,0,0;turn:5:0,0,0.8;stand:2:0,0,0;'
    'sideways:5:0,0.5,0;stand:2:0,0,0;back:4:-0.4,0,0'
)
"""The repeating command schedule the robot walks while fine-tuning (28 s a round; it differs
from the evaluation's fixed schedule in order, speeds and the backward segment)."""

GOAL = 0.30
"""Relative reduction of the tracking error the fine-tuned policy should reach."""


def tracking_error(summary):
    """Planar (m/s) plus yaw-rate (rad/s) mean error of an evaluate() summary."""
    return float(summary['mean_lin_err'] + summary['mean_yaw_err'])


def write_config(out, args):
    """sac_finetune's parameter file for the demo: the shipped config with the demo's choices."""
    import yaml

    from loco_policy.bringup.launch_graph import config_dir

    with open(os.path.join(config_dir(), 'sac_finetune.yaml')) as handle:
        config = yaml.safe_load(handle)
    params = config['sac_finetune']['ros__parameters']
    params.update(
        policy_dir=os.path.join(out, 'policies'),
        export_every=int(args.export_every),
        cpu_affinity=args.learner_cpu,
    )
    for item in args.set:
        name, _, value = item.partition('=')
        params[name] = yaml.safe_load(value)
    path = os.path.join(out, 'sac_finetune.yaml')
    with open(path, 'w') as handle:
        yaml.safe_dump(config, handle)
    return path


class Faults:
    """DAMP entries seen in policy_node's status, split at the robot's first WALK (ROS-free).

    Fine-tuning begins with the first WALK (the first transition it learns from); a fault
    latched before it, while the stack was still coming up in PASSIVE, is kept apart.
    """

    def __init__(self):
        """No mode seen yet."""
        self.start_up, self.while_fine_tuning = [], []  # fault reasons
        self.walked, self.last_mode = False, None

    def seen(self, mode, fault):
        """policy_node's mode and latched fault (str) at one poll."""
        self.walked = self.walked or mode == 'WALK'
        if mode == 'DAMP' and self.last_mode != 'DAMP':
            (self.while_fine_tuning if self.walked else self.start_up).append(str(fault))
        self.last_mode = mode


class Watch:
    """Status, diagnostics and falls seen while fine-tuning."""

    def __init__(self, op):
        """Subscribe to /diagnostics on the operator's node."""
        from diagnostic_msgs.msg import DiagnosticArray

        self.op, self.learner = op, {}
        self.faults, self.versions = Faults(), []
        op.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 10)

    @property
    def damp_events(self):
        """DAMP entries since the first WALK."""
        return len(self.faults.while_fine_tuning)

    def _on_diag(self, msg):
        for status in msg.status:
            if status.name == 'sac_finetune':
                self.learner = {kv.key: kv.value for kv in status.values}

    def poll(self):
        """Track mode changes into DAMP and newly active policy versions."""
        self.faults.seen(self.op.status.get('mode'), self.op.status.get('fault'))
        version = self.op.status.get('policy_version')
        if version is not None and (not self.versions or self.versions[-1] != version):
            self.versions.append(version)


def walk(op, watch, stack, minutes, say):
    """Walk the repeating schedule until `minutes` of WALK transitions were published."""
    from loco_policy.tools.demo import start_standing

    schedule = command_schedule.parse(SCHEDULE)
    total = sum(segment.duration for segment in schedule)
    start, walking_since, last_report = time.monotonic(), None, 0.0
    target = minutes * 60.0 * 50.0  # transitions at 50 Hz
    while True:
        if stack.poll() is not None:
            raise RuntimeError(f'the stack stopped (exit code {stack.returncode}) mid-run')
        watch.poll()
        mode = op.status.get('mode')
        if mode != 'WALK':
            if mode == 'DAMP':
                fault = str(op.status.get('fault'))
                say(f'  fault: {fault}; reset')
                if 'tilt' in fault:  # fallen over: put the simulated robot back on its feet
                    op.call('/sim_robot/reset')
                    op.spin(1.0)
                op.call('reset')
                op.spin(0.5)
            ok, _ = start_standing(op, lambda *_: None)
            op.spin(1.0)
            op.call('start')
            op.spin(0.2)
            walking_since = time.monotonic()
            continue
        t = (time.monotonic() - walking_since) % total
        _, command = command_schedule.at(schedule, t)
        op.command(*command)
        op.spin(0.05)
        learned = int(watch.learner.get('transitions_learned', 0))
        now = time.monotonic() - start
        if now - last_report > 30.0:
            last_report = now
            say(
                f'  {now / 60:5.1f} min: robot data {learned / 3000:5.2f} min, updates '
                f'{watch.learner.get("updates", 0)} ({watch.learner.get("updates_per_s", 0)}/s), '
                f'policy version {op.status.get("policy_version")}, updates '
                f'{op.status.get("updates", {})}'
            )
        if learned >= target:
            return


def evaluate_candidates(out, frozen, candidates, seeds, perturbation, say):
    """Paired evaluation of the frozen policy and each candidate on the perturbed robot."""
    from loco_train.experiments.evaluate import EvalConfig, evaluate

    config = EvalConfig(seeds=seeds, **perturbation)
    rows = []
    for label, path, minutes in [('frozen', frozen, 0.0), *candidates]:
        summary = evaluate(path, config)
        rows.append(
            {
                'policy': label,
                'path': path,
                'robot_minutes': minutes,
                'tracking_error': tracking_error(summary),
                'lin_err': summary['mean_lin_err'],
                'yaw_err': summary['mean_yaw_err'],
                'falls': summary['falls'],
            }
        )
        say(f'  {label:>10}: tracking error {rows[-1]["tracking_error"]:.3f} ({minutes:.1f} min)')
    return rows


LOOP_FIGURES = (
    'ticks',
    'stalls',
    'longest_stall_ms',
    'jitter_p99_ms',
    'jitter_max_ms',
    'state_age_p99_ms',
)
"""policy_node's run-summary figures the result carries (stalls: the node's own, see
loco_policy/nodes/policy_node.py)."""


def loop_figures(path):
    """LOOP_FIGURES from policy_node's run summary at path; None where it wrote none."""
    try:
        with open(path) as handle:
            summary = json.load(handle)
    except (OSError, ValueError):
        return None
    return {key: summary[key] for key in LOOP_FIGURES if key in summary}


def judge(frozen, final, nominal, damp_events, on):
    """The goal's verdict from a paired evaluation (ROS-free).

    frozen, final: rows (tracking_error, falls) of the frozen and the fine-tuned policy on the
    perturbed robot; nominal: the same two on the unperturbed robot, or None; a row None or
    with tracking_error None was not measured, and the goal is then not reached. on: where
    the rows come from. Returns {on, reached, reduction, nominal_change, not_met}.
    """
    pairs = [frozen, final, *(nominal or [None, None])]
    if any(r is None or r.get('tracking_error') is None for r in pairs):
        return {'on': on, 'reached': False, 'reduction': None, 'nominal_change': None,
                'not_met': ['measured']}  # fmt: skip
    reduction = 1.0 - final['tracking_error'] / frozen['tracking_error']
    nominal_change = nominal[1]['tracking_error'] / nominal[0]['tracking_error'] - 1.0
    conditions = {
        f'{int(GOAL * 100)} % lower tracking error': reduction >= GOAL,
        'no fall in evaluation': final['falls'] == 0,
        'no DAMP while fine-tuning': damp_events == 0,
        'no loss on the unperturbed robot': nominal_change <= 0.0,
        'no fall on the unperturbed robot': nominal[1]['falls'] == 0,
    }
    return {
        'on': on,
        'reached': all(conditions.values()),
        'reduction': round(reduction, 4),
        'nominal_change': round(nominal_change, 4),
        'not_met': [name for name, met in conditions.items() if not met],
    }


def evaluate_on_stack(out, policies, episodes, perturbation, say, schedule, label='perturbed'):
    """The policies (name, path, robot minutes) evaluated one by one on a fresh stack each.

    schedule: the stack evaluation's, 'name:seconds:vx,vy,wz;...' ('' = the evaluation's).
    """
    from loco_train.experiments import stack_eval

    schedule = stack_eval.parse_schedule(schedule)
    rows = []
    for index, (name, path, minutes) in enumerate(policies):
        try:
            summary = stack_eval.evaluate_on_stack(
                path, perturbation, episodes,
                os.path.join(out, 'stack_eval', f'{label}_{index:02d}_{name}'), lambda text: None,
                schedule,
            )  # fmt: skip
        except Exception as error:  # the run's other results stand; say why this one is missing
            say(f'  {name:>10}: no evaluation on the stack: {error}')
            rows.append({'policy': name, 'path': path, 'robot_minutes': minutes,
                         'tracking_error': None, 'error': str(error)})  # fmt: skip
            continue
        rows.append(
            {
                'policy': name,
                'path': path,
                'robot_minutes': minutes,
                'tracking_error': tracking_error(summary),
                'lin_err': summary['mean_lin_err'],
                'yaw_err': summary['mean_yaw_err'],
                'falls': summary['falls'],
                'faults': summary['faults'],
            }
        )
        say(f'  {name:>10}: on the stack {rows[-1]["tracking_error"]:.3f}, '
            f'{summary["falls"]} falls in {episodes} ({minutes:.1f} min)')  # fmt: skip
    return rows


def candidate_list(policy_dir, accepted):
    """(label, path, robot minutes) of the policy files whose version the robot made active."""
    from loco_policy.policy_file import OnnxPolicy, PolicyFileError

    out = []
    for name in sorted(os.listdir(policy_dir)) if os.path.isdir(policy_dir) else []:
        if name.startswith('.') or not name.endswith('.onnx'):  # e.g. a killed export's temp
            continue
        path = os.path.join(policy_dir, name)
        try:
            provenance = OnnxPolicy(path, warmup=0).contract.provenance
        except PolicyFileError:
            continue
        if provenance.get('version') in accepted:
            minutes = provenance.get('robot_transitions', 0) / 3000.0
            out.append((f'v{provenance["version"]}', path, minutes))
    return out


def thin(candidates, points):
    """At most `points` candidates, evenly spread over the list, the last one always kept."""
    if points <= 0 or len(candidates) <= points:
        return candidates
    step = len(candidates) / points
    return [candidates[min(len(candidates) - 1, round((i + 1) * step) - 1)] for i in range(points)]


def plot(rows, path, goal_error, end=None, stack_rows=None):
    """Tracking error against minutes of robot data.

    end: (minutes, error) of the policy active when the run stopped, drawn on from the last row.
    stack_rows: the same policies evaluated on the stack (drawn as a second line), or None.
    """
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    minutes = [r['robot_minutes'] for r in rows]
    ax.plot(
        minutes,
        [r['tracking_error'] for r in rows],
        'o-',
        label="in MuJoCo's own loop (loco-train eval)",
    )
    if end is not None and end[0] > minutes[-1]:
        ax.plot(
            [minutes[-1], end[0]], [end[1], end[1]], color='C0', ls=':', label='active to the end'
        )
    ax.axhline(rows[0]['tracking_error'], color='grey', ls='--', label='frozen policy')
    if stack_rows:
        minutes = [r['robot_minutes'] for r in stack_rows]
        errors = [r['tracking_error'] for r in stack_rows]
        ax.plot(minutes, errors, 's-', color='C3', label='on the stack (DDS)')
        ax.axhline(stack_rows[0]['tracking_error'], color='C3', ls='--', alpha=0.5,
                   label='frozen, on the stack')  # fmt: skip
        ax.axhline(stack_rows[0]['tracking_error'] * (1.0 - GOAL), color='C3', ls=':', alpha=0.5)
    ax.axhline(goal_error, color='green', ls=':', label=f'goal ({int(GOAL * 100)} % lower)')
    ax.set_xlabel('robot data (min at 50 Hz)')
    ax.set_ylabel('tracking error (m/s + rad/s)')
    ax.set_title('Online SAC fine-tuning on the perturbed simulated ANYmal')
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args):
    """Run the demo and its measurement; return (exit code, result)."""
    from loco_policy.nodes.policy_node import SHIPPED_POLICY
    from loco_policy.tools.demo import Operator, stop_stack

    out = os.path.abspath(args.out or time.strftime('runs/finetune_%Y%m%d_%H%M%S'))
    if os.path.isdir(out) and os.listdir(out):  # a store there would resume, not start fresh
        raise SystemExit(f'finetune demo: {out} is not empty; give a new --out')
    os.makedirs(out, exist_ok=True)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    os.environ.setdefault('ROS_DOMAIN_ID', str(60 + os.getpid() % 40))
    say = lambda text: print(text, flush=True)  # noqa: E731
    key = os.path.join(out, 'update.key')
    with open(key, 'wb') as handle:
        handle.write(os.urandom(32))
    store = os.path.join(out, 'store')
    frozen_policy = os.path.abspath(args.policy) if args.policy else SHIPPED_POLICY
    perturbation = {
        'payload': args.payload,
        'gain_scale': args.gain_scale,
        'latency': args.latency,
    }
    say(
        f'finetune demo: {args.minutes} min of robot data on sim_robot with {perturbation}; '
        f'output {out}'
    )
    argv = [
        sys.executable, '-m', 'loco_policy.bringup.launcher', 'record:=true',
        f'bag:={os.path.join(out, "bag")}', 'finetune:=true', f'update_key:={key}',
        f'store:={store}', f'finetune_config:={write_config(out, args)}',
        f'payload:={args.payload}', f'gain_scale:={args.gain_scale}', f'latency:={args.latency}',
        f'exploration:={args.exploration}', f'policy:={frozen_policy}',
        f'stats_file:={os.path.join(out, "policy_node_stats.json")}',
    ]  # fmt: skip
    import subprocess

    log = open(os.path.join(out, 'launch.log'), 'wb')
    from loco_policy.bringup.launcher import die_with_parent

    stack = subprocess.Popen(  # its nodes die with it; it dies with this process (even SIGKILL)
        argv, stdout=log, stderr=subprocess.STDOUT, process_group=0, preexec_fn=die_with_parent
    )
    op = Operator()
    watch = Watch(op)
    started = time.monotonic()
    try:
        deadline = time.monotonic() + 60.0
        while not op.inputs_fresh() and time.monotonic() < deadline and stack.poll() is None:
            op.spin(0.1)
        if not op.inputs_fresh():
            raise RuntimeError(f'the stack did not come up (see {out}/launch.log)')
        while not watch.learner and time.monotonic() < deadline + 60.0:  # torch takes a while
            op.spin(0.2)
        if not watch.learner:
            raise RuntimeError(f'sac_finetune did not come up (see {out}/launch.log)')
        walk(op, watch, stack, args.minutes, say)
        op.call('stop')
        op.spin(2.0)
        status = dict(op.status)
    finally:
        op.close()
        code = stop_stack(stack)
        log.close()
    wall = time.monotonic() - started
    accepted = set(watch.versions[1:])  # the first is the policy the robot started with
    every = candidate_list(os.path.join(out, 'policies'), accepted)
    candidates = thin(every, args.curve_points)
    # the fine-tuned policy is the one active at the end (a rollback may have replaced the last)
    end_label = f'v{watch.versions[-1]}' if len(watch.versions) > 1 else 'frozen'
    end = [c for c in every if c[0] == end_label]
    if end and end[0] not in candidates:
        candidates = sorted(candidates + end, key=lambda c: c[2])
    say(f'evaluating the frozen policy and {len(candidates)} accepted candidates, paired:')
    rows = evaluate_candidates(out, frozen_policy, candidates, args.eval_seeds, perturbation, say)
    frozen = rows[0]
    final = next((r for r in rows if r['policy'] == end_label), frozen)
    goal_error = frozen['tracking_error'] * (1.0 - GOAL)
    nominal = None
    if end:
        nominal = evaluate_candidates(out, frozen_policy, end, args.eval_seeds,
                                      {'payload': 0.0, 'gain_scale': 1.0, 'latency': 0.0},
                                      say)  # fmt: skip
    stack_rows = stack_nominal = None
    if args.stack_episodes > 0:
        between = [c for c in candidates if c not in end]
        chosen = thin(between, args.stack_points) if args.stack_points > 0 else []
        say(f'evaluating the frozen policy and {len(chosen) + len(end)} candidates on the stack:')
        stack_rows = evaluate_on_stack(
            out, [('frozen', frozen_policy, 0.0), *chosen, *end], args.stack_episodes,
            perturbation, say, args.stack_schedule,
        )  # fmt: skip
        if end:
            say('and on the unperturbed stack:')
            stack_nominal = evaluate_on_stack(
                out, [('frozen', frozen_policy, 0.0), *end], args.stack_episodes,
                {'payload': 0.0, 'gain_scale': 1.0, 'latency': 0.0}, say, args.stack_schedule,
                label='nominal',
            )  # fmt: skip
    # walk() returned: args.minutes of robot data were recorded; no line for a missing file
    ending = (args.minutes, final['tracking_error']) if end or end_label == 'frozen' else None
    drawn = [r for r in stack_rows or [] if r['tracking_error'] is not None]
    drawn = drawn if drawn and drawn[0]['policy'] == 'frozen' else None
    plot(rows, os.path.join(out, 'finetune_curve.png'), goal_error, ending, drawn)
    reduction = 1.0 - final['tracking_error'] / frozen['tracking_error']
    if stack_rows is None:
        verdict = judge(frozen, final, nominal, watch.damp_events, 'loco-train eval')
    else:
        stack_final = next((r for r in stack_rows if r['policy'] == end_label), None)
        verdict = judge(stack_rows[0], stack_final, stack_nominal, watch.damp_events, 'stack')
    stack = None
    if stack_rows is not None:
        stack = {
            'episodes': args.stack_episodes,
            'rows': stack_rows,
            'nominal_rows': stack_nominal,
        }
    result = {
        'minutes_of_robot_data': args.minutes,
        'wall_s': round(wall, 1),
        'perturbation': perturbation,
        'frozen_tracking_error': round(frozen['tracking_error'], 4),
        'finetuned_tracking_error': round(final['tracking_error'], 4),
        'reduction': round(reduction, 4),
        'goal_reached': verdict['reached'],
        'goal': verdict,  # where it was judged, its figures, the conditions not met
        'stack': stack,
        'damp_while_finetuning': watch.damp_events,
        'faults': {  # reasons; start_up: latched before the first WALK
            'start_up': watch.faults.start_up,
            'while_fine_tuning': watch.faults.while_fine_tuning,
        },
        'falls_in_evaluation': final['falls'],
        'accepted_versions': sorted(accepted),
        'active_at_end': final['policy'],
        'rejections': status.get('updates', {}),
        'nominal': None
        if nominal is None
        else {r['policy']: round(r['tracking_error'], 4) for r in nominal},  # fmt: skip
        'learner': watch.learner,
        'control_loop': loop_figures(os.path.join(out, 'policy_node_stats.json')),
        'curve': os.path.join(out, 'finetune_curve.png'),
        'stack_exit': code,
    }
    say(f'{"policy":>10} {"robot min":>9} {"tracking err":>12} {"falls":>5}')
    for r in rows:
        say(f'{r["policy"]:>10} {r["robot_minutes"]:9.1f} {r["tracking_error"]:12.3f} '
            f'{r["falls"]:5d}')  # fmt: skip
    for label, stacked in (('stack', stack_rows), ('stack, unperturbed', stack_nominal)):
        for r in stacked or []:
            error = 'n/a' if r['tracking_error'] is None else f'{r["tracking_error"]:.3f}'
            say(f'{r["policy"]:>10} {r["robot_minutes"]:9.1f} {error:>12} '
                f'{r.get("falls", "-")!s:>5}  ({label})')  # fmt: skip
    if code != 0:  # name the node that did not stop cleanly, and what it printed last
        with open(os.path.join(out, 'launch.log'), errors='replace') as handle:
            say('the stack did not stop cleanly; the end of launch.log:')
            say(''.join(handle.readlines()[-40:]))
    say(json.dumps(result))
    return (0 if code == 0 else 1), result


def main(argv=None):
    """`python -m loco_train.experiments.finetune_demo [--minutes M] [--out DIR]`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--minutes', type=float, default=3.0, help='minutes of robot data')
    parser.add_argument(
        '--out', default='', help='output directory, new or empty (default runs/finetune_<time>)'
    )
    parser.add_argument(
        '--policy', default='', help='the policy the robot starts with and the frozen baseline '
        '(default: the shipped SHAC file); warm-start sac_finetune to match with --set warm_start='
    )  # fmt: skip
    parser.add_argument('--payload', type=float, default=2.0, help="kg on sim_robot's base")
    parser.add_argument('--gain-scale', type=float, default=1.0, help='kp, kd multiplier')
    parser.add_argument('--latency', type=float, default=0.0, help="sim_robot's command delay (s)")
    parser.add_argument(
        '--exploration', type=float, default=0.05, help="policy_node's exploration_std"
    )
    parser.add_argument('--eval-seeds', type=int, default=5, help='evaluation episodes')
    parser.add_argument(
        '--curve-points', type=int, default=12, help='accepted candidates evaluated (0: all)'
    )
    parser.add_argument('--export-every', type=int, default=3750, help='updates per candidate')
    parser.add_argument('--learner-cpu', default='', help="sac_finetune's CPU ids, e.g. '1'")
    parser.add_argument(
        '--stack-episodes', type=int, default=0,
        help='episodes per policy of the evaluation on the stack itself (0: none)',
    )  # fmt: skip
    parser.add_argument(
        '--stack-points', type=int, default=4,
        help='candidates between the frozen and the last evaluated on the stack',
    )  # fmt: skip
    parser.add_argument(
        '--stack-schedule', default='',
        help="the stack evaluation's schedule 'name:seconds:vx,vy,wz;...' (default: the "
        "evaluation's)",
    )  # fmt: skip
    parser.add_argument(
        '--set', action='append', default=[], metavar='NAME=VALUE',
        help='override a sac_finetune parameter (repeatable), e.g. actor_lr=1e-4',
    )  # fmt: skip
    args = parser.parse_args(argv)
    from loco_train.experiments.stack_eval import parse_schedule

    try:  # before the run, not after its minutes
        parse_schedule(args.stack_schedule)
    except ValueError as error:
        parser.error(f'--stack-schedule: {error}')
    code, _ = run(args)
    return code


if __name__ == '__main__':
    sys.exit(main())
