"""`make demo`: the deployment stack on the simulated ANYmal, driven through its services.

Starts `loco-launch` (sim_robot on MuJoCo, policy_node, recorder) as a separate process group,
then, as an operator would: waits for the robot's inputs, calls start (PASSIVE -> STAND), and
with a policy file calls start again (STAND -> WALK) and drives the command schedule (stand,
forward, turn, sideways, stop) on /cmd_vel. Without a policy file it says so and only stands.
Prints a table, writes a PNG of commanded versus measured velocity (loco_policy.tools.plots) and
ends with one JSON line. Exits 1 when the robot falls or the loop misses its rate, 2 (one line
naming the requirement group) when a module it needs is not installed. With --video FILE.mp4
the recorded bag is rendered afterwards (loco_policy.tools.video.render_bag).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

from loco_policy import spec
from loco_policy.nodes.policy_node import SHIPPED_POLICY
from loco_policy.tools import command_schedule, demo_metrics, missing_dependency

NEEDS = ('mujoco', 'rosbags', 'matplotlib')
"""Modules of the sim and tools groups the demo needs (sim_robot, the bag, the figure)."""

TRACKING = {
    None: 'not asked (no policy)',
    True: 'yes',
    False: 'NO: this policy does not walk as commanded',
}
"""The tracking verdict in words."""


class Operator:
    """The demo's rclpy side: status, odometry, transitions, services and /cmd_vel."""

    def __init__(self):
        """Create the node, its subscriptions, the /cmd_vel publisher and service clients."""
        from geometry_msgs.msg import Twist
        from nav_msgs.msg import Odometry
        import rclpy
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import Float32MultiArray, String
        from std_srvs.srv import Trigger

        rclpy.init()
        self.rclpy, self.Twist, self.Trigger = rclpy, Twist, Trigger
        self.node = rclpy.create_node('demo_operator')
        self.status, self.odom = {}, None  # odom: (t, z (m), vx, vy (m/s), wz (rad/s))
        self.transitions = 0
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.node.create_subscription(String, '/policy/status', self._on_status, latched)
        self.node.create_subscription(Odometry, '/odom', self._on_odom, 10)
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(
            Float32MultiArray, '/replay/transitions', self._on_transitions, reliable
        )
        self.cmd_pub = self.node.create_publisher(Twist, '/cmd_vel', 10)

    def _on_status(self, msg):
        self.status = json.loads(msg.data)

    def _on_odom(self, msg):
        p, v, w = msg.pose.pose.position, msg.twist.twist.linear, msg.twist.twist.angular
        self.odom = (time.monotonic(), p.z, v.x, v.y, w.z)

    def _on_transitions(self, msg):
        self.transitions += msg.layout.dim[0].size if msg.layout.dim else 0

    def spin(self, seconds):
        """Process callbacks for the given time (s)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.rclpy.spin_once(
                self.node, timeout_sec=min(0.02, max(0.0, end - time.monotonic()))
            )

    def call(self, name, timeout=10.0):
        """Call /policy_node/<name>, or a full /service name (Trigger); (success, message)."""
        service = name if name.startswith('/') else f'/policy_node/{name}'
        client = self.node.create_client(self.Trigger, service)
        if not client.wait_for_service(timeout_sec=timeout):
            return False, f'service {service} not available'
        future = client.call_async(self.Trigger.Request())
        self.rclpy.spin_until_future_complete(self.node, future, timeout_sec=timeout)
        result = future.result()
        return (result.success, result.message) if result else (False, 'no response')

    def inputs_fresh(self):
        """True when policy_node reports every input fresh (younger than 3 periods)."""
        ages = self.status.get('input_age_ms', {})
        return bool(ages) and all(a is not None and a < 60.0 for a in ages.values())

    def command(self, vx, vy, wz):
        """Publish one /cmd_vel."""
        msg = self.Twist()
        msg.linear.x, msg.linear.y, msg.angular.z = float(vx), float(vy), float(wz)
        self.cmd_pub.publish(msg)

    def close(self):
        """Destroy the node and shut rclpy down."""
        self.node.destroy_node()
        self.rclpy.try_shutdown()


def stack_arguments(out, policy, backend='mujoco', actuator=''):
    """loco-launch's name:=value arguments for the demo's graph.

    actuator: an actuator model YAML for sim_robot's drives ('' = the ideal PD drive).
    """
    argv = [
        'use_sim:=true', f'backend:={backend}',
        'record:=true', f'bag:={os.path.join(out, "bag")}', f'policy:={policy}',
        f'stats_file:={os.path.join(out, "policy_stats.json")}',
    ]  # fmt: skip
    return argv + ([f'actuator:={actuator}'] if actuator else [])


def start_stack(out, policy, log, backend='mujoco', actuator=''):
    """Start loco-launch (sim_robot, policy_node, recorder) in its own process group."""
    argv = [sys.executable, '-m', 'loco_policy.bringup.launcher']
    argv += stack_arguments(out, policy, backend, actuator)
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, process_group=0)


def stop_stack(proc, timeout=20.0):
    """SIGINT the launcher (it stops its nodes); SIGKILL the group if it hangs."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


def start_standing(op, say, attempts=3):
    """Call start (PASSIVE -> STAND); reset first when a startup hiccup latched DAMP."""
    for _ in range(attempts):
        if op.status.get('mode') == 'DAMP':
            say(f'startup fault latched: {op.status.get("fault")}; calling reset')
            say(f'reset -> {op.call("reset")[1]}')
            op.spin(0.3)
        ok, message = op.call('start')
        say(f'start -> {message}')
        if ok:
            return ok, message
        op.spin(0.5)
    return ok, message


def drive(op, stack, schedule, samples, heights, say):
    """Publish the schedule on /cmd_vel at 20 Hz, sampling odometry; return when done."""
    start = time.monotonic()
    current = None
    while True:
        if stack.poll() is not None:
            raise RuntimeError(f'the stack stopped (exit code {stack.returncode}) mid-run')
        t = time.monotonic() - start
        segment, cmd = command_schedule.at(schedule, t)
        if segment is None:
            break
        if segment is not current:
            current = segment
            say(f'  t={t:5.1f} s  segment {segment.name}: vx {cmd[0]} vy {cmd[1]} wz {cmd[2]}')
        op.command(*cmd)
        op.spin(0.05)
        if op.odom is not None:
            samples.append((t, segment.name, cmd.copy(), np.array(op.odom[2:5])))
            heights.append(op.odom[1])


def run(args):
    """Run the demo; return (exit code, result dict)."""
    out = os.path.abspath(args.out or os.path.join('runs', time.strftime('demo_%Y%m%d_%H%M%S')))
    os.makedirs(out, exist_ok=True)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    os.environ.setdefault('ROS_DOMAIN_ID', str(60 + os.getpid() % 40))
    policy = args.policy if args.policy is not None else SHIPPED_POLICY
    have_file = bool(policy) and os.path.isfile(policy)
    say = print
    sim = {'mujoco': 'MuJoCo', 'warp': "the project's Warp simulator"}[args.backend]
    say(f'loco_policy demo: simulated ANYmal C ({sim}) + policy_node + recorder; output {out}')
    if not os.path.isfile(SHIPPED_POLICY):
        say(f'NOTE: no trained policy is shipped yet ({SHIPPED_POLICY} is absent).')
    if not have_file:
        say(
            f'No policy file ({policy or "none given"}): the demo stands the robot up through '
            'the state machine and does not walk; policy_node refuses WALK without a policy.'
        )
    elif policy != SHIPPED_POLICY:
        say(f'Running the given policy file {policy}; it walks only if it was trained to.')
    log = open(os.path.join(out, 'launch.log'), 'wb')
    if args.actuator:
        say(f"sim_robot's drives from {args.actuator} (not the ideal PD drive).")
    stack = start_stack(out, policy if have_file else '', log, args.backend, args.actuator)
    op = Operator()
    samples, heights, steps = [], [], []
    try:
        deadline = time.monotonic() + args.startup_timeout
        while not op.inputs_fresh() and time.monotonic() < deadline and stack.poll() is None:
            op.spin(0.1)
        if not op.inputs_fresh():
            raise RuntimeError(f'the stack did not come up (see {out}/launch.log)')
        walking = bool(op.status.get('policy'))
        if have_file and not walking:
            say(f'policy refused: {op.status.get("policy_error")}')
        ok, message = start_standing(op, say)
        steps.append(('start', ok, message))
        if not ok:
            raise RuntimeError(f'start refused: {message}')
        run_start = time.monotonic()
        op.spin(float(args.stand_wait))
        if walking:
            ok, message = op.call('start')
            steps.append(('start', ok, message))
            say(f'start -> {message}')
            schedule = command_schedule.DEMO
        else:
            schedule = (command_schedule.Segment('stand (no policy)', args.stand_only, (0, 0, 0)),)
        drive(op, stack, schedule, samples, heights, say)
        ok, message = op.call('stop')
        steps.append(('stop', ok, message))
        say(f'stop -> {message}')
        op.spin(1.0)
        transitions = op.transitions
        steps.append(('run_start', True, run_start))
    finally:
        op.close()
        stack_code = stop_stack(stack)
        log.close()
    steps.append(('stack_exit', stack_code == 0, stack_code))
    code, result = report(
        out, schedule, samples, heights, steps, transitions, walking, say, args.backend
    )
    return code, {**result, 'policy': policy or None, 'actuator': args.actuator or None}


def _figures(stats, walking):
    """The loop figures of policy_node's run summary, rounded, in ms."""

    def pick(name, keys):
        return {k: round(stats.get(f'{name}_{k}_ms', 0.0), 4) for k in keys}

    return {
        'loop_rate_hz': round(stats.get('loop_rate_hz', 0.0), 3),
        'jitter_ms': pick('jitter', ('p50', 'p99', 'max')),
        'inference_ms': pick('inference', ('p50', 'p99')) if walking else None,
        'compute_ms': pick('compute', ('p50', 'p99')),
    }


def report(out, schedule, samples, heights, steps, transitions, walking, say, backend):
    """Print the table, write the PNG, return (exit code, result)."""
    from loco_policy.tools.bag_recover import describe, recover_tree
    from loco_policy.tools.bag_writer import list_splits, read_counts
    from loco_policy.tools.plots import velocity_figure

    try:
        with open(os.path.join(out, 'policy_stats.json')) as handle:
            stats = json.load(handle)
    except (OSError, ValueError) as error:
        raise RuntimeError(
            f'policy_node left no run summary ({error}); it did not stop cleanly, see launch.log'
        ) from None
    errors = demo_metrics.segment_errors(samples, [s.name for s in schedule])
    modes = stats.get('mode_history', [])
    n_falls = demo_metrics.falls(heights, modes)
    run_start = next(s[2] for s in steps if s[0] == 'run_start')
    run_faults = demo_metrics.faults(modes, since=run_start)
    bag = os.path.join(out, 'bag')
    # a recorder the launcher had to kill leaves a torn tail: cut it as loco-bag-recover would
    reports = recover_tree(bag) if os.path.isdir(bag) else []
    repairs = [r for r in reports if r['action'] != 'complete']
    for repair in repairs:
        say(f'bag-recover {describe(repair)}')
    splits = list_splits(bag)
    counts = {}
    for split in splits:
        for topic, n in read_counts(split).items():
            counts[topic] = counts.get(topic, 0) + n
    png = os.path.join(out, 'velocity.png') if len(samples) > 1 else None
    if png:
        t = np.array([s[0] for s in samples])
        cmd, meas = np.array([s[2] for s in samples]), np.array([s[3] for s in samples])
        starts = np.cumsum([0.0] + [s.duration for s in schedule[:-1]])  # s from drive start
        sim = {'mujoco': 'MuJoCo', 'warp': 'Warp'}[backend]
        velocity_figure(
            png, t, cmd, meas, [(s.name, start) for s, start in zip(schedule, starts)],
            f'ANYmal C on {sim}: commanded vs measured base velocity (body frame)',
        )  # fmt: skip
    loop_ok = demo_metrics.loop_ok(stats, 1.0 / spec.CONTROL_DT)
    history = ' -> '.join(['PASSIVE'] + [h['to'] for h in stats.get('mode_history', [])])
    figures = _figures(stats, walking)
    tracking = demo_metrics.tracks(errors)
    height = {'min': round(min(heights), 4), 'final': round(heights[-1], 4)} if heights else None
    jitter, inference = figures['jitter_ms'], figures['inference_ms']
    say('')
    say(demo_metrics.table(errors, list(errors[0]) if errors else ['segment']))
    say('')
    lines = [
        ('policy', stats['policy']['path'] if stats.get('policy') else 'none (WALK refused)'),
        ('state transitions', history),
        ('policy tracks the commands', TRACKING[tracking]),
        ('falls', n_falls),
        ('faults during the run', '; '.join(run_faults) or 'none'),
        ('base height min / final (m)', f'{height["min"]} / {height["final"]}' if height else '-'),
        ('control loop rate (Hz)', f'{figures["loop_rate_hz"]}' + ('' if loop_ok else ' MISSED')),
        ('period jitter p50 / p99 / max (ms)', ' / '.join(str(v) for v in jitter.values())),
        ('inference p50 / p99 (ms)', ' / '.join(str(v) for v in inference.values())
         if inference else 'no policy: not run'),
        ('transitions published / received', f'{stats["transitions_published"]} / {transitions}'),
        ('bag', f'{os.path.join(out, "bag")} ({len(splits)} splits, {counts})'),
        ('plot', png or '-'),
    ]  # fmt: skip
    for key, value in lines:
        say(f'{key:36} {value}')
    result = {
        'demo': 'deploy_stack_sim',
        'backend': backend,
        'policy_loaded': walking,
        'policy_shipped': os.path.isfile(SHIPPED_POLICY),
        'state_transitions': history,
        'tracks_commands': tracking,
        'falls': n_falls,
        'faults': run_faults,
        **figures,
        'base_height_m': height,
        'tracking': errors,
        'transitions_published': stats.get('transitions_published'),
        'transitions_received': transitions,
        'bag': bag,
        'bag_counts': counts,
        'bag_repairs': [describe(r) for r in repairs],
        'plot': png,
    }
    stack_code = next(s[2] for s in steps if s[0] == 'stack_exit')
    result['stack_exit_code'] = stack_code
    code = 0 if n_falls == 0 and loop_ok and not run_faults and stack_code == 0 else 1
    if code:
        reasons = (['the robot fell'] if n_falls else []) + [f'fault: {f}' for f in run_faults]
        reasons += [] if loop_ok else ['loop rate missed']
        reasons += [] if stack_code == 0 else ['a node did not stop cleanly (see launch.log)']
        say('FAILED: ' + '; '.join(reasons))
        if stack_code != 0:
            say(launch_log_tail(os.path.join(out, 'launch.log')))
    return code, result


def launch_log_tail(path, lines=30):
    """The last lines of the stack's log, to show why a node did not stop cleanly."""
    try:
        with open(path, errors='replace') as handle:
            tail = handle.read().splitlines()[-lines:]
    except OSError as error:
        return f'({path} unreadable: {error})'
    return '\n'.join([f'last {len(tail)} lines of {path}:'] + ['  ' + line for line in tail])


def main(argv=None):
    """Parse arguments, run the demo, print the JSON line; exit non-zero on a fall or slow loop."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--policy', default=None, help='policy file (default: the shipped one)')
    parser.add_argument('--out', default='', help='output directory (default runs/demo_<time>)')
    parser.add_argument('--stand-wait', type=float, default=3.0, help='s to wait in STAND')
    parser.add_argument('--stand-only', type=float, default=8.0, help='s to hold without policy')
    parser.add_argument('--backend', choices=('mujoco', 'warp'), default='mujoco')
    parser.add_argument('--startup-timeout', type=float, default=60.0, help='s for the stack')
    parser.add_argument('--video', default='', help='MP4 rendered from the bag after the run')
    parser.add_argument(
        '--actuator', default='', help="actuator model YAML for sim_robot's drives (MuJoCo)"
    )
    args = parser.parse_args(argv)
    args.actuator = os.path.abspath(args.actuator) if args.actuator else ''
    from loco_policy.bringup import launch_graph

    try:  # the launch graph's own checks, before anything starts
        launch_graph.node_graph(
            launch_graph.parse_args(stack_arguments('', '', args.backend, args.actuator))
        )
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    missing = missing_dependency.check(NEEDS, 'demo', prefer=('sim', 'tools'))
    if missing:
        print(missing, file=sys.stderr)
        return 2
    try:
        code, result = run(args)
    except RuntimeError as error:
        print(f'demo failed: {error}')
        code, result = 1, {'demo': 'deploy_stack_sim', 'error': str(error)}
    if args.video and result.get('bag'):
        from loco_policy.tools import video  # mujoco and imageio: only when asked

        try:  # the recorded bag, posed in MuJoCo: /cmd_vel against the /odom twist
            result['video'] = video.render_bag(result['bag'], args.video)
        except (ValueError, ModuleNotFoundError, video.VideoUnavailable) as error:
            print(f'video failed: {error}')
            code, result['video'] = code or 1, {'error': str(error)}
    print(json.dumps(result))
    return code


if __name__ == '__main__':
    sys.exit(main())
