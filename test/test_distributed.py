"""Data-parallel SHAC, SAC and PPO under real torchrun processes (gloo on CPU).

Two ranks with N/2 environments each must update exactly as one process with N; Ctrl-C and a
killed rank must end every rank.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from loco_train.envs.anymal import AnymalEnv, AnymalEnvConfig
from loco_train.experiments.compare import read_scalars
from loco_train.policy.atomic_io import torch_load

SHAC_ARGS = ['--num-envs=8', '--horizon=4', '--adjoint-clip=0', '--no-progress']
"""A small SHAC run; the adjoint clip scales by a per-rank median, so it is off here."""

SAC_ARGS = [
    '--env=anymal', '--num-envs=8', '--learning-starts=16', '--batch-size=64',
    '--utd-ratio=0.25', '--hidden=32,32', '--matmul-dtype=float32', '--eval-episodes=0',
    '--checkpoint-interval=0', '--no-progress',
]  # fmt: skip
"""A small SAC run: after two vector steps, 2 updates per step of 8 transitions. float32
products: in bfloat16 each rank's gradient is rounded before the sum, which equality to float32
tolerance cannot allow for."""

LONG_RUNS = {
    'shac': [*SHAC_ARGS, '--iterations=100000', '--checkpoint-interval=1'],
    'sac': [
        *SAC_ARGS[:-2], '--no-progress', '--total-steps=100000000', '--checkpoint-interval=8'
    ],
}  # fmt: skip
"""Runs that train until stopped, with a checkpoint soon after they start learning."""

TOLERANCE = 2e-5
"""float32 sums in another order (gradients and normaliser moments summed over ranks)."""

ADAM_TOLERANCE = 5e-4
"""SHAC's weights after Adam steps of lr 2e-3, a quarter of one step: Adam divides each gradient
by its own running magnitude, so where a gradient is near eps (1e-8) the rounding of the rank sum
moves that weight by a share of a step. Seen: 5.9e-5 after one window on an AVX2 host; 2.1e-4
after two windows, and 1.5e-4 after a scaled-back step, on an AVX-512 host, whose kernels sum a
4-row and an 8-row batch in other orders. Another seed moves the weights by about 0.8."""

MOMENT_TOLERANCE = 1e-3
"""Adam's first and second moments of two runs, relative to each tensor's largest (the summed
gradients): 2.8e-4 seen after two windows on an AVX-512 host; another seed differs by about 5."""


def _environ(**extra):
    """The test's environment for the spawned processes: one torch thread, short timeouts."""
    return dict(os.environ, OMP_NUM_THREADS='1', LOCO_DIST_TIMEOUT_S='20', **extra)


def _torchrun(ranks, *args):
    """argv of `torchrun --nproc-per-node ranks -m loco_train.cli ARGS`."""
    return [
        sys.executable,
        '-m',
        'torch.distributed.run',
        '--standalone',
        f'--nproc-per-node={ranks}',
        '-m',
        'loco_train.cli',
        *args,
    ]


def _run(argv, timeout=240):
    """Run argv to completion; return the CompletedProcess (stdout, stderr as text)."""
    return subprocess.run(
        argv, env=_environ(), capture_output=True, text=True, timeout=timeout, check=False
    )


def _summary(done):
    """The JSON line a trainer printed last; fail with its stderr when it did not succeed."""
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith('{')]
    assert len(lines) == 1, done.stdout  # rank 0 alone prints the result
    return json.loads(lines[0])


def _shac_state(path):
    """The SHAC state dict of a checkpoint."""
    return torch_load(path, map_location='cpu')['shac']


def _sac_state(path):
    """The SAC state dict of a checkpoint."""
    return torch_load(path, map_location='cpu')['sac']


def _resume_both_ways(tmp_path, command, args):
    """Resume the 1-process run in tmp_path/one with args, as 1 process and as 2 ranks; return
    the two summaries (each run in its own directory, tmp_path/one_resumed, two_resumed)."""
    summaries = []
    for name, argv in (
        ('one_resumed', [sys.executable, '-m', 'loco_train.cli', command]),
        ('two_resumed', _torchrun(2, command)),
    ):
        (tmp_path / name).mkdir()
        start = tmp_path / name / 'start.pt'
        start.write_bytes((tmp_path / 'one' / 'checkpoint.pt').read_bytes())
        summaries.append(_summary(_run([*argv, *args, f'--resume={start}'])))
    return summaries


def _max_difference(a, b, parts=('actor', 'critic', 'target_critic', 'normalizer')):
    """Largest absolute difference over the networks and the normaliser of two states."""
    worst = 0.0
    for part in parts:
        for name, value in a[part].items():
            diff = (value.double() - b[part][name].double()).abs().max()
            worst = max(worst, float(diff))
    return worst


def _moment_difference(a, b, optimizers=('actor_opt', 'critic_opt')):
    """Largest difference of Adam's moments of two SHAC states, relative to each tensor's max."""
    worst = 0.0
    for name in optimizers:
        for key, state in a[name]['state'].items():
            for moment in ('exp_avg', 'exp_avg_sq'):
                x, y = state[moment].double(), b[name]['state'][key][moment].double()
                scale = max(float(x.abs().max()), 1e-30)
                worst = max(worst, float((x - y).abs().max()) / scale)
    return worst


def test_population_rows_equal_one_process_through_resets():
    """Ranks' environments are rows of the one-process population, resets and pushes included."""
    config = dict(episode_s=0.3)  # 15 control steps: every environment resets twice below
    whole = AnymalEnv(8, AnymalEnvConfig(**config), seed=3)
    halves = [
        AnymalEnv(4, AnymalEnvConfig(env_offset=4 * r, population=8, **config), seed=3)
        for r in range(2)
    ]
    generator = torch.Generator().manual_seed(0)
    obs = [whole.reset(seed=5), *(env.reset(seed=5) for env in halves)]
    resets = 0
    for _ in range(40):
        action = torch.rand(8, 12, generator=generator) * 0.6 - 0.3
        out = whole.step(action)
        parts = [env.step(action[4 * r : 4 * r + 4]) for r, env in enumerate(halves)]
        obs = [out[0], *(p[0] for p in parts)]
        assert torch.equal(torch.cat(obs[1:]), obs[0])
        assert torch.equal(torch.cat([p[1] for p in parts]), out[1])
        assert torch.equal(
            torch.cat([env.commands.command for env in halves]), whole.commands.command
        )
        resets += int((out[2] | out[3]).sum())
    assert resets >= 8


def test_population_must_hold_the_rows():
    """A slice outside the population is refused."""
    with pytest.raises(ValueError, match='population'):
        AnymalEnv(4, AnymalEnvConfig(env_offset=6, population=8))


def test_two_ranks_equal_one_rank_after_one_update(tmp_path):
    """2 ranks x 4 envs and 1 process x 8 envs give the same weights after one SHAC window."""
    one = _summary(
        _run(
            [sys.executable, '-m', 'loco_train.cli', 'shac', *SHAC_ARGS, '--iterations=1']
            + [f'--log-dir={tmp_path / "one"}']
        )
    )
    two = _summary(
        _run(_torchrun(2, 'shac', *SHAC_ARGS, '--iterations=1', f'--log-dir={tmp_path / "two"}'))
    )
    assert (one['world_size'], two['world_size']) == (1, 2)
    assert one['env_steps'] == two['env_steps'] == 8 * 4
    a, b = _shac_state(one['checkpoint']), _shac_state(two['checkpoint'])
    assert _max_difference(a, b) < ADAM_TOLERANCE
    assert _moment_difference(a, b) < MOMENT_TOLERANCE  # the summed gradients
    assert _max_difference(a, b, ('normalizer',)) < TOLERANCE
    assert float(a['normalizer']['count']) == float(b['normalizer']['count']) == 8 * 4

    # --resume loads on every rank: one more window from the 1-process checkpoint, both ways
    for summary in _resume_both_ways(tmp_path, 'shac', [*SHAC_ARGS, '--iterations=2']):
        assert summary['iterations'] == 2
    c = _shac_state(tmp_path / 'one_resumed' / 'checkpoint.pt')
    d = _shac_state(tmp_path / 'two_resumed' / 'checkpoint.pt')
    assert c['iterations'] == d['iterations'] == 2
    assert _max_difference(c, d) < ADAM_TOLERANCE
    assert _moment_difference(c, d) < MOMENT_TOLERANCE
    assert _max_difference(a, c) > 100 * TOLERANCE


def test_two_ranks_equal_one_rank_with_the_normaliser_merged_per_window(tmp_path):
    """--normalizer-update window: one all-reduce of the window's moments, the same update."""
    args = [*SHAC_ARGS, '--iterations=2', '--normalizer-update=window']
    one = _summary(
        _run(
            [sys.executable, '-m', 'loco_train.cli', 'shac', *args, f'--log-dir={tmp_path / "a"}']
        )
    )
    two = _summary(_run(_torchrun(2, 'shac', *args, f'--log-dir={tmp_path / "b"}')))
    a, b = _shac_state(one['checkpoint']), _shac_state(two['checkpoint'])
    assert _max_difference(a, b) < ADAM_TOLERANCE
    assert _moment_difference(a, b) < MOMENT_TOLERANCE
    # start states once, then every later step's observations: 8 x (1 + 3) + 8 x 4
    assert float(a['normalizer']['count']) == float(b['normalizer']['count']) == 8 * 4 * 2


def test_two_ranks_equal_one_rank_with_a_privileged_critic_and_a_trust_region(tmp_path):
    """The critic's privileged rows (the drawn dynamics too) and the all-reduced action change
    split like the rest.

    One window: the scaled-back step makes the next window's gradient sensitive to the last
    float bit, so a second one is not compared.
    """
    args = [*SHAC_ARGS, '--iterations=1', '--critic-privileged', '--max-action-change=1e-3']
    args += ['--privileged=dynamics', '--randomize=gain_scale=0.7:1.3', '--randomize=delay=0:0.02']
    one = _summary(
        _run(
            [sys.executable, '-m', 'loco_train.cli', 'shac', *args, f'--log-dir={tmp_path / "a"}']
        )
    )
    two = _summary(_run(_torchrun(2, 'shac', *args, f'--log-dir={tmp_path / "b"}')))
    a, b = _shac_state(one['checkpoint']), _shac_state(two['checkpoint'])
    assert a['critic']['net.0.0.weight'].shape[1] == 48 + 5  # height, gain, payload, mu, delay
    for run in ('a', 'b'):  # the step was scaled back in both
        _, scales = read_scalars(str(tmp_path / run), 'shac/trust_scale')
        assert scales.shape == (1,) and scales[0] < 0.5
    assert _max_difference(a, b) < ADAM_TOLERANCE
    assert _moment_difference(a, b) < MOMENT_TOLERANCE


def test_update_differs_with_other_environments(tmp_path):
    """A run on another seed ends far from the tolerance: the equality above is not vacuous."""
    runs = []
    for seed in (0, 1):
        log_dir = tmp_path / str(seed)
        argv = [sys.executable, '-m', 'loco_train.cli', 'shac', *SHAC_ARGS, '--iterations=1']
        runs.append(_summary(_run(argv + [f'--seed={seed}', f'--log-dir={log_dir}'])))
    a, b = (_shac_state(run['checkpoint']) for run in runs)
    assert _max_difference(a, b) > 20 * ADAM_TOLERANCE
    assert _moment_difference(a, b) > 1000 * MOMENT_TOLERANCE


def _children():
    """{pid: [child pids]} of the live (not zombie) processes, from /proc."""
    tree = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open(f'/proc/{entry}/stat') as handle:
                fields = handle.read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        if fields[0] != 'Z':  # fields[0]: state, fields[1]: parent pid
            tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def _descendants(pid):
    """Live processes started, directly or not, by pid (torchrun's ranks have own sessions)."""
    tree, found, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _rank_pid(pid, rank):
    """Pid of the loco_train.cli rank with RANK=rank under torchrun pid, or None."""
    for child in _descendants(pid):
        try:
            with open(f'/proc/{child}/environ', 'rb') as handle:
                environ = handle.read().split(b'\0')
            with open(f'/proc/{child}/cmdline', 'rb') as handle:
                cmdline = handle.read()
        except OSError:
            continue
        if f'RANK={rank}'.encode() in environ and b'loco_train.cli' in cmdline:
            if b'torch.distributed.run' not in cmdline:
                return child
    return None


def _start_long_run(tmp_path, command='shac'):
    """A 2-rank run in its own session; return (process, rank pids, stderr) once it trains."""
    stderr = tmp_path / 'stderr.txt'
    log_dir = tmp_path / 'run'
    argv = _torchrun(2, command, *LONG_RUNS[command])
    with open(stderr, 'w') as err:
        process = subprocess.Popen(
            [*argv, f'--log-dir={log_dir}'],
            env=_environ(),
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    deadline = time.monotonic() + 180
    while not (log_dir / 'checkpoint.pt').exists():  # the first window is done on both ranks
        assert process.poll() is None, stderr.read_text()[-3000:]
        assert time.monotonic() < deadline, 'the run did not reach its first checkpoint'
        time.sleep(0.2)
    ranks = [_rank_pid(process.pid, r) for r in range(2)]
    assert all(ranks), ranks
    return process, ranks, stderr


def _alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open(f'/proc/{pid}/stat') as handle:
            return handle.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def _assert_all_gone(process, ranks, seconds):
    """torchrun and every rank exit within seconds; return torchrun's exit status."""
    try:
        status = process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        for pid in [process.pid, *ranks]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        raise AssertionError(f'torchrun still running {seconds} s after the signal') from None
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in ranks):
        if time.monotonic() > deadline:
            left = [pid for pid in ranks if _alive(pid)]
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            raise AssertionError(f'ranks left behind: {left}')
        time.sleep(0.1)
    return status


@pytest.mark.parametrize('command', ['shac', 'sac'])
def test_ctrl_c_ends_every_rank(tmp_path, command):
    """SIGINT to the process group (Ctrl-C in a terminal) ends torchrun and both ranks."""
    process, ranks, stderr = _start_long_run(tmp_path, command)
    started = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)  # the terminal's foreground group: torchrun only
    status = _assert_all_gone(process, ranks, 30)
    assert status != 0
    assert time.monotonic() - started < 30
    assert f'loco-train {command}: interrupted' in stderr.read_text()  # rank 0 unwound


@pytest.mark.parametrize('command', ['shac', 'sac'])
def test_killed_rank_ends_every_rank(tmp_path, command):
    """SIGKILL of rank 1 mid-training ends rank 0 and torchrun with an error, no hang."""
    process, ranks, _ = _start_long_run(tmp_path, command)
    os.kill(ranks[1], signal.SIGKILL)
    assert _assert_all_gone(process, ranks, 60) != 0


SAC_PARTS = ('actor', 'critic', 'critic_target', 'normalizer')
"""What a SAC update changes, besides log alpha and the optimisers."""


def _sac_difference(a, b):
    """Largest absolute difference of networks, normaliser and log alpha of two SAC states."""
    alpha = float((a['log_alpha'].double() - b['log_alpha'].double()).abs())
    return max(_max_difference(a, b, SAC_PARTS), alpha)


def test_sac_two_ranks_equal_one_rank(tmp_path):
    """2 ranks x 4 envs and 1 process x 8 envs give the same SAC after its updates, and resume.

    Both draw the same global batches and noise; each rank learns on its own transitions and
    the gradients are summed by share, so only float summation order differs.
    """
    steps = ['--total-steps=32']  # 4 vector steps: 2 to fill, then 2 x 2 updates
    one = _summary(
        _run(
            [sys.executable, '-m', 'loco_train.cli', 'sac', *SAC_ARGS, *steps]
            + [f'--log-dir={tmp_path / "one"}']
        )
    )
    two = _summary(_run(_torchrun(2, 'sac', *SAC_ARGS, *steps, f'--log-dir={tmp_path / "two"}')))
    assert (one['world_size'], two['world_size']) == (1, 2)
    assert one['env_steps'] == two['env_steps'] == 32
    assert one['updates'] == two['updates'] == 4
    a, b = _sac_state(one['checkpoint']), _sac_state(two['checkpoint'])
    assert _sac_difference(a, b) < TOLERANCE
    assert float(a['normalizer']['count']) == float(b['normalizer']['count']) == 32
    assert not (tmp_path / 'two' / 'replay-rank1.pt').exists()  # no replay saved unless asked

    # Resumed without replay files: 2 vector steps refill learning_starts, then 2 x 2 updates.
    for summary in _resume_both_ways(tmp_path, 'sac', [*SAC_ARGS, '--total-steps=64']):
        assert summary['env_steps'] == 64
    c = _sac_state(tmp_path / 'one_resumed' / 'checkpoint.pt')
    d = _sac_state(tmp_path / 'two_resumed' / 'checkpoint.pt')
    assert c['num_updates'] == d['num_updates'] == 8
    assert _sac_difference(c, d) < TOLERANCE
    assert _sac_difference(a, c) > 100 * TOLERANCE  # the updates moved the networks


def test_sac_batch_too_small_for_the_ranks_is_refused():
    """A global batch that leaves a rank fewer than 16 transitions is refused on every rank."""
    args = [a for a in SAC_ARGS if not a.startswith('--batch-size')]
    done = _run(_torchrun(2, 'sac', *args, '--batch-size=16', '--total-steps=32'))
    assert done.returncode != 0
    assert 'below 16 per rank' in done.stderr


def test_uneven_split_is_refused():
    """A total --num-envs that K ranks cannot share evenly is refused on every rank."""
    done = _run(_torchrun(2, 'shac', '--num-envs=7', '--iterations=1', '--no-progress'))
    assert done.returncode != 0
    assert 'must be a multiple' in done.stderr


def test_ppo_two_ranks(tmp_path):
    """rsl-rl-lib's multi-GPU path trains PPO on two gloo ranks; rank 0 alone writes the run."""
    done = _run(
        _torchrun(2, 'ppo', '--num-envs=8', '--steps-per-env=4', '--iterations=2')
        + [f'--log-dir={tmp_path}', '--hidden=32,32']
    )
    summary = _summary(done)
    assert summary['world_size'] == 2
    assert summary['env_steps'] == 2 * 4 * 8
    assert (tmp_path / 'model_1.pt').exists() and (tmp_path / 'run.json').exists()
    assert len(list(tmp_path.glob('events.out.tfevents.*'))) == 1


BENCH_CASES = {
    'shac': ['--envs=8', '--horizon=4', '--iterations=2'],
    'sac': [
        '--envs=8',
        '--iterations=2',
        '--sac-args=--hidden 32,32 --batch-size 64 --utd-ratio 0.25',
    ],
}
"""Tiny cases of `loco-train bench distributed` per algorithm."""


@pytest.mark.parametrize('algorithm', sorted(BENCH_CASES))
def test_bench_distributed_prints_rates(algorithm):
    """`loco-train bench distributed` times real 1- and 2-rank runs; JSON as the last line."""
    done = _run(
        [sys.executable, '-m', 'loco_train.cli', 'bench', 'distributed', '--repeats=1']
        + [f'--algorithm={algorithm}', *BENCH_CASES[algorithm]],
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result['benchmark'] == 'distributed' and result['ranks'] == 2
    assert result['algorithm'] == algorithm
    for ranks in ('1', '2'):
        (rate,) = result['env_steps_per_s'][ranks]
        assert rate > 0
        (cpu,) = result['rank_cpu_s_per_iteration'][ranks]
        assert cpu > 0
    assert result['speedup'] > 0 and isinstance(result['meets_target'], bool)
