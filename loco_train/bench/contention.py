"""`loco-train bench contention`: a training run alone and beside a busy process, by wait policy.

torch's CPU operators run on an OpenMP thread team as wide as the machine. With libgomp's
active wait policy a thread that finishes its share spins until the others arrive; when another
process holds one of the cores (a second training run, the robot stack, a compiler), the thread
it displaced is the one the spinners wait for, and every parallel region costs a scheduler time
slice. Each case here is a real `loco-train shac|ppo` run of a few iterations in its own process,
timed from start to exit, under OMP_WAIT_POLICY ACTIVE (libgomp's spinning) or PASSIVE (what
`loco-train` sets unless the environment says otherwise), and torch's default threads (one per
core; `--threads 0` for SHAC, whose own default is one) or OMP_NUM_THREADS=1, alone
or beside one process spinning on the CPU. The cases alternate, repeat by repeat. One JSON
object as the last line: every case's wall times and each one against ACTIVE alone.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

CASES = (
    ('active', None, False),
    ('passive', None, False),
    ('active', '1', False),
    ('active', None, True),
    ('passive', None, True),
    ('active', '1', True),
)
"""(OMP_WAIT_POLICY, OMP_NUM_THREADS or None for torch's default, beside a busy process)."""

BUSY = 'while True:\n    pass\n'
"""The neighbour: one Python process spinning on one core."""


def add_arguments(parser):
    """Add the benchmark's options."""
    parser.add_argument('--algorithm', choices=('shac', 'ppo'), default='shac')
    parser.add_argument('--envs', type=int, default=64, help='environments of each run')
    parser.add_argument(
        '--iterations', type=int, default=30, help='SHAC windows or PPO iterations'
    )
    parser.add_argument('--repeats', type=int, default=2, help='runs of each case')
    parser.add_argument('--timeout', type=float, default=600.0, help='seconds per run at most')


def command(args, log_dir):
    """The `loco-train` command line of one run."""
    argv = [sys.executable, '-m', 'loco_train.cli', args.algorithm, f'--num-envs={args.envs}']
    argv += [f'--iterations={args.iterations}', f'--log-dir={log_dir}']
    if args.algorithm == 'shac':
        # --threads 0: torch's default team; SHAC's own default is one thread
        argv += ['--horizon=16', '--checkpoint-interval=0', '--no-progress', '--threads=0']
    return argv


def run_case(case, args):
    """Wall time (s) of one run under case = (policy, threads, busy)."""
    policy, threads, busy = case
    env = dict(os.environ, OMP_WAIT_POLICY=policy.upper())
    env.pop('OMP_NUM_THREADS', None)
    if threads is not None:
        env['OMP_NUM_THREADS'] = threads
    neighbour = subprocess.Popen([sys.executable, '-c', BUSY]) if busy else None
    try:
        with tempfile.TemporaryDirectory() as log_dir:
            start = time.perf_counter()
            done = subprocess.run(
                command(args, log_dir), env=env, capture_output=True, text=True,
                timeout=args.timeout,
            )  # fmt: skip
            wall = time.perf_counter() - start
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    if done.returncode != 0:
        raise RuntimeError(f'{case}: exit {done.returncode}\n{done.stderr[-2000:]}')
    return wall


def name(case):
    """A case's key in the result, e.g. 'active_1thread_busy'."""
    policy, threads, busy = case
    return f'{policy}_{"1thread" if threads else "default"}_{"busy" if busy else "alone"}'


def run(args):
    """Time every case args.repeats times, interleaved; print the table and one JSON line."""
    walls = {name(c): [] for c in CASES}
    for repeat in range(args.repeats):
        for case in CASES:
            walls[name(case)].append(round(run_case(case, args), 2))
            print(f'repeat {repeat}: {name(case)} {walls[name(case)][-1]} s', flush=True)
    base = min(walls['active_default_alone'])
    result = {
        'bench': 'contention',
        'algorithm': args.algorithm,
        'envs': args.envs,
        'iterations': args.iterations,
        'cpus': os.cpu_count(),
        'wall_s': walls,
        'vs_active_alone': {k: round(min(v) / base, 2) for k, v in walls.items()},
    }
    print(json.dumps(result))
    return 0
