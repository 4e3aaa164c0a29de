"""`loco-train bench sac`: SAC gradient updates per second; one JSON object as the last line.

Measured on ANYmal-shaped data (48 observations, 12 actions, the spec's action bounds) for the
default SACConfig and for the runner's ANYmal preset, each as update() alone and as replay sampling
(n-step aggregation) plus update(). The other figure, env-steps to a reference return beside
rsl-rl-lib PPO, comes from training runs on the ANYmal environment with the same reward: `--sac-run
DIR --ppo-run DIR` read their TensorBoard logs (loco_train.experiments.compare) and report the
steps each took to reach `--fraction` of PPO's final return; without them it is not measured.
"""

import argparse
from dataclasses import replace
import json
import os
import time

import torch

from loco_policy import spec
from loco_train.runners.sac import PRESETS
from loco_train.sac import anymal_action_bounds, ReplayBuffer, SAC, SACConfig


def add_arguments(parser) -> None:
    """Add the benchmark's options."""
    parser.add_argument('--seconds', type=float, default=3.0, help='timed seconds per case')
    parser.add_argument('--device', default='cpu', help='torch device')
    parser.add_argument('--threads', type=int, default=1, help='torch threads (0: default)')
    parser.add_argument(
        '--learner-threads',
        type=int,
        default=1,
        help="the second end-to-end run's learner threads (the first takes the preset's)",
    )
    parser.add_argument('--skip-preset', action='store_true', help='only the default config')
    parser.add_argument(
        '--compile',
        action=argparse.BooleanOptionalAction,
        default=None,
        help='torch.compile the update (SACConfig.compile; default: off, the preset its own)',
    )
    parser.add_argument(
        '--cuda-graphs',
        action='store_true',
        help='replay each update from a CUDA graph (SACConfig.cuda_graphs)',
    )
    parser.add_argument(
        '--profile',
        action='store_true',
        help='also count, per update, operators, kernel launches, host waits and device time '
        '(torch.profiler)',
    )
    parser.add_argument('--sac-run', default='', help='`loco-train sac --env anymal` run dir')
    parser.add_argument('--ppo-run', default='', help='`loco-train ppo` run dir, same reward')
    parser.add_argument('--fraction', type=float, default=0.9, help='of PPO final return')
    parser.add_argument(
        '--reference-return', type=float, default=None, help='absolute (overrides --fraction)'
    )
    parser.add_argument('--ppo-steps-per-iteration', type=int, default=None)
    parser.add_argument(
        '--env-steps',
        type=int,
        default=0,
        help='also time the ANYmal preset end to end (env + updates): this many vector steps',
    )
    parser.add_argument(
        '--baseline-tree',
        default='',
        help='a checkout of other code (e.g. `git worktree add /tmp/sac_old HEAD~1`) whose '
        'runner is timed the same way, back to back, for --env-steps',
    )
    parser.add_argument(
        '--same-preset',
        action='store_true',
        help="time the baseline tree with this tree's ANYmal preset (its runner ignores what it "
        'does not know, e.g. overlap) instead of its own',
    )


def reference_return_steps(args) -> dict:
    """Env steps of SAC and PPO to fraction x PPO's final return, from their run logs."""
    from loco_train.experiments import compare as compare_runs

    if not (args.sac_run and args.ppo_run):
        return {
            'sac': None,
            'ppo': None,
            'measured': False,
            'reason': 'not measured: give --sac-run and --ppo-run (training runs on the ANYmal '
            'environment with the same reward weights)',
        }
    try:
        ppo = compare_runs.ppo_curve(args.ppo_run, args.ppo_steps_per_iteration)
        sac = compare_runs.sac_curve(args.sac_run)
    except ValueError as error:  # not a run directory: say so in the result
        return {'sac': None, 'ppo': None, 'measured': False, 'reason': str(error)}
    final = float(compare_runs.np.mean(ppo[1][-compare_runs.FINAL_WINDOW :]))
    steps = ppo[0]  # (iteration + 1) x steps per iteration, at each logged iteration
    steps_per_iteration = float(steps[0] if len(steps) < 2 else compare_runs.np.diff(steps).min())
    reference = args.fraction * final if args.reference_return is None else args.reference_return
    return {
        'measured': True,
        'reference_return': reference,
        'ppo_final_return': final,
        'ppo': compare_runs.steps_to_reach(ppo[0], ppo[1], reference),
        'sac': compare_runs.steps_to_reach(sac[0], sac[1], reference),
        'sac_best_return': float(sac[1].max()),
        'sac_env_steps': float(sac[0][-1]),
        'ppo_return_at_sac_env_steps': float(compare_runs.np.interp(sac[0][-1], ppo[0], ppo[1])),
        'sac_s_per_1000_env_steps': sac[2],
        'ppo_s_per_1000_env_steps': 1000.0 * ppo[2] / steps_per_iteration,
        'ppo_env_steps': float(ppo[0][-1]),
    }


def anymal_preset_config() -> SACConfig:
    """The SACConfig of the runner's 'anymal' preset."""
    overrides = {k[4:]: v for k, v in PRESETS['anymal'].items() if k.startswith('sac.')}
    return replace(SACConfig(), **overrides)


def _filled_buffer(cfg: SACConfig, device) -> ReplayBuffer:
    """A replay buffer of random ANYmal-shaped transitions with some episode ends."""
    num_envs, rows = 64, 256
    buf = ReplayBuffer(num_envs * rows, num_envs, spec.OBS_DIM, spec.ACTION_DIM, device)
    g = torch.Generator().manual_seed(0)
    for _ in range(rows):
        buf.add(
            torch.randn(num_envs, spec.OBS_DIM, generator=g),
            torch.rand(num_envs, spec.ACTION_DIM, generator=g) * 2 - 1,
            torch.randn(num_envs, generator=g),
            torch.randn(num_envs, spec.OBS_DIM, generator=g),
            torch.rand(num_envs, generator=g) < 0.01,
            torch.rand(num_envs, generator=g) < 0.005,
        )
    return buf


def _rate(step, seconds: float, device) -> tuple[float, int]:
    """Run step() for about `seconds` after a warm-up; return (calls per second, calls).

    The warm-up covers cuda_graphs' eager calls and captures (3 of each kind, then one).
    """
    for _ in range(10):
        step()
    sync = torch.cuda.synchronize if torch.device(device).type == 'cuda' else (lambda: None)
    sync()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        calls += 1
    sync()
    return calls / (time.perf_counter() - start), calls


def profile_updates(sac: SAC, batch, device, updates: int = 20) -> dict:
    """Per update: host time to submit, time to finish, operators, launches, waits, device time.

    A waiting call (a stream or device synchronisation, a copy to the host) stops the host from
    running ahead of the device; on a GPU the update is bound by the host when submitting it takes
    about as long as finishing it.
    """
    from torch.profiler import profile, ProfilerActivity

    cuda = torch.device(device).type == 'cuda'
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(3):
        sac.update(batch)
    sync()
    start = time.perf_counter()
    for _ in range(updates):
        sac.update(batch)
    submitted = time.perf_counter() - start
    sync()
    finished = time.perf_counter() - start
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(updates):
            sac.update(batch)
        sync()
    events = prof.key_averages()

    def count(names, less=0):
        return max(0, sum(e.count for e in events if e.key in names) - less) / updates

    launches = {'cudaLaunchKernel', 'cudaLaunchKernelExC', 'cuLaunchKernel', 'cuLaunchKernelEx'}
    waits = {'cudaStreamSynchronize', 'cudaDeviceSynchronize', 'cudaEventSynchronize'}
    device_us = sum(
        getattr(e, 'self_device_time_total', 0.0)
        for e in events
        if str(getattr(e, 'device_type', '')).endswith('CUDA')
    )
    return {
        'submit_ms': round(1e3 * submitted / updates, 3),
        'finish_ms': round(1e3 * finished / updates, 3),
        'operators': count({e.key for e in events if e.key.startswith('aten::')}),
        'kernel_launches': count(launches),
        'graph_launches': count({'cudaGraphLaunch'}),
        'host_waits': count(waits, less=1),  # the profile's own closing synchronisation
        'scalar_reads': count({'aten::_local_scalar_dense'}),
        'copies': count({'cudaMemcpyAsync', 'cudaMemcpy'}),  # any direction
        'copies_to_host': count({e.key for e in events if e.key.startswith('Memcpy DtoH')}),
        'device_kernel_ms': round(device_us / 1e3 / updates, 3),
    }


def measure(name: str, cfg: SACConfig, seconds: float, device, profiled: bool = False) -> dict:
    """Updates per second of one configuration, with and without replay sampling."""
    torch.manual_seed(0)
    b, c = anymal_action_bounds()
    sac = SAC(spec.OBS_DIM, b, c, cfg, device)
    buf = _filled_buffer(cfg, device)
    batch = buf.sample(cfg.batch_size, cfg.n_step, cfg.gamma)
    update_rate, n_update = _rate(lambda: sac.update(batch), seconds, device)
    full_rate, n_full = _rate(
        lambda: sac.update(buf.sample(cfg.batch_size, cfg.n_step, cfg.gamma)), seconds, device
    )
    extra = {'profile': profile_updates(sac, batch, device)} if profiled else {}
    return extra | {
        'config': name,
        'actor_hidden': list(cfg.actor_hidden),
        'critic_hidden': list(cfg.critic_hidden),
        'num_critics': cfg.num_critics,
        'batch_size': cfg.batch_size,
        'n_step': cfg.n_step,
        'updates_per_s': round(update_rate, 2),
        'sample_and_update_per_s': round(full_rate, 2),
        'transitions_per_s_at_batch': round(full_rate * cfg.batch_size, 1),
        'timed_updates': n_update + n_full,
        'skipped': sac.num_skipped,
    }


ENV_STEPS_SCRIPT = """
import json, sys, tempfile, time
sys.path.insert(0, {tree!r})
import torch
from loco_train.envs.vec_env import make_env
from loco_train.runners.sac import PRESETS, RunnerConfig, SACRunner, set_option
cfg = RunnerConfig(env='anymal', progress=False, eval_episodes=0, checkpoint_interval=0)
preset = {preset!r} or PRESETS['anymal']
for attr, value in preset.items():
    if not attr.startswith('env.'):  # environment options: the reward, not the speed
        set_option(cfg, attr, value)
threads = {threads} if {threads} > 0 else cfg.threads  # the preset's, as `loco-train sac` sets
torch.set_num_threads(threads or torch.get_num_threads())
cfg.learning_starts, cfg.log_dir = cfg.num_envs, tempfile.mkdtemp()
torch.manual_seed(0)
env = make_env('anymal', cfg.num_envs, 'cpu', 0)
runner = SACRunner(env, cfg)
cfg.total_steps = cfg.num_envs * 3  # a row of transitions, then 2 steps of updates: warm-up
runner.learn()  # (a compiled update compiles here)
cfg.total_steps = cfg.num_envs * (3 + {steps})
start = time.perf_counter()
runner.learn()
seconds = time.perf_counter() - start
print(json.dumps({{'env_steps_per_s': {steps} * cfg.num_envs / seconds, 'seconds': seconds,
                  'updates': runner.sac.num_updates, 'overlap': getattr(cfg, 'overlap', False),
                  'num_envs': cfg.num_envs, 'torch_threads': torch.get_num_threads(),
                  'learner_threads': getattr(cfg, 'learner_threads', None)}}))
"""


def anymal_env_steps(tree: str, steps: int, threads: int, preset: dict | None = None) -> dict:
    """ANYmal-preset env steps per second of the runner in `tree` (a subprocess), end to end.

    threads: torch threads; 0 takes the preset's own (RunnerConfig.threads, 0 = all cores).
    preset: the PRESETS['anymal'] entry to apply (None: the tree's own).
    """
    import subprocess
    import sys

    script = ENV_STEPS_SCRIPT.format(
        tree=os.path.abspath(tree), threads=threads, steps=steps, preset=preset or {}
    )
    done = subprocess.run(
        [sys.executable, '-c', script], capture_output=True, text=True, cwd=tree, check=False
    )
    if done.returncode != 0:
        return {'tree': tree, 'error': done.stderr.strip().splitlines()[-1:]}
    return {'tree': tree} | json.loads(done.stdout.splitlines()[-1])


def run(args) -> int:
    """Time SAC updates and print the JSON result."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(args.threads or threads)
        used_threads = torch.get_num_threads()
        base = SACConfig(compile=bool(args.compile), cuda_graphs=args.cuda_graphs)
        cases = [measure('default', base, args.seconds, args.device, args.profile)]
        if not args.skip_preset:
            preset = anymal_preset_config()
            compiled = preset.compile if args.compile is None else args.compile
            preset = replace(preset, compile=compiled, cuda_graphs=args.cuda_graphs)
            cases.append(measure('anymal_preset', preset, args.seconds, args.device, args.profile))
    finally:
        torch.set_num_threads(threads)
    env_steps = []
    if args.env_steps > 0:
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from loco_train.runners.sac import PRESETS

        # This tree with the preset's threads, then with --threads and --learner-threads, then
        # the baseline tree with its own preset or (--same-preset) this tree's.
        learner = dict(PRESETS['anymal'], learner_threads=args.learner_threads)
        runs = [(here, 0, None), (here, used_threads, learner)]
        if args.baseline_tree:
            baseline = dict(PRESETS['anymal']) if args.same_preset else None
            runs.append((args.baseline_tree, 0, baseline))
        for tree, threads_used, preset in runs:
            same = preset is not None and tree == args.baseline_tree
            env_steps.append(anymal_env_steps(tree, args.env_steps, threads_used, preset))
            env_steps[-1]['preset'] = 'this tree' if same or tree == here else 'its own'
            print(f'anymal preset end to end, {tree}: {env_steps[-1]}', flush=True)
    for case in cases:
        print(
            f'{case["config"]}: {case["updates_per_s"]} updates/s, '
            f'{case["sample_and_update_per_s"]} with n-step sampling (batch {case["batch_size"]})'
        )
    result = {
        'bench': 'sac',
        'device': str(args.device),
        'torch_threads': used_threads,
        'compile': args.compile,
        'cuda_graphs': args.cuda_graphs,
        'obs_dim': spec.OBS_DIM,
        'action_dim': spec.ACTION_DIM,
        'cases': cases,
        'anymal_env_steps': env_steps,
        'env_steps_to_reference_return': reference_return_steps(args),
    }
    print(json.dumps(result), flush=True)
    return 0
