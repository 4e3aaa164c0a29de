"""`loco-train bench sac-sb3`: this SAC beside Stable-Baselines3's, side by side, same machine.

Two measurements, both with the same torch and the same torch thread count:

- learner speed: gradient updates per second at SB3's default settings (MlpPolicy [256, 256]
  ReLU, batch 256, lr 3e-4, 2 critics, gamma 0.99, tau 0.005, auto-entropy), replay sampling
  included, for `loco-train sac --env gymnasium:<ID>`'s defaults and for SB3's SAC.train();
- returns: `loco-train sac --env gymnasium:<ID>` with no tuning flags and SB3's SAC('MlpPolicy')
  with its defaults, trained for --steps on each env and seed, then both deterministic policies
  scored by the same evaluation loop (same episodes, same reset seeds).

With --results FILE.jsonl every finished run is appended to FILE at once and runs already there
(same implementation, env, seed, steps, evaluation episodes and threads) are not trained again,
so a long comparison can be stopped and resumed; the table covers every requested run in FILE.

Prints a table and one JSON object as the last line. Needs the bench requirement group
(requirements/bench.txt: stable-baselines3).
"""

from dataclasses import replace
import json
import multiprocessing
import os
import tempfile
import time

import numpy as np
import torch

from loco_train.bench.sac_floor import products_only
from loco_train.policy.atomic_io import append_json_line, read_json_lines

IMPLEMENTATIONS = ('loco', 'sb3')
"""'loco': loco-train sac with its gymnasium defaults; 'sb3': stable_baselines3.SAC defaults."""

HEARTBEAT_S = 300.0
"""Seconds between progress lines while --jobs > 1 runs train."""

CASE_KEYS = ('impl', 'env', 'seed', 'steps', 'eval_episodes', 'threads', 'matmul_dtype')
"""What identifies a training run in a --results file (matmul_dtype: the precision of the
update's matrix products: float32 for SB3, loco's --loco-matmul-dtype resolved here)."""


def matmul_dtype(impl: str, choice: str | None = None) -> str:
    """The update's matrix-product precision of an implementation here (loco: `choice`)."""
    if impl != 'loco':
        return 'float32'
    from loco_train.sac import precision, SACConfig

    return _name(precision.resolve(choice or SACConfig().matmul_dtype, 'cpu'))


def case_key(case: dict) -> tuple:
    """A run's identity for resuming."""
    return tuple(case.get(k) for k in CASE_KEYS)


def add_arguments(parser) -> None:
    """Add the benchmark's options."""
    parser.add_argument('--envs', default='Hopper-v5,HalfCheetah-v5', help='gymnasium ids')
    parser.add_argument('--steps', type=int, default=50_000, help='env steps per run')
    parser.add_argument('--seeds', type=int, default=2, help='seeds 0..N-1 per env and impl')
    parser.add_argument('--eval-episodes', type=int, default=10, help='deterministic episodes')
    parser.add_argument('--threads', type=int, default=1, help='torch threads in every run')
    parser.add_argument('--jobs', type=int, default=1, help='training runs at the same time')
    parser.add_argument(
        '--impls', default=','.join(IMPLEMENTATIONS), help='which of loco,sb3 to train'
    )
    parser.add_argument(
        '--speed-seconds', type=float, default=10.0, help='timed seconds per learner (0: skip)'
    )
    parser.add_argument(
        '--results', default=None, help='JSON-lines file: finished runs kept, resumed from'
    )
    parser.add_argument('--plot', default=None, help='PNG of the evaluation returns per env')
    parser.add_argument(
        '--loco-matmul-dtype',
        default=None,
        choices=('auto', 'float32', 'bfloat16'),
        help="loco's --matmul-dtype in its training runs (default: SACConfig's, float32)",
    )


def _require_sb3():
    try:
        import stable_baselines3
    except ModuleNotFoundError:
        raise SystemExit(
            'loco-train bench sac-sb3 needs stable-baselines3: '
            'pip install -r requirements/bench.txt'
        ) from None
    return stable_baselines3


def evaluate(act, env_id: str, episodes: int, seed: int) -> float:
    """Mean return of act(obs (obs_dim,) float32) -> action over `episodes` seeded episodes."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(act(obs.astype(np.float32)))
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return float(np.mean(returns))


def _train_loco(env_id: str, steps: int, seed: int, threads: int, log_dir: str, dtype: str):
    """Train with `loco-train sac --env gymnasium:<ID>` defaults; return the greedy act()."""
    import argparse

    from loco_train.envs.vec_env import make_env
    from loco_train.runners import sac as sac_runner

    parser = argparse.ArgumentParser()
    sac_runner.add_arguments(parser)
    argv = ['--env', f'gymnasium:{env_id}', '--total-steps', str(steps), '--seed', str(seed)]
    argv += ['--threads', str(threads), '--eval-episodes', '0', '--checkpoint-interval', '0']
    argv += ['--log-dir', log_dir, '--no-progress', '--matmul-dtype', dtype]
    cfg = sac_runner.config_from_args(parser.parse_args(argv))
    torch.manual_seed(seed)
    np.random.seed(seed)
    env = make_env(cfg.env, cfg.num_envs, cfg.device, cfg.seed)
    try:
        runner = sac_runner.SACRunner(env, cfg)
        runner.learn()
    finally:
        env.close()
    sac = runner.sac
    return lambda obs: sac.act(torch.from_numpy(obs)[None], deterministic=True)[0].numpy()


def _sb3_sac(env_id: str, seed: int):
    """stable_baselines3.SAC('MlpPolicy') with its defaults on the CPU, logging nowhere."""
    import gymnasium as gym

    sb3 = _require_sb3()
    from stable_baselines3.common.logger import Logger

    model = sb3.SAC('MlpPolicy', gym.make(env_id), seed=seed, device='cpu', verbose=0)
    model.set_logger(Logger(None, []))  # learn() would otherwise make a /tmp/SB3-* folder
    return model


def _train_sb3(env_id: str, steps: int, seed: int):
    """Train stable_baselines3.SAC('MlpPolicy') with its defaults; return the greedy act()."""
    model = _sb3_sac(env_id, seed)
    model.learn(total_timesteps=steps)
    return lambda obs: model.predict(obs, deterministic=True)[0]


def run_case(case: dict) -> dict:
    """Train one (impl, env, seed) and evaluate it; runs in a worker process."""
    torch.set_num_threads(case['threads'])
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as log_dir:
        if case['impl'] == 'loco':
            act = _train_loco(case['env'], case['steps'], case['seed'], case['threads'], log_dir,
                              case['matmul_dtype'])  # fmt: skip
        else:
            act = _train_sb3(case['env'], case['steps'], case['seed'])
        train_s = time.perf_counter() - start
        # The same evaluation episodes for both implementations: reset seeds 10_000 + k.
        eval_return = evaluate(act, case['env'], case['eval_episodes'], 10_000)
    return case | {
        'eval_return': eval_return,
        'train_s': round(train_s, 1),
        'env_steps_per_s': round(case['steps'] / train_s, 1),
    }


def _filled_sb3(env_id: str, rows: int, rng: np.random.Generator):
    """SB3 SAC with default settings and `rows` random transitions in its replay buffer."""
    model = _sb3_sac(env_id, seed=0)
    o, d = model.observation_space.shape[0], model.action_space.shape[0]
    for _ in range(rows):
        model.replay_buffer.add(
            rng.standard_normal((1, o)), rng.standard_normal((1, o)),
            rng.uniform(-1, 1, (1, d)), rng.standard_normal(1), np.array([False]), [{}],
        )  # fmt: skip
    return model


def _filled_loco(env_id: str, rows: int, rng: np.random.Generator):
    """Our SAC with `loco-train sac --env gymnasium:<ID>`'s defaults and a filled buffer."""
    import gymnasium as gym

    from loco_train.runners.sac import preset_for, RunnerConfig, set_option
    from loco_train.sac import bounds_from_box, ReplayBuffer, SAC

    env = gym.make(env_id)
    o, d = env.observation_space.shape[0], env.action_space.shape[0]
    cfg = RunnerConfig(env=f'gymnasium:{env_id}')
    for attr, value in preset_for(cfg.env).items():
        set_option(cfg, attr, value)
    b, c = bounds_from_box(env.action_space.low, env.action_space.high)
    env.close()
    sac = SAC(o, b, c, cfg.sac)
    buf = ReplayBuffer(rows, 1, o, d)
    t = lambda *shape: torch.from_numpy(rng.standard_normal(shape).astype(np.float32))  # noqa: E731
    for _ in range(rows):
        no_end = torch.zeros(1, dtype=torch.bool)
        buf.add(t(1, o), t(1, d).clamp(-1, 1), t(1), t(1, o), no_end, no_end)
    return sac, buf, cfg.sac


def learner_speed(env_id: str, seconds: float) -> dict:
    """Updates per second (replay sampling included) of both learners at SB3's defaults."""
    from loco_train.sac import SAC
    from loco_train.sac.precision import resolve

    rng = np.random.default_rng(0)
    sac, buf, cfg = _filled_loco(env_id, 5_000, rng)
    generator = torch.Generator().manual_seed(0)

    def updates(learner):
        def step(n: int) -> None:
            metrics = {}
            for _ in range(n):
                batch = buf.sample(cfg.batch_size, cfg.n_step, cfg.gamma, generator)
                metrics = learner.update(batch, generator)
            float(metrics['loss/critic'])  # read once, as the runner does per log interval

        return step

    model = _filled_sb3(env_id, 5_000, rng)
    learners = {'loco': updates(sac), 'sb3': lambda n: model.train(n, 256)}

    def twin(**overrides) -> SAC:
        """The same learner with other settings, from the same weights."""
        kw = sac.actor_kwargs
        other_cfg = replace(cfg, **overrides)
        other = SAC(kw['obs_dim'], kw['action_bias'], kw['action_scale'], other_cfg)
        other.load_state_dict(sac.state_dict())
        return other

    # The same learner in the other precision this CPU runs natively, beside the default.
    other = 'float32' if sac.matmul_dtype != torch.float32 else 'auto'
    if resolve(other, 'cpu') != sac.matmul_dtype:
        bf = twin(matmul_dtype=other, compile=False)
        learners['loco_' + _name(bf.matmul_dtype)] = updates(bf)
    if sac.reverse:
        if cfg.compile:  # what the compiled graph buys: the same update run eagerly
            learners['loco_eager'] = updates(twin(compile=False))
        # what the hand-written reverse passes buy: the same learner on autograd
        autograd = twin(compile=False)
        autograd.reverse = False
        learners['loco_autograd'] = updates(autograd)
        # the update's products and activations alone: what no float32 learner here can pass
        learners['floor'] = products_only(sac, cfg.batch_size)
    elapsed, calls = dict.fromkeys(learners, 0.0), dict.fromkeys(learners, 0)
    for step in learners.values():
        step(20)  # warm-up
    # Interleaved rounds, so that a load change on a shared machine hits both alike.
    rounds = 5
    for _ in range(rounds):
        for name, step in learners.items():
            start = time.perf_counter()
            while time.perf_counter() - start < seconds / rounds:
                step(25)
                calls[name] += 25
            elapsed[name] += time.perf_counter() - start
    rates = {name: round(calls[name] / elapsed[name], 1) for name in learners}
    rates['ratio'] = round(rates['loco'] / rates['sb3'], 3)
    rates['matmul_dtype'] = _name(sac.matmul_dtype)
    for name in [n for n in rates if n.startswith('loco_') or n == 'floor']:
        rates['ratio_' + name.removeprefix('loco_')] = round(rates[name] / rates['sb3'], 3)
    return rates


def _name(dtype: torch.dtype) -> str:
    """'float32' for torch.float32."""
    return str(dtype).removeprefix('torch.')


def _run_cases(cases: list[dict], jobs: int):
    """Yield run_case results: in this process for --jobs 1, else from a pool of processes."""
    if jobs <= 1:
        threads = torch.get_num_threads()
        try:
            yield from map(run_case, cases)
        finally:
            torch.set_num_threads(threads)
        return
    context = multiprocessing.get_context('spawn')  # fresh interpreters, no shared torch state
    start = time.monotonic()
    with context.Pool(min(jobs, len(cases))) as pool:
        results = pool.imap_unordered(run_case, cases)
        for done in range(len(cases)):
            while True:
                try:
                    result = results.next(timeout=HEARTBEAT_S)
                    break
                except multiprocessing.TimeoutError:  # a run takes minutes: show it is alive
                    print(f'{done} of {len(cases)} runs finished, '
                          f'{(time.monotonic() - start) / 60:.0f} min', flush=True)  # fmt: skip
            yield result


def _table(runs: list[dict], envs: list[str], impls: list[str]) -> tuple[list[str], dict]:
    """Rows of mean +- std eval return per env and impl, and the same as a dict."""
    lines = [f'{"env":16s} {"impl":5s} {"seeds":>5s} {"eval return":>20s} {"env steps/s":>12s}']
    results = {}
    for env_id in envs:
        for impl in impls:
            mine = [r for r in runs if r['env'] == env_id and r['impl'] == impl]
            if not mine:
                continue
            returns = [r['eval_return'] for r in mine]
            rate = float(np.mean([r['env_steps_per_s'] for r in mine]))
            results.setdefault(env_id, {})[impl] = {
                'mean_eval_return': float(np.mean(returns)),
                'std_eval_return': float(np.std(returns)),
                'eval_returns': returns,
                'seeds': [r['seed'] for r in mine],
                'env_steps_per_s': rate,
            }
            lines.append(
                f'{env_id:16s} {impl:5s} {len(mine):5d} '
                f'{np.mean(returns):12.1f} +- {np.std(returns):5.1f} {rate:12.1f}'
            )
    return lines, results


def plot(results: dict, path: str) -> None:
    """Bars of the mean evaluation return per env and implementation, each seed a dot."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    envs = list(results)
    fig, axes = plt.subplots(1, len(envs), figsize=(4 * len(envs), 3.5), squeeze=False)
    for ax, env_id in zip(axes[0], envs):
        for i, (impl, row) in enumerate(results[env_id].items()):
            ax.bar(i, row['mean_eval_return'], color=f'C{IMPLEMENTATIONS.index(impl)}', alpha=0.6)
            ax.plot([i] * len(row['eval_returns']), row['eval_returns'], 'k.', ms=8)
        ax.set_xticks(range(len(results[env_id])), list(results[env_id]))
        ax.set_title(env_id)
        ax.set_ylabel('evaluation return')
        ax.grid(alpha=0.3, axis='y')
    fig.suptitle('SAC with no tuning flags: loco-train against Stable-Baselines3 (dots: seeds)')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args) -> int:
    """Run the learner-speed comparison and the training runs; print the table and JSON."""
    _require_sb3()
    envs = [e.strip() for e in args.envs.split(',') if e.strip()]
    impls = [i.strip() for i in args.impls.split(',') if i.strip()]
    if not envs or any(i not in IMPLEMENTATIONS for i in impls):
        raise SystemExit(f'--envs needs ids and --impls a subset of {IMPLEMENTATIONS}')
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(args.threads)
        speed = learner_speed(envs[0], args.speed_seconds) if args.speed_seconds > 0 else None
    finally:
        torch.set_num_threads(threads)
    if speed:
        print(
            f'learner at SB3 defaults on {envs[0]}, {args.threads} torch thread(s): '
            f'loco {speed["loco"]} updates/s ({speed["matmul_dtype"]} products'
            + ''.join(f', {v} in {k[5:]}' for k, v in speed.items() if k.startswith('loco_'))
            + f'), sb3 {speed["sb3"]} updates/s ({speed["ratio"]}x)'
            + (
                f'; products alone {speed["floor"]} /s ({speed["ratio_floor"]}x)'
                if 'floor' in speed
                else ''
            ),  # fmt: skip
            flush=True,
        )
    cases = [
        dict(impl=impl, env=env_id, seed=seed, steps=args.steps, threads=args.threads,
             eval_episodes=args.eval_episodes,
             matmul_dtype=matmul_dtype(impl, args.loco_matmul_dtype))
        for env_id in envs for seed in range(args.seeds) for impl in impls
    ]  # fmt: skip
    wanted = {case_key(c) for c in cases}
    runs = []
    if args.results:
        done = {case_key(r): r for r in read_json_lines(args.results) if 'eval_return' in r}
        runs = [done[k] for k in sorted(wanted & done.keys(), key=str)]
        cases = [c for c in cases if case_key(c) not in done]
        print(f'{len(runs)} runs already in {args.results}, {len(cases)} to train', flush=True)
    if args.steps > 0 and cases:
        for result in _run_cases(cases, args.jobs):
            runs.append(result)
            if args.results:
                append_json_line(args.results, result)
            print(
                f'{result["env"]} {result["impl"]} seed {result["seed"]}: eval return '
                f'{result["eval_return"]:.1f} in {result["train_s"]:.0f} s',
                flush=True,
            )
    lines, results = _table(runs, envs, impls)
    print('\n'.join(lines))
    if args.plot and results:
        plot(results, args.plot)
    out = {
        'bench': 'sac-sb3',
        'torch_threads': args.threads,
        'jobs': args.jobs,
        'cpu_count': os.cpu_count(),
        'steps': args.steps,
        'eval_episodes': args.eval_episodes,
        'learner_updates_per_s': speed,
        'results': results,
        'runs': sorted(runs, key=lambda r: (r['env'], r['impl'], r['seed'])),
    }
    print(json.dumps(out), flush=True)
    return 0
