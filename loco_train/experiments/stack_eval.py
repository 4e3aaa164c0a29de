"""The evaluation's episode on the running stack: policy files judged on the robot they run on.

`loco-train eval` steps the deployment Controller inside MuJoCo's own loop. On the stack
(sim_robot and policy_node over DDS) the same policy meets another robot: sensors on sim_robot's
publish grid, policy_node's tick timing, DDS, and commands taken in on that grid, and a policy
fine-tuned there adapts to that robot. This evaluates policy files on the stack itself:
loco-launch with sim_robot perturbed as given and policy_node without exploration noise, and per
episode the simulated robot reset, stood up and put in WALK, the evaluation's 20 s schedule
streamed on /cmd_vel, its tracking error computed from every /odom message as `loco-train eval`
computes it (mean absolute planar and yaw-rate errors per segment after SETTLE_S), a fall being
a base below fall_height, a tilt beyond fall_tilt or any exit from WALK. One stack per policy
file; the episodes differ by the stack's timing, not by a seed. Every command's delay from the
sample it was computed from to its first use by the drives (physics time, from sim_robot's
/joint_command/applied) is measured beside it.

    python -m loco_train.experiments.stack_eval FILE [FILE ...] --latency 0.03 --episodes 10
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

from loco_train.experiments.evaluate import EvalConfig, SCHEDULE, segment_errors, SETTLE_S

STAND_S = 1.0
"""Seconds in STAND before asking for WALK (policy_node refuses it until the pose is reached)."""


def parse_schedule(text):
    """(name, seconds, command) segments of 'name:seconds:vx,vy,wz;...'; '' is SCHEDULE.

    Raises ValueError for a malformed segment or a name used twice (errors are kept by name).
    """
    from loco_policy.tools import command_schedule

    if not text:
        return SCHEDULE
    schedule = tuple((s.name, s.duration, s.command) for s in command_schedule.parse(text))
    names = [name for name, _, _ in schedule]
    if len(set(names)) != len(names):
        raise ValueError(f'schedule segment names must differ: {names}')
    return schedule


def _tilt(w, x, y):
    """Angle between the base's z axis and the world's (rad) from a unit quaternion's w, x, y."""
    return math.acos(max(-1.0, min(1.0, 1.0 - 2.0 * (x * x + y * y)))) if w == w else math.pi


class Episodes:
    """Odometry and command timing of the episode in progress on the operator's node."""

    def __init__(self, op):
        """Subscribe to every /odom, /joint_states, /joint_command and applied command."""
        from nav_msgs.msg import Odometry
        from sensor_msgs.msg import JointState

        from loco_policy.nodes.sim_robot import APPLIED_TOPIC

        self.samples = None  # [(monotonic s, z m, vx, vy m/s, wz rad/s, tilt rad)] while recording
        self.stamps = []  # /joint_states header stamps (s, physics time)
        self.commands = []  # (/joint_command stamp s, positions (12,) tuple)
        self.applied = []  # (stamp s of the first physics step it drove, positions (12,) tuple)
        op.node.create_subscription(Odometry, '/odom', self._on_odom, 50)
        op.node.create_subscription(JointState, '/joint_states', self._on_state, 50)
        op.node.create_subscription(JointState, '/joint_command', self._on_command, 50)
        op.node.create_subscription(JointState, APPLIED_TOPIC, self._on_applied, 50)

    def _on_odom(self, msg):
        if self.samples is None:
            return
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        v, w = msg.twist.twist.linear, msg.twist.twist.angular
        self.samples.append((time.monotonic(), p.z, v.x, v.y, w.z, _tilt(q.w, q.x, q.y)))

    def _on_state(self, msg):
        if self.samples is not None:
            self.stamps.append(_seconds(msg.header.stamp))

    def _on_command(self, msg):
        if self.samples is not None:
            self.commands.append((_seconds(msg.header.stamp), tuple(msg.position)))

    def _on_applied(self, msg):
        if self.samples is not None:
            self.applied.append((_seconds(msg.header.stamp), tuple(msg.position)))

    def take_delays(self):
        """The episode's delays and tick periods (ms, see drive_delays); clears the timing."""
        delays = drive_delays(self.stamps, self.commands, self.applied)
        self.stamps, self.commands, self.applied = [], [], []
        return delays


def _seconds(stamp):
    """A builtin_interfaces/Time as float seconds."""
    return stamp.sec + 1e-9 * stamp.nanosec


def drive_delays(sample_stamps, commands, applied):
    """Delays (ms) from commands' samples to their first physics step (N,), tick periods (M,).

    The periods are the physics time (ms) between the samples of consecutive commands.

    sample_stamps: /joint_states stamps (s; sim_robot stamps a sample with its physics time).
    commands: (stamp s, positions) of /joint_command, stamped when policy_node sent it; its
    sample is the newest one stamped before that, which holds while a command leaves within one
    publish period (5 ms) of its sample (a later one is charged to the next sample, 5 ms short;
    policy_node's state_age in the row bounds it). applied: (stamp s, positions) of
    /joint_command/applied, one per publish period, stamped with the first physics step the
    command drove; a command's first appearance there counts. Commands matched by their
    positions; one never applied (the episode's last) or with no sample before it is left out.
    Clocks: sim_robot's physics time on the host's ROS clock (offset taken at each reset) and
    policy_node's ROS clock, one host.
    """
    stamps = np.sort(np.asarray(sample_stamps, dtype=np.float64))
    first = {}
    for stamp, positions in applied:
        first[positions] = min(stamp, first.get(positions, math.inf))
    delays, used = [], []
    for sent, positions in commands:
        k = int(np.searchsorted(stamps, sent, side='right')) - 1
        if k >= 0:
            used.append(stamps[k])
            if positions in first:
                delays.append(first[positions] - stamps[k])
    return np.asarray(delays, dtype=np.float64) * 1e3, np.diff(used) * 1e3


def _percentiles(values, size_key):
    """{size_key: N, min, p5, median, p95, max} of values (None without any)."""
    quantiles = (('min', 0), ('p5', 5), ('median', 50), ('p95', 95), ('max', 100))
    return {size_key: int(values.size), **{
        name: float(np.percentile(values, q)) if values.size else None for name, q in quantiles
    }}  # fmt: skip


def _state_age(path):
    """{p50, p99, max} (ms) of policy_node's state_age from its run summary (None if absent)."""
    try:
        with open(path) as handle:
            stats = json.load(handle)
        return {q: stats[f'state_age_{q}_ms'] for q in ('p50', 'p99', 'max')}
    except (OSError, ValueError, KeyError):
        return None


def _to_walk(op, say):
    """From any mode to WALK on a freshly reset robot; return True once walking."""
    from loco_policy.tools.demo import start_standing

    if op.status.get('mode') not in (None, 'PASSIVE', 'DAMP'):
        op.call('estop')
        op.spin(0.2)
    op.call('/sim_robot/reset')
    op.spin(1.0)
    if op.status.get('mode') == 'DAMP':
        op.call('reset')
        op.spin(0.5)
    ok, message = start_standing(op, lambda *_: None)
    if not ok:
        say(f'  could not stand: {message}')
        return False
    op.spin(STAND_S)
    for _ in range(20):  # STAND accepts WALK once the default pose is reached
        ok, message = op.call('start')
        op.spin(0.1)
        if ok:
            break
        op.spin(0.25)
    if not ok or op.status.get('mode') != 'WALK':
        say(f'  could not walk: {message} ({op.status.get("mode")})')
        return False
    return True


def run_episode(op, episodes, config, schedule=SCHEDULE):
    """Stream the schedule once in WALK; return the trace segment_errors reads, and the fall."""
    from loco_train.experiments.evaluate import schedule_command

    total = sum(seconds for _, seconds, _ in schedule)
    episodes.samples = []
    start = time.monotonic()
    fell, checked, fault = False, 0, None
    while time.monotonic() - start < total:
        _, command = schedule_command(time.monotonic() - start, schedule)
        op.command(*command)
        op.spin(0.05)
        new, checked = episodes.samples[checked:], len(episodes.samples)
        down = any(s[1] < config.fall_height or s[5] > config.fall_tilt for s in new)
        if op.status.get('mode') != 'WALK' or down:
            fell = True
            fault = str(op.status.get('fault')) if op.status.get('mode') == 'DAMP' else 'fallen'
            break
    samples, episodes.samples = episodes.samples, None
    rows = [s for s in samples if s[0] >= start]
    t = np.array([s[0] - start for s in rows])
    trace = {
        't': t,
        'segment': np.array([schedule_command(x, schedule)[0] for x in t], dtype=int),
        'command': np.array([schedule_command(x, schedule)[1] for x in t]).reshape(-1, 3),
        'lin_vel': np.array([s[2:4] for s in rows]).reshape(-1, 2),
        'ang_vel': np.array([s[4] for s in rows]),
        'height': np.array([s[1] for s in rows]),
        'fell': fell,
        'fault': fault,  # policy_node's DAMP reason, 'fallen' (height or tilt), or None
    }
    return trace


def evaluate_on_stack(policy, perturbation, episodes, out, say=print, schedule=SCHEDULE):
    """Evaluate one policy file on a fresh stack; return a summary like evaluate()'s.

    perturbation: sim_robot's payload (kg), gain_scale and latency (s). out: a directory for the
    stack's log and policy_node's run summary.
    """
    from loco_policy.bringup.launcher import die_with_parent
    from loco_policy.tools.demo import Operator, stop_stack

    os.makedirs(out, exist_ok=True)
    config = EvalConfig(seeds=episodes)
    argv = [
        sys.executable, '-m', 'loco_policy.bringup.launcher', 'record:=false',
        f'policy:={os.path.abspath(policy)}', 'exploration:=0',
        f'payload:={perturbation.get("payload", 0.0)}',
        f'gain_scale:={perturbation.get("gain_scale", 1.0)}',
        f'latency:={perturbation.get("latency", 0.0)}', 'applied:=true',
        f'stats_file:={os.path.join(out, "policy_node_stats.json")}',
    ]  # fmt: skip
    log = open(os.path.join(out, 'launch.log'), 'wb')
    stack = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, process_group=0, preexec_fn=die_with_parent
    )
    op = None
    per_episode, falls, faults, delays, periods = [], 0, [], [], []
    try:
        op = Operator()
        recorder = Episodes(op)
        deadline = time.monotonic() + 60.0
        while not op.inputs_fresh() and time.monotonic() < deadline and stack.poll() is None:
            op.spin(0.1)
        if not op.inputs_fresh():
            raise RuntimeError(f'the stack did not come up (see {out}/launch.log)')
        for episode in range(episodes):
            if stack.poll() is not None:
                raise RuntimeError(f'the stack stopped (exit code {stack.returncode})')
            if not _to_walk(op, say):
                raise RuntimeError(f'episode {episode}: the robot did not reach WALK')
            trace = run_episode(op, recorder, config, schedule)
            delay, period = recorder.take_delays()
            delays.append(delay)
            periods.append(period)
            falls += int(trace['fell'])
            faults.append(trace['fault'])
            per_episode.append(segment_errors(trace, schedule))
            reached = [e for e in per_episode[-1].values() if e['lin'] == e['lin']]
            errors = [e['lin'] + e['yaw'] for e in reached]  # m/s + rad/s per segment
            say(f'  episode {episode}: {"FELL" if trace["fell"] else "ok"} at '
                f'{trace["t"][-1] if len(trace["t"]) else 0.0:.1f} s, error '
                f'{np.mean(errors) if errors else float("nan"):.3f}')  # fmt: skip
        op.call('estop')
        op.spin(0.3)
    finally:
        try:
            if op is not None:
                op.close()
        finally:
            code = stop_stack(stack)
            log.close()
    segments = {}
    for name, _, _ in schedule:
        lin = [e[name]['lin'] for e in per_episode]
        yaw = [e[name]['yaw'] for e in per_episode]
        reached = not np.all(np.isnan(lin))
        segments[name] = {
            'lin_err': float(np.nanmean(lin)) if reached else None,
            'yaw_err': float(np.nanmean(yaw)) if reached else None,
        }
    delays = np.concatenate(delays) if delays else np.zeros(0)
    periods = np.concatenate(periods) if periods else np.zeros(0)
    moving = [s for s in segments.values() if s['lin_err'] is not None]
    if not moving:  # every episode ended within its first segment's settling time
        raise RuntimeError(f'no segment was reached in {episodes} episodes (faults: {faults})')
    return {
        'policy': os.path.abspath(policy),
        'sim': 'stack',
        'episodes': episodes,
        'perturbation': dict(perturbation),
        'falls': falls,
        'faults': faults,  # per episode: policy_node's DAMP reason, 'fallen' or None
        'mean_lin_err': float(np.mean([s['lin_err'] for s in moving])),
        'mean_yaw_err': float(np.mean([s['yaw_err'] for s in moving])),
        'segments': segments,
        'settle_s': SETTLE_S,
        # sample -> drives (ms, physics time) over every matched command of every episode
        'drive_delay_ms': _percentiles(delays, 'commands'),
        # physics time between the samples of consecutive ticks (ms; 20 at 50 Hz)
        'tick_period_ms': _percentiles(periods, 'periods'),
        # policy_node's own: a sample's arrival to its command's send (ms), over the whole run
        'state_age_ms': _state_age(os.path.join(out, 'policy_node_stats.json')),
        'stack_exit': code,
    }


def main(argv=None):
    """`python -m loco_train.experiments.stack_eval FILE [FILE ...] [--latency S] [--out DIR]`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('policies', nargs='+', help='ONNX policy files, evaluated one by one')
    parser.add_argument('--episodes', type=int, default=10, help='episodes per policy')
    parser.add_argument('--payload', type=float, default=0.0, help="kg on sim_robot's base")
    parser.add_argument('--gain-scale', type=float, default=1.0, help='kp, kd multiplier')
    parser.add_argument('--latency', type=float, default=0.0, help="sim_robot's command delay (s)")
    parser.add_argument('--out', default='', help='directory for logs and results.jsonl')
    parser.add_argument(
        '--schedule', default='', help="'name:seconds:vx,vy,wz;...' instead of the evaluation's"
    )
    args = parser.parse_args(argv)
    try:
        schedule = parse_schedule(args.schedule)
    except ValueError as error:
        raise SystemExit(f'stack_eval: {error}') from None
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    os.environ.setdefault('ROS_DOMAIN_ID', str(60 + os.getpid() % 40))
    out = os.path.abspath(args.out or time.strftime('runs/stack_eval_%Y%m%d_%H%M%S'))
    os.makedirs(out, exist_ok=True)
    perturbation = {'payload': args.payload, 'gain_scale': args.gain_scale,
                    'latency': args.latency}  # fmt: skip
    say = lambda text: print(text, flush=True)  # noqa: E731
    missing = [policy for policy in args.policies if not os.path.isfile(policy)]
    if missing:
        raise SystemExit(f'stack_eval: no policy file {", ".join(missing)}')
    code = 0
    for index, policy in enumerate(args.policies):
        say(f'{policy} on the stack with {perturbation}:')
        summary = evaluate_on_stack(
            policy, perturbation, args.episodes, os.path.join(out, f'stack_{index}'), say, schedule
        )
        code = code or int(summary['stack_exit'] != 0)
        with open(os.path.join(out, 'results.jsonl'), 'a') as handle:
            handle.write(json.dumps(summary) + '\n')
        keys = ('policy', 'falls', 'mean_lin_err', 'mean_yaw_err', 'drive_delay_ms',
                'tick_period_ms')  # fmt: skip
        say(json.dumps({key: summary[key] for key in keys}))
    return code


if __name__ == '__main__':
    sys.exit(main())
