"""`loco-train bench distributed`: data-parallel env steps/s, 1 rank against K ranks.

Each case is a real `torchrun --nproc-per-node K -m loco_train.cli shac|sac` run at the same
total environment count (one torch thread per rank, gloo on CPU). A SHAC run's rate is total
envs x horizon / the median wall time of its iterations after the first (the first holds Warp's
kernel loading and allocator warm-up); a SAC run's is total envs / the median wall time of its
vector steps with updates (the ANYmal preset's network, batch and update ratio unless given).
The cases alternate, repeat by repeat, so that load from other processes on the machine falls
on both alike; the result gives every repeat's rate and the speed-up range.
On a machine other work also loads, wall time tells little, so the result adds the CPU time one
rank spends per iteration: one rank's over a K-rank run's rank's is the speed-up the ranks reach
when each has a core to itself (communication CPU included, waiting excluded).
One JSON object as the last line.
"""

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time


def add_arguments(parser):
    """Add the benchmark's options."""
    parser.add_argument('--algorithm', choices=('shac', 'sac'), default='shac')
    parser.add_argument('--envs', type=int, default=256, help='total environments (all ranks)')
    parser.add_argument('--horizon', type=int, default=16, help='SHAC window (control steps)')
    parser.add_argument(
        '--iterations', type=int, default=5, help='SHAC iterations or SAC vector steps per run'
    )
    parser.add_argument('--sac-args', default='', help='more `loco-train sac` flags, one string')
    parser.add_argument('--shac-args', default='', help='more `loco-train shac` flags, one string')
    parser.add_argument('--ranks', type=int, default=2, help='K, ranks of the parallel case')
    parser.add_argument('--repeats', type=int, default=2, help='runs of each case')
    parser.add_argument('--target', type=float, default=1.7, help='speed-up the result checks')
    parser.add_argument('--timeout', type=float, default=900.0, help='seconds per run at most')


def case_command(ranks, args, log_dir):
    """The torchrun command line of one case."""
    torchrun = [
        sys.executable, '-m', 'torch.distributed.run', '--standalone',
        f'--nproc-per-node={ranks}', '-m', 'loco_train.cli',
    ]  # fmt: skip
    common = [f'--num-envs={args.envs}', f'--log-dir={log_dir}', '--no-progress']
    if args.algorithm == 'shac':
        return (
            torchrun
            + ['shac', *common, f'--horizon={args.horizon}']
            + [f'--iterations={args.iterations}', '--checkpoint-interval=0']
            + shlex.split(args.shac_args)
        )
    # SAC: learning starts after one vector step; then `iterations` steps with updates.
    return torchrun + ['sac', '--env=anymal', *common] + [
        f'--learning-starts={args.envs}', f'--total-steps={args.envs * (args.iterations + 1)}',
        '--checkpoint-interval=0', '--eval-episodes=0', *shlex.split(args.sac_args),
    ]  # fmt: skip


def run_case(ranks, args):
    """One torchrun SHAC run; return its summary with 'env_steps_per_s', 'load_average' added."""
    load = os.getloadavg()[0]  # 1-minute load average before the run: how shared the CPUs are
    with tempfile.TemporaryDirectory(prefix='loco-bench-dist-') as log_dir:
        environ = dict(os.environ, OMP_NUM_THREADS='1')
        command = case_command(ranks, args, log_dir)
        start = time.time()
        done = subprocess.run(
            command, env=environ, capture_output=True, text=True, timeout=args.timeout
        )
        if done.returncode != 0:
            raise RuntimeError(
                f'{ranks}-rank run failed (exit {done.returncode}):\n{done.stderr[-3000:]}'
            )
        summary = json.loads(done.stdout.strip().splitlines()[-1])
    if args.algorithm == 'sac':  # per vector step of all envs
        summary['iteration_s'] = summary['step_s']
        summary['iteration_cpu_s'] = summary['step_cpu_s']
    if summary.get('iteration_s') is None:
        raise RuntimeError(
            'a run needs at least two timed iterations (SAC: vector steps with an update; '
            '--utd-ratio x --envs below 1 runs none on some steps)'
        )
    per_iteration = args.envs * (args.horizon if args.algorithm == 'shac' else 1)
    summary['env_steps_per_s'] = per_iteration / summary['iteration_s']
    summary['wall_s'] = time.time() - start
    summary['load_average'] = load
    return summary


def run(args):
    """Run the cases and print the JSON result (last line)."""
    if args.envs % args.ranks or args.iterations < 2 or args.ranks < 2:
        print(
            'loco-train bench distributed: --envs must be a multiple of --ranks (>= 2) and '
            '--iterations at least 2',
            file=sys.stderr,
        )
        return 2
    rates, loads, cpu = {1: [], args.ranks: []}, [], {1: [], args.ranks: []}
    for repeat in range(args.repeats):
        for ranks in (1, args.ranks):
            summary = run_case(ranks, args)
            rates[ranks].append(summary['env_steps_per_s'])
            loads.append(summary['load_average'])
            cpu[ranks].append(summary['iteration_cpu_s'])
            print(
                f'repeat {repeat}: {ranks} rank(s): {summary["env_steps_per_s"]:,.0f} env steps/s'
                f' ({summary["iteration_s"]:.3f} s/iteration, run {summary["wall_s"]:.0f} s,'
                f' load average {summary["load_average"]:.1f} before)',
                file=sys.stderr,
                flush=True,
            )
    one, many = rates[1], rates[args.ranks]
    pairs = [b / a for a, b in zip(one, many)]  # each repeat's K-rank over 1-rank rate
    result = {
        'benchmark': 'distributed',
        'algorithm': args.algorithm,
        'envs': args.envs,
        'horizon': args.horizon if args.algorithm == 'shac' else None,
        'sac_args': args.sac_args if args.algorithm == 'sac' else None,
        'shac_args': args.shac_args if args.algorithm == 'shac' else None,
        'iterations': args.iterations,
        'ranks': args.ranks,
        'threads_per_rank': 1,
        'cpus': os.cpu_count(),
        'load_average_before_runs': [round(v, 2) for v in loads],
        'env_steps_per_s': {str(k): [round(v, 1) for v in r] for k, r in rates.items()},
        'speedup': round(max(many) / max(one), 3),
        'speedup_per_repeat': [round(p, 3) for p in pairs],
        'speedup_range': [round(min(pairs), 3), round(max(pairs), 3)],
        'rank_cpu_s_per_iteration': {str(k): [round(v, 3) for v in c] for k, c in cpu.items()},
        'cpu_speedup': round(min(cpu[1]) / min(cpu[args.ranks]), 3),
        'target': args.target,
        'meets_target': max(many) / max(one) >= args.target,
    }
    print(json.dumps(result), flush=True)
    return 0
