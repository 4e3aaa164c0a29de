"""Deployment benchmark: the 50 Hz policy loop against sim_robot over real DDS (JSON last line).

    python -m loco_policy.tools.bench [--seconds 60] [--policy FILE|random] [--hidden 512,256,128]

Starts sim_robot and policy_node as separate processes on an isolated localhost domain, brings
policy_node to WALK through its services and lets it run. Reports, from policy_node's own run
summary: control-period jitter p50/p99/max, /joint_states-received -> /joint_command-published
age p50/p99, tick compute (tick start -> publish) p50/p99, onnxruntime inference p50/p99, and the
policy node's CPU use during WALK (from /proc). The policy is the shipped one when present;
`--policy random` (or no shipped file) times a random-weight MLP of the given sizes (tiny weights:
it stands still; timing only). Each run measures policy_node ticking on /joint_states arrivals
(the default) and, as the baseline in the same run, on its free-running 50 Hz timer; then the
CPU use of a bare subscriber to the same state stream (tools/bare_subscriber) with rclpy's
default executor and with its EventsExecutor, and sim_robot's CPU beside each; then the period
jitter of a bare 50 Hz sleep loop beside sim_robot (tools/sleep_loop), the machine's floor for
the jitter goal. `--sidecar CPUS`
runs the /joint_states-ticked loop once more with sac_finetune learning beside it (pinned to
CPUS, fed by the loop's own transitions, exporting candidates the loop swaps in), against the
run without it.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

GOALS_MS = {'jitter_p99_ms': 1.0, 'latency_p99_ms': 2.0, 'inference_p99_ms': 0.2}
"""The deployment goals: jitter p99 < 1 ms, latency p99 < 2 ms, inference p99 < 0.2 ms."""


CPU_GOAL_PERCENT = 20.0
"""policy_node in WALK at 200 Hz state input: at most this share of one core."""

BARE_SETTLE, BARE_SECONDS = 5.0, 20.0
"""s before and s of the bare subscribers' CPU measurement."""


def cpu_seconds(pid):
    """User + system CPU seconds of a process, from /proc/<pid>/stat."""
    with open(f'/proc/{pid}/stat') as handle:
        fields = handle.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def start(module, params, env, log):
    """Start a node (a loco_policy.nodes name, or a full module path) in its own group."""
    module = module if '.' in module else f'loco_policy.nodes.{module}'
    argv = [sys.executable, '-m', module, '--ros-args']
    for param in params:
        argv += ['-p', param]
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, process_group=0)


def stop(proc):
    """SIGINT a node's group, SIGKILL after 10 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def trigger(node, executor, name):
    """Call /policy_node/<name>; return (success, message)."""
    from std_srvs.srv import Trigger

    client = node.create_client(Trigger, f'/policy_node/{name}')
    if not client.wait_for_service(timeout_sec=30.0):
        return False, 'service unavailable'
    future = client.call_async(Trigger.Request())
    executor.spin_until_future_complete(future, timeout_sec=10.0)
    return (future.result().success, future.result().message) if future.result() else (False, '')


def run(args, work, tick_source, sidecar=''):
    """Run the benchmark in directory work with one tick source; return the result dict.

    sidecar: CPU ids to pin sac_finetune to, learning beside the loop ('' = not started).
    """
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST', PYTHONUNBUFFERED='1')
    env.setdefault('ROS_DOMAIN_ID', str(150 + os.getpid() % 50))
    from loco_policy.nodes.policy_node import SHIPPED_POLICY

    policy = args.policy or (SHIPPED_POLICY if os.path.isfile(SHIPPED_POLICY) else 'random')
    if policy == 'random':
        from loco_policy.tools.random_policy import write_random_policy

        hidden = tuple(int(h) for h in args.hidden.split(','))
        policy = write_random_policy(os.path.join(work, 'bench.onnx'), hidden, weight_scale=0.01)
    stats_file = os.path.join(work, 'stats.json')
    log = open(os.path.join(work, 'nodes.log'), 'wb')
    # the simulated robot's driver runs at the same priority, as a robot's state publisher does
    sim_cpus, policy_cpus = args.pin.split(':') if args.pin else ('', '')
    key_file = os.path.join(work, 'update.key')
    with open(key_file, 'wb') as handle:
        handle.write(os.urandom(32))
    tuning = [f'realtime_priority:={args.rt_priority}', f'cpu_dma_latency:={args.dma_latency}']
    pin = lambda cpus: [f'cpu_affinity:={cpus}'] if cpus else []  # noqa: E731
    sim = start('sim_robot', [*tuning, *pin(sim_cpus)], env, log)
    node_proc = start(
        'policy_node',
        [
            f'policy:={policy}',
            'allow_untrained:=true',
            f'stats_file:={stats_file}',
            'stand_duration:=1.0',
            f'tick_source:={tick_source}',
            f'warm_lead:={args.warm_lead}',
            f'warm_poll:={"true" if args.warm_poll else "false"}',
            f'update_key_file:={key_file}',
            'max_action_deviation:=100.0',  # the swap timed here is not about deviation
            'max_mean_action_deviation:=100.0',
            *pin(policy_cpus),
            *tuning,
        ],
        env,
        log,
    )
    learner = None
    if sidecar:
        learner = start(
            'loco_train.nodes.sac_finetune',
            [
                f'store:={os.path.join(work, "store")}',
                f'policy_dir:={os.path.join(work, "policies")}',
                f'update_key_file:={key_file}',
                f'cpu_affinity:={sidecar}',
                'learning_starts:=256',
                'warmup_updates:=500',
                'export_every:=1000',
            ],
            env,
            log,
        )
    os.environ.update(ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    rclpy.init(domain_id=int(env['ROS_DOMAIN_ID']))
    node = rclpy.create_node('bench')
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        steps = []
        for name, wait in (('start', 2.0), ('start', 0.0)):
            deadline = time.monotonic() + 30.0
            while True:  # the first start is refused until the robot's inputs arrive
                ok, message = trigger(node, executor, name)
                if ok or time.monotonic() > deadline:
                    break
                if 'DAMP' in message:  # a start-up hiccup (stale inputs) latched: clear it
                    trigger(node, executor, 'reset')
                executor.spin_once(timeout_sec=0.2)
            steps.append(message)
            if not ok:
                with open(os.path.join(work, 'nodes.log'), errors='replace') as handle:
                    tail = handle.read()[-2000:]
                raise RuntimeError(f'{name} refused: {message}; node log ends:\n{tail}')
            end = time.monotonic() + wait
            while time.monotonic() < end:
                executor.spin_once(timeout_sec=0.05)
        cpu0, sim0, t0 = cpu_seconds(node_proc.pid), cpu_seconds(sim.pid), time.monotonic()
        learner0 = cpu_seconds(learner.pid) if learner else 0.0
        end = t0 + args.seconds
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.1)
        cpu = 100.0 * (cpu_seconds(node_proc.pid) - cpu0) / (time.monotonic() - t0)
        sim_cpu = 100.0 * (cpu_seconds(sim.pid) - sim0) / (time.monotonic() - t0)
        if learner:
            learner_cpu = 100.0 * (cpu_seconds(learner.pid) - learner0) / (time.monotonic() - t0)
        plain = tick_source == 'joint_states' and not sidecar
        swap = time_swap(node, executor, work, key_file) if plain else None
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        stop(node_proc)
        stop(sim)
        if learner:
            stop(learner)
        log.close()
    with open(stats_file) as handle:
        stats = json.load(handle)
    result = summarize(stats, cpu, policy, steps, args, tick_source)
    result['cpu_percent_sim_robot'] = round(sim_cpu, 1)
    if swap is not None:
        result['policy_update'] = swap
    if learner:
        result['cpu_percent_sac_finetune'] = round(learner_cpu, 1)
        result['policy_swaps_during_run'] = stats.get('updates', {})
    return result


def time_swap(node, executor, work, key_file):
    """Announce a signed candidate on /policy/update after the timed run; its timing figures.

    Reads policy_node's own figures from /policy/status: validation time and the time from the
    announcement's arrival to the first tick that runs the candidate.
    """
    import hashlib

    from rclpy.qos import DurabilityPolicy, QoSProfile
    from std_msgs.msg import String

    from loco_policy.control.hot_swap import sign
    from loco_policy.tools.random_policy import write_random_policy

    path = write_random_policy(os.path.join(work, 'candidate.onnx'), weight_scale=0.01, seed=7)
    with open(path, 'rb') as handle:
        blob = handle.read()
    with open(key_file, 'rb') as handle:
        key = handle.read()
    status = {}
    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    node.create_subscription(
        String, '/policy/status', lambda m: status.update(json.loads(m.data)), latched
    )
    pub = node.create_publisher(String, '/policy/update', 10)
    text = json.dumps({
        'path': path, 'sha256': hashlib.sha256(blob).hexdigest(), 'version': 1,
        'parent_version': 0, 'signature': sign(blob, key),
    })  # fmt: skip
    end = time.monotonic() + 1.0
    while time.monotonic() < end:  # discovery of the new publisher
        executor.spin_once(timeout_sec=0.05)
    pub.publish(String(data=text))
    end = time.monotonic() + 20.0
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.05)
        updates = status.get('updates') or {}
        if updates.get('accepted') or updates.get('rejected'):
            break
    updates = status.get('updates') or {}
    return {
        'accepted': bool(updates.get('accepted')),
        'rejection': updates.get('last_rejection'),
        'validation_ms': updates.get('validation_ms'),
        'update_to_active_ms': updates.get('update_to_active_ms'),
        'mode_after': status.get('mode'),
    }


def beside_sim(work, module_argv, seconds, until_exit=False):
    """Run a baseline process beside a fresh sim_robot; its CPU %, sim_robot's, its stdout.

    The process is SIGINTed after `seconds` of measurement, or, with until_exit, waited for (at
    most 60 s past `seconds`: subprocess.TimeoutExpired). Both are stopped on any error.
    """
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST', PYTHONUNBUFFERED='1')
    env.setdefault('ROS_DOMAIN_ID', str(150 + os.getpid() % 50))
    out_path = os.path.join(work, 'baseline.out')
    log = open(os.path.join(work, 'baseline.log'), 'wb')
    proc = None
    try:
        sim = start('sim_robot', [], env, log)
        try:
            time.sleep(BARE_SETTLE)  # sim_robot up, discovery and the first messages
            with open(out_path, 'wb') as out:
                proc = subprocess.Popen(
                    [sys.executable, '-m', *module_argv], env=env, stdout=out, stderr=log,
                    process_group=0,
                )  # fmt: skip
            if not until_exit:
                time.sleep(BARE_SETTLE)
            cpu0, sim0, t0 = cpu_seconds(proc.pid), cpu_seconds(sim.pid), time.monotonic()
            if until_exit:
                proc.wait(seconds + 60.0)
            else:
                time.sleep(seconds)
            elapsed = time.monotonic() - t0
            sim_cpu = 100.0 * (cpu_seconds(sim.pid) - sim0) / elapsed
            cpu = 0.0 if until_exit else 100.0 * (cpu_seconds(proc.pid) - cpu0) / elapsed
        finally:
            if proc is not None:
                stop(proc)
            stop(sim)
    finally:
        log.close()
    with open(out_path) as handle:
        return round(cpu, 1), round(sim_cpu, 1), handle.read()


def bare_cpu(args, work, executor_name):
    """CPU % of a bare subscriber to sim_robot's state topics (see tools/bare_subscriber)."""
    argv = ['loco_policy.tools.bare_subscriber', '--executor', executor_name]
    cpu, sim_cpu, _ = beside_sim(work, argv, min(args.seconds, BARE_SECONDS))
    return {'cpu_percent': cpu, 'cpu_percent_sim_robot': sim_cpu}


def sleep_loop_jitter(args, work):
    """Period jitter (ms) of a bare 50 Hz sleep loop beside sim_robot (see tools/sleep_loop).

    A loop that fails gives {'error': ...} instead, so that the runs before it are still reported.
    """
    seconds = min(args.seconds, BARE_SECONDS)
    argv = ['loco_policy.tools.sleep_loop', '--seconds', str(seconds), '--rate', '50']
    argv += ['--rt-priority', str(args.rt_priority)]  # the floor at the loop's own scheduling
    try:
        _, sim_cpu, out = beside_sim(work, argv, seconds, until_exit=True)
        jitter = json.loads(out.strip().splitlines()[-1])['jitter_ms']
    except (subprocess.TimeoutExpired, IndexError, KeyError, ValueError, OSError) as error:
        return {'error': f'the sleep loop gave no figures: {error!r}'}
    return {'jitter_ms': jitter, 'cpu_percent_sim_robot': sim_cpu,
            'goal_met': jitter['p99'] < GOALS_MS['jitter_p99_ms']}  # fmt: skip


def walk_policy_algorithm(policy):
    """The algorithm named by the timed policy file's provenance (not the swapped-in one's)."""
    from loco_policy.policy_file import OnnxPolicy

    return OnnxPolicy(policy).contract.provenance.get('algorithm')


def summarize(stats, cpu, policy, steps, args, tick_source):
    """Pick the benchmark figures out of policy_node's run summary."""

    def pick(name):
        return {k: round(stats.get(f'{name}_{k}_ms', 0.0), 4) for k in ('p50', 'p99', 'max')}

    result = {
        'bench': 'deploy_policy_loop',
        'seconds_in_walk': args.seconds,
        'realtime_priority': args.rt_priority,
        'cpu_affinity_sim_policy': args.pin,
        'cpu_dma_latency_us': args.dma_latency,
        'warm_lead_s': args.warm_lead,
        'warm_poll': args.warm_poll,
        'tick_source': tick_source,
        'policy': policy,
        'policy_algorithm': walk_policy_algorithm(policy),
        'mode_at_end': stats.get('mode'),
        'loop_rate_hz': round(stats.get('loop_rate_hz', 0.0), 3),
        'ticks': stats.get('ticks'),
        'jitter_ms': pick('jitter'),
        'latency_state_to_command_ms': pick('state_age'),
        'compute_tick_to_publish_ms': pick('compute'),
        'inference_ms': pick('inference'),
        'cpu_percent_policy_node': round(cpu, 1),
        'transitions_published': stats.get('transitions_published'),
        'warm_ups': stats.get('warm_ups'),
        'stalls': stats.get('stalls'),  # policy_node's own, beyond its timer period
        'longest_stall_ms': stats.get('longest_stall_ms'),
        'cores': os.cpu_count(),
        'load_average': [round(v, 2) for v in os.getloadavg()],
        'steps': steps,
    }
    figures = {
        'jitter_p99_ms': result['jitter_ms']['p99'],
        'latency_p99_ms': result['latency_state_to_command_ms']['p99'],
        'inference_p99_ms': result['inference_ms']['p99'],
    }
    result['goals_met'] = {k: figures[k] < GOALS_MS[k] for k in GOALS_MS}
    result['goals_met']['cpu_percent'] = result['cpu_percent_policy_node'] <= CPU_GOAL_PERCENT
    return result


def main(argv=None):
    """Parse arguments, run, print a short summary and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=60.0, help='seconds in WALK')
    parser.add_argument(
        '--policy', default='', help="policy file, or 'random' (default: the shipped one)"
    )
    parser.add_argument('--hidden', default='512,256,128', help='random MLP hidden sizes')
    parser.add_argument(
        '--rt-priority', type=int, default=0, help="policy_node's realtime_priority (SCHED_FIFO)"
    )
    parser.add_argument(
        '--pin', default='', help="CPUs of sim_robot and policy_node, e.g. '0:1' (default: free)"
    )
    parser.add_argument(
        '--dma-latency',
        type=int,
        default=-1,
        help='hold /dev/cpu_dma_latency at this many us in both nodes (default: leave it)',
    )
    parser.add_argument(
        '--warm-lead',
        type=float,
        default=0.001,
        help="policy_node's warm_lead: s awake and warmed before each tick (0: sleep until it)",
    )
    parser.add_argument(
        '--warm-poll',
        action='store_true',
        help="policy_node's warm_poll: poll without blocking from the warm-up until the tick",
    )
    parser.add_argument(
        '--sidecar',
        default='',
        help="also run the loop with sac_finetune pinned to these CPUs, e.g. '1' (default: no)",
    )
    args = parser.parse_args(argv)
    if args.pin and args.pin.count(':') != 1:
        parser.error("--pin takes SIM_CPUS:POLICY_CPUS, e.g. '0:1'")
    runs = {}
    for tick_source in ('joint_states', 'timer'):  # the second is the baseline
        with tempfile.TemporaryDirectory(prefix='loco_bench_') as work:
            runs[tick_source] = run(args, work, tick_source)
    bare = {}
    for executor_name in ('single_threaded', 'events'):  # what any node pays for the stream
        with tempfile.TemporaryDirectory(prefix='loco_bench_') as work:
            bare[executor_name] = bare_cpu(args, work, executor_name)
    result = dict(runs['joint_states'])
    if args.sidecar:
        with tempfile.TemporaryDirectory(prefix='loco_bench_') as work:
            beside = run(args, work, 'joint_states', sidecar=args.sidecar)
        result['with_sidecar'] = {
            key: beside[key]
            for key in ('loop_rate_hz', 'jitter_ms', 'latency_state_to_command_ms',
                        'inference_ms', 'cpu_percent_policy_node', 'cpu_percent_sac_finetune',
                        'policy_swaps_during_run', 'mode_at_end', 'goals_met')
        }  # fmt: skip
    result['baseline_bare_subscriber'] = bare
    with tempfile.TemporaryDirectory(prefix='loco_bench_') as work:
        result['baseline_sleep_loop'] = sleep_loop_jitter(args, work)
    result['baseline_timer'] = {
        key: runs['timer'][key]
        for key in ('loop_rate_hz', 'jitter_ms', 'latency_state_to_command_ms', 'inference_ms',
                    'compute_tick_to_publish_ms', 'cpu_percent_policy_node',
                    'cpu_percent_sim_robot', 'goals_met')
    }  # fmt: skip
    for key in (
        'loop_rate_hz',
        'jitter_ms',
        'latency_state_to_command_ms',
        'inference_ms',
        'compute_tick_to_publish_ms',
        'cpu_percent_policy_node',
        'cpu_percent_sim_robot',
        'goals_met',
    ):
        print(f'{key:30} {result[key]}')
        if key in result['baseline_timer']:
            print(f'{"  baseline (timer)":30} {result["baseline_timer"][key]}')
    print(f'{"policy update (swap)":30} {result.get("policy_update")}')
    for key, value in result.get('with_sidecar', {}).items():
        print(f'{"with sac_finetune, " + key:30} {value}')
    for name, figures in bare.items():
        print(f'{"bare subscriber, " + name:30} {figures}')
    print(f'{"bare 50 Hz sleep loop":30} {result["baseline_sleep_loop"]}')
    print(json.dumps(result))
    return 0


if __name__ == '__main__':
    sys.exit(main())
