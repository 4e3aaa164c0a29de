"""`loco-train bench finetune`: the online fine-tuning path, piece by piece; JSON last line.

Four parts (--parts), each on the code the robot and the sidecar run:

- transport: rows/s through /replay/transitions over real DDS (isolated localhost domain). A
  publisher process packs real rows with loco_policy.transition, batch rows per message as
  policy_node does (reliable, depth 100), at each --rates row rate; this process subscribes with
  sac_finetune's QoS (reliable, depth 500) and either only counts (the bare baseline) or feeds a
  TransitionAssembler (validation and pairing, as the node's callback). Rows sent and received,
  sequence gaps, duplicates, loss, achieved rows/s, callback time and this process's CPU.
- learner: FineTuner.from_onnx on the shipped policy with FinetuneConfig's defaults, filled with
  synthetic transitions; updates/s during the critic warm-up (actor frozen) and after it (actor
  every actor_update_interval critic updates), against the 1.25 x 50 = 62.5 updates/s the
  update-to-data ratio owes at 50 Hz.
- validation: hot_swap.validate of a signed exported candidate against the shipped policy on
  --observations observations, --validations times (ms p50 and max).
- swap: loco-launch (sim_robot on MuJoCo, policy_node with update_key) walking the shipped
  policy; --swaps signed candidates (versions 1, 2, ...) announced on /policy/update, and
  policy_node's own figures from /policy/status: validation_ms and update_to_active_ms
  (announcement arrival to the first tick of the new policy).

Run as `python -m loco_train.bench.finetune ...`, this module is the transport's publisher.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from loco_policy import spec, transition

PARTS = ('transport', 'learner', 'validation', 'swap')
PUBLISHER_QOS_DEPTH = 100
"""policy_node's /replay/transitions history (reliable)."""
SUBSCRIBER_QOS_DEPTH = 500
"""sac_finetune's queue_depth default (reliable)."""
CONTROL_HZ = 1.0 / spec.CONTROL_DT


def add_arguments(parser):
    """Add the benchmark's options."""
    parser.add_argument(
        '--parts', default=','.join(PARTS), help='comma list of ' + ', '.join(PARTS)
    )
    parser.add_argument('--seconds', type=float, default=10.0, help='s of each transport case')
    parser.add_argument('--rates', default='50,500', help='row rates (Hz) of the transport')
    parser.add_argument('--batch', type=int, default=10, help='rows per message')
    parser.add_argument('--transitions', type=int, default=4000, help='synthetic transitions')
    parser.add_argument('--warmup', type=int, default=20, help='untimed updates per phase')
    parser.add_argument('--updates', type=int, default=200, help='timed updates per phase')
    parser.add_argument('--threads', type=int, default=1, help='torch threads')
    parser.add_argument('--validations', type=int, default=10, help='repetitions of validate')
    parser.add_argument('--observations', type=int, default=100, help='per validation')
    parser.add_argument('--swaps', type=int, default=3, help='signed updates to the stack')
    parser.add_argument(
        '--domain-id',
        type=int,
        default=int(os.environ.get('LOCO_BENCH_DOMAIN_ID', 150 + os.getpid() % 50)),
        help='ROS_DOMAIN_ID of the runs (default: $LOCO_BENCH_DOMAIN_ID or 150 + pid %% 50)',
    )


def say(text):
    """One progress line on stderr."""
    print(text, file=sys.stderr, flush=True)


def ros_environment(domain_id):
    """os.environ for this benchmark's ROS processes: its own domain, localhost discovery."""
    return dict(
        os.environ,
        ROS_DOMAIN_ID=str(domain_id),
        ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST',
        PYTHONUNBUFFERED='1',
    )


# -- transport: publisher process ---------------------------------------------------------------


def make_rows(start, count, rng):
    """Consecutive WALK TransitionRows seq start .. start + count - 1 (random obs and actions)."""
    rows = []
    for seq in range(start, start + count):
        rows.append(
            transition.TransitionRow(
                seq=seq,
                episode=1,
                policy_version=0x1234ABCD,
                mode='WALK',
                obs=rng.standard_normal(spec.OBS_DIM).astype(np.float32),  # (48,)
                action=rng.uniform(-1.0, 1.0, spec.ACTION_DIM).astype(np.float32),  # (12,)
                reward_terms=rng.uniform(0.0, 1.0, len(transition.REWARD_TERMS)),  # (7,)
                terminated=False,
                truncated=False,
            )
        )
    return rows


def publish_main(argv=None):
    """The transport's publisher: rows at a rate for some seconds; one JSON line at the end."""
    parser = argparse.ArgumentParser(prog='python -m loco_train.bench.finetune')
    parser.add_argument('--rate', type=float, required=True, help='rows/s')
    parser.add_argument('--seconds', type=float, required=True)
    parser.add_argument('--batch', type=int, default=10)
    args = parser.parse_args(argv)
    import rclpy
    from rclpy.duration import Duration
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from std_msgs.msg import Float32MultiArray, MultiArrayDimension

    rclpy.init()
    node = rclpy.create_node('bench_transitions_publisher')
    qos = QoSProfile(depth=PUBLISHER_QOS_DEPTH, reliability=ReliabilityPolicy.RELIABLE)
    pub = node.create_publisher(Float32MultiArray, '/replay/transitions', qos)
    deadline = time.monotonic() + 30.0
    while pub.get_subscription_count() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the reader matches this writer too
    rng = np.random.default_rng(0)
    period = args.batch / args.rate  # s per message
    messages = max(1, int(round(args.seconds * args.rate / args.batch)))
    late, seq = [], 0
    t0 = time.monotonic()
    for i in range(messages):
        due = t0 + (i + 1) * period
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        late.append(time.monotonic() - due)
        dims, data = transition.pack_rows(make_rows(seq, args.batch, rng))
        msg = Float32MultiArray()
        msg.layout.dim = [MultiArrayDimension(label=a, size=b, stride=c) for a, b, c in dims]
        msg.data = data.tolist()  # as policy_node publishes
        pub.publish(msg)
        seq += args.batch
    sent_s = time.monotonic() - t0
    acked = pub.wait_for_all_acked(Duration(seconds=10.0))
    result = {
        'rows_sent': seq,
        'messages_sent': messages,
        'send_seconds': round(sent_s, 3),
        'all_acked': bool(acked),
        'lateness_ms_max': round(1e3 * max(late), 2),
        'matched': pub.get_subscription_count(),
    }
    print(json.dumps(result), flush=True)
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


# -- transport: this process subscribes ---------------------------------------------------------


def transport_case(rate, kind, args, env):
    """One publisher run at rate rows/s against a bare or an assembling subscriber."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from std_msgs.msg import Float32MultiArray

    from loco_train.finetune.ingest import TransitionAssembler
    from loco_train.finetune.reward import weights_from_overrides

    assembler = TransitionAssembler(weights_from_overrides()) if kind == 'assembler' else None
    seen = {'messages': 0, 'rows': 0, 'first': None, 'last': None, 'busy': [], 'paired': 0}

    def on_message(msg):
        start = time.perf_counter()
        if assembler is None:  # bare: count only
            seen['rows'] += msg.layout.dim[0].size if msg.layout.dim else 0
        else:  # what sac_finetune's callback does before its store
            dims = [(d.label, d.size, d.stride) for d in msg.layout.dim]
            assembler.feed(dims, msg.data, msg.layout.data_offset)
            seen['paired'] += len(assembler.drain()['seq'])
        now = time.perf_counter()
        seen['busy'].append(now - start)
        seen['messages'] += 1
        seen['first'] = seen['first'] or now
        seen['last'] = now

    node = rclpy.create_node(f'bench_finetune_{kind}')
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    qos = QoSProfile(depth=SUBSCRIBER_QOS_DEPTH, reliability=ReliabilityPolicy.RELIABLE)
    node.create_subscription(Float32MultiArray, '/replay/transitions', on_message, qos)
    command = [sys.executable, '-m', 'loco_train.bench.finetune', f'--rate={rate}',
               f'--seconds={args.seconds}', f'--batch={args.batch}']  # fmt: skip
    cpu0, wall0 = time.process_time(), time.monotonic()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    try:
        while proc.poll() is None:
            executor.spin_once(timeout_sec=0.02)
        quiet = time.monotonic()
        while time.monotonic() - quiet < 0.5:  # what is still in flight
            count = seen['messages']
            executor.spin_once(timeout_sec=0.05)
            if seen['messages'] != count:
                quiet = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
        out = proc.communicate(timeout=10)[0]
        executor.shutdown()
        node.destroy_node()
    cpu = time.process_time() - cpu0
    wall = time.monotonic() - wall0
    if proc.returncode != 0:
        raise RuntimeError(f'transport publisher failed (exit {proc.returncode}): {out[-2000:]}')
    sent = json.loads(out.strip().splitlines()[-1])
    case = {'rate_hz': rate, 'subscriber': kind, **sent}
    received = seen['rows']
    if assembler is not None:
        assembler.finish()
        seen['paired'] += len(assembler.drain()['seq'])
        counts = assembler.stats()
        received = counts['transitions_received']
        case.update(
            sequence_gaps=counts['sequence_gaps'],
            duplicates=counts['duplicates'],
            late=counts['late'],
            malformed=counts['malformed'],
            transitions_paired=seen['paired'],
        )
    span = (seen['last'] - seen['first']) if seen['messages'] > 1 else 0.0
    busy = np.array(seen['busy'] or [0.0]) * 1e6  # us per message
    case.update(
        messages_received=seen['messages'],
        rows_received=received,
        loss=sent['rows_sent'] - received,
        rows_per_s=round((received - args.batch) / span, 1) if span > 0 else None,
        callback_us_mean=round(float(busy.mean()), 1),
        callback_us_max=round(float(busy.max()), 1),
        cpu_percent=round(100.0 * cpu / wall, 1),
    )
    bad = case['loss'] or case.get('sequence_gaps', 0) or case.get('duplicates', 0)
    case['zero_loss'] = not bad and case['messages_received'] == sent['messages_sent']
    return case


def transport(args, env):
    """Every rate with the bare subscriber, then with the assembler (the baseline first)."""
    cases = []
    for rate in [float(r) for r in args.rates.split(',') if r]:
        for kind in ('bare', 'assembler'):
            case = transport_case(rate, kind, args, env)
            say(
                f'transport {rate:g} Hz {kind:9}: {case["rows_received"]}/{case["rows_sent"]} '
                f'rows, loss {case["loss"]}, gaps {case.get("sequence_gaps", "-")}, '
                f'{case["rows_per_s"]} rows/s, callback {case["callback_us_mean"]} us, '
                f'CPU {case["cpu_percent"]} %'
            )
            cases.append(case)
    return {
        'seconds': args.seconds,
        'batch': args.batch,
        'publisher_qos': f'reliable, depth {PUBLISHER_QOS_DEPTH}',
        'subscriber_qos': f'reliable, depth {SUBSCRIBER_QOS_DEPTH}',
        'cases': cases,
        'zero_loss': {f'{r:g}': all(c['zero_loss'] for c in cases if c['rate_hz'] == r) for r in
                      dict.fromkeys(c['rate_hz'] for c in cases)},  # rate (Hz) -> every case
    }  # fmt: skip


# -- learner ------------------------------------------------------------------------------------


def synthetic_transitions(count, seed=0):
    """Consecutive WALK transitions, count of them in one segment (ingest's dict of arrays)."""
    from loco_train.finetune.ingest import empty_transitions

    rng = np.random.default_rng(seed)
    t = empty_transitions(count)
    obs = (rng.standard_normal((count + 1, spec.OBS_DIM)) * 0.3).astype(np.float32)
    t['seq'][:] = np.arange(count)
    t['segment'][:] = 1
    t['obs'][:], t['next_obs'][:] = obs[:-1], obs[1:]  # s' of t is s of t + 1
    t['action'][:] = rng.standard_normal((count, spec.ACTION_DIM)) * 0.1
    t['reward'][:] = rng.standard_normal(count) * 0.01
    t['segment_end'][-1] = True
    return t


def time_updates(tuner, warmup, updates):
    """Run warmup updates, then time updates; (seconds, updates run)."""
    tuner.update(limit=warmup)
    start = time.perf_counter()
    ran = tuner.update(limit=updates)
    return time.perf_counter() - start, ran


def learner(args, shipped):
    """Updates/s of the default learner, critic warm-up and steady phase; the tuner for export."""
    from dataclasses import asdict, replace

    import torch

    from loco_train.finetune.learner import FinetuneConfig, FineTuner

    torch.set_num_threads(max(1, args.threads))
    config = FinetuneConfig()
    need = config.learning_starts + int((args.warmup + args.updates) / config.utd_ratio) + 2
    count = max(args.transitions, need)
    phases, tuner = {}, None
    for phase, cfg in (('critic_warmup', config), ('steady', replace(config, warmup_updates=0))):
        tuner = FineTuner.from_onnx(shipped, cfg)
        tuner.add(synthetic_transitions(count))
        frozen = tuner.actor_frozen
        seconds, ran = time_updates(tuner, args.warmup, args.updates)
        phases[phase] = {
            'actor_frozen': frozen,
            'updates': ran,
            'seconds': round(seconds, 3),
            'updates_per_s': round(ran / seconds, 2) if seconds > 0 else None,
        }
        say(f'learner {phase}: {ran} updates in {seconds:.2f} s ({phases[phase]["updates_per_s"]}'
            ' updates/s)')  # fmt: skip
    needed = config.utd_ratio * CONTROL_HZ  # updates/s owed at the control rate
    rate = phases['steady']['updates_per_s'] or 0.0
    settings = asdict(config)
    return tuner, {
        'config': {k: settings[k] for k in ('utd_ratio', 'actor_update_interval', 'batch_size',
                                             'n_step', 'critic_hidden', 'num_critics')},
        'torch_threads': torch.get_num_threads(),
        'transitions': count,
        'phases': phases,
        'updates_per_s': rate,
        'needed_updates_per_s': needed,
        'utd_sustained_ratio': round(rate / needed, 3),
        'sustains_utd_at_50hz': rate >= needed,
    }  # fmt: skip


# -- validation and swap ------------------------------------------------------------------------


def announce(path, version, key):
    """The /policy/update JSON of a candidate file, signed with key."""
    from loco_policy.control.hot_swap import sign

    with open(path, 'rb') as handle:
        blob = handle.read()
    return json.dumps({
        'path': path, 'sha256': hashlib.sha256(blob).hexdigest(), 'version': version,
        'parent_version': version - 1, 'signature': sign(blob, key),
    })  # fmt: skip


def export_candidates(tuner, work, count, updates_between=10):
    """Export count candidates (versions 1..count), a few updates apart; their paths."""
    paths = []
    for _ in range(count):
        tuner.update(limit=updates_between)
        path = os.path.join(work, f'candidate_v{tuner.version + 1:05d}.onnx')
        tuner.export(path)
        paths.append(path)
    return paths


def validation(args, tuner, candidate, key_file, shipped):
    """hot_swap.validate of a signed candidate against the shipped policy; ms p50 and max."""
    from loco_policy.control import hot_swap
    from loco_policy.policy_file import OnnxPolicy

    with open(key_file, 'rb') as handle:
        text = announce(candidate, 1, handle.read())
    active = OnnxPolicy(shipped)
    rng = np.random.default_rng(7)
    mean = tuner.sac.normalizer.mean.numpy()
    std = np.sqrt(tuner.sac.normalizer.var.numpy())
    obs = mean + std * rng.standard_normal((args.observations, spec.OBS_DIM))  # (N, 48)
    times, rejections, figures = [], [], {}
    for _ in range(args.validations):
        start = time.perf_counter()
        try:
            figures = hot_swap.validate(text, key_file, active, obs)[2]
        except hot_swap.UpdateRejected as error:
            rejections.append(str(error))
        times.append(1e3 * (time.perf_counter() - start))
    say(f'validation: p50 {np.median(times):.1f} ms, max {max(times):.1f} ms over {len(times)}')
    return {
        'observations': args.observations,
        'repetitions': len(times),
        'ms_p50': round(float(np.median(times)), 2),
        'ms_max': round(float(max(times)), 2),
        'ms': [round(t, 2) for t in times],
        'accepted': len(times) - len(rejections),
        'rejections': rejections,
        'deviation_max': figures.get('deviation_max'),
    }


def swap(args, env, work, candidates, key_file):
    """Walk the shipped policy under loco-launch; announce each candidate; policy_node's timing."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from std_msgs.msg import String

    from loco_policy.tools.bench import stop, trigger

    status = {}
    node = rclpy.create_node('bench_finetune_operator')
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    node.create_subscription(
        String, '/policy/status', lambda m: status.update(json.loads(m.data)), latched
    )
    updates_pub = node.create_publisher(String, '/policy/update', 10)

    def spin_until(predicate, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end and not predicate():
            executor.spin_once(timeout_sec=0.02)
        return bool(predicate())

    def fresh():
        ages = status.get('input_age_ms') or {}
        return bool(ages) and all(a is not None and a < 60.0 for a in ages.values())

    def decisions():
        counts = status.get('updates') or {}
        return counts.get('accepted', 0) + counts.get('rejected', 0)

    argv = [sys.executable, '-m', 'loco_policy.bringup.launcher', 'use_sim:=true',
            'backend:=mujoco', f'update_key:={key_file}']  # fmt: skip
    log_path = os.path.join(work, 'launch.log')
    log = open(log_path, 'wb')
    stack = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, process_group=0)
    results = []
    try:
        if not spin_until(fresh, 60.0):
            raise RuntimeError('policy_node never reported fresh inputs')
        for _ in range(3):  # PASSIVE -> STAND, as loco_policy.tools.demo.start_standing
            if status.get('mode') == 'DAMP':  # a start-up stall latched the watchdog
                trigger(node, executor, 'reset')
                spin_until(lambda: status.get('mode') == 'PASSIVE', 5.0)
            ok, message = trigger(node, executor, 'start')
            if ok:
                break
            spin_until(lambda: False, 0.5)
        if not ok or not spin_until(lambda: status.get('stand_progress') == 1.0, 15.0):
            raise RuntimeError(f'not standing: {message}; {status.get("fault")}')
        ok, message = trigger(node, executor, 'start')  # STAND -> WALK
        if not ok or not spin_until(lambda: status.get('mode') == 'WALK', 5.0):
            raise RuntimeError(f'not walking: {status.get("mode")} {status.get("fault")}')
        say('swap: walking; collecting observations for the checks')
        spin_until(lambda: False, 2.5)  # 100 WALK observations at 50 Hz
        with open(key_file, 'rb') as handle:
            key = handle.read()
        for version, path in enumerate(candidates, start=1):
            before = decisions()
            updates_pub.publish(String(data=announce(path, version, key)))

            decided = spin_until(lambda n=before: decisions() > n, 20.0)
            counts = status.get('updates') or {}
            accepted = status.get('policy_version') == version
            rejection = (
                counts.get('last_rejection')
                if decided
                else {'version': version, 'reason': 'no decision within 20 s'}
            )
            results.append({
                'version': version, 'accepted': accepted,
                'validation_ms': counts.get('validation_ms') if accepted else None,
                'update_to_active_ms': counts.get('update_to_active_ms') if accepted else None,
                'rejection': None if accepted else rejection,
                'mode_after': status.get('mode'),
            })  # fmt: skip
            say(f'swap v{version}: {results[-1]}')
            if version < len(candidates):
                spin_until(lambda: False, 1.0)  # fresh observations for the next checks
    finally:
        executor.shutdown()
        node.destroy_node()
        stop(stack)
        log.close()
    return {
        'stack': ' '.join(['loco-launch', *argv[3:-1], 'update_key:=KEY']),
        'updates': results,
        'validation_ms': [r['validation_ms'] for r in results],
        'update_to_active_ms': [r['update_to_active_ms'] for r in results],
        'accepted': sum(r['accepted'] for r in results),
    }


def run(args):
    """Run the chosen parts and print the JSON result (last line)."""
    parts = [p for p in args.parts.split(',') if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        say(f'loco-train bench finetune: unknown parts {unknown}; known: {PARTS}')
        return 2
    from loco_policy.nodes.policy_node import SHIPPED_POLICY

    env = ros_environment(args.domain_id)
    result = {
        'bench': 'finetune',
        'parts': parts,
        'cpus': os.cpu_count(),
        'load_average_before': round(os.getloadavg()[0], 2),
        'domain_id': args.domain_id,
    }
    ros = {'transport', 'swap'} & set(parts)
    if ros:
        import rclpy

        os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
        rclpy.init(domain_id=args.domain_id)
    try:
        with tempfile.TemporaryDirectory(prefix='loco-bench-finetune-') as work:
            key_file = os.path.join(work, 'update.key')
            with open(key_file, 'wb') as handle:
                handle.write(os.urandom(32))
            tuner = candidates = None
            if {'learner', 'validation', 'swap'} & set(parts):
                tuner, figures = learner(args, SHIPPED_POLICY)
                if 'learner' in parts:
                    result['learner'] = figures
                candidates = export_candidates(tuner, work, max(1, args.swaps))
            if 'validation' in parts:
                result['validation'] = validation(
                    args, tuner, candidates[0], key_file, SHIPPED_POLICY
                )
            if 'transport' in parts:
                result['transport'] = transport(args, env)
            if 'swap' in parts:
                result['swap'] = swap(args, env, work, candidates[: args.swaps], key_file)
    finally:
        if ros:
            rclpy.try_shutdown()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(publish_main())
