"""The paper's contact-model comparison (Schwarke et al., Table 1): SHAC per contact model.

`python -m loco_train.experiments.contact_comparison --iterations 600 --num-envs 256
--horizon 16 --command vx=1 --command vy=0 --command wz=0 --command zero_share=0
--mujoco-seeds 3 --out runs/contacts`
trains one SHAC run per model (smooth, hard, soft) with the same seed, reward, commands and
settings, then rolls each deterministic policy out for one 20 s episode in N environments of the
plain (not differentiable) environment under `hard` contact: mean return, episode length and
forward-velocity error |v_x - c_x| (body frame, after the first second). With --mujoco-seeds S
each policy is also exported and run through the deployment controller in MuJoCo for S 20 s
episodes at the training's command (falls, forward error, and the joint trajectories the gait
figure draws: the paper's Fig. 7). Schwarke et al. find smoothed-contact training best after
transfer and soft-contact policies failing to transfer. Prints one JSON line per model and one
for the comparison; writes two PNGs (returns; gaits). --models runs a subset, so the models can
train in parallel processes; --table merges their JSON files into one comparison.
"""

import argparse
import json
import os
import time

import numpy as np
import torch

from loco_train.envs.commands import add_command_argument
from loco_train.envs.rewards import add_override_argument
from loco_train.envs.vec_env import make_env
from loco_train.runners.shac import ShacRunConfig, ShacRunner
from loco_train.shac import SHACConfig

MODELS = ('smooth', 'hard', 'soft')
"""Contact models trained with, in the paper's order."""


@torch.no_grad()
def hard_contact_return(shac, num_envs, seed, reward_overrides, command_overrides=()):
    """(mean return, episode length (steps), forward error (m/s), trace) of the policy.

    One 20 s episode per environment under hard contact; the forward error is the mean
    |v_x - c_x| of the body-frame base velocity against the commanded vx over the living
    environments, after the first second. trace: environment 0's joint angles for the gait
    figure, {'t': (T,) s, 'q': (T, 12) rad in the spec's joint order, 'fell': bool}.
    """
    from loco_policy.observation import quat_rotate_inverse

    env = make_env(
        'anymal', num_envs, 'cpu', seed, contact='hard', reward_overrides=reward_overrides,
        command_overrides=list(command_overrides) or None,
    )  # fmt: skip
    obs = env.reset(seed=seed)
    total = torch.zeros(num_envs)
    alive = torch.ones(num_envs, dtype=torch.bool)
    length = torch.zeros(num_envs)
    errors = []
    settle = int(round(1.0 / env.dt))
    times, angles, fell = [], [], False
    for step in range(env.max_episode_length):
        command = env.commands.command[:, 0].clone()  # (N,) vx the action is chosen for
        action = shac.actor(shac.normalize(obs))
        obs, reward, terminated, truncated, _ = env.step(action)
        total += torch.where(alive, reward, torch.zeros_like(reward))
        length += alive.float()
        if bool(alive[0]):
            times.append((step + 1) * env.dt)
            angles.append(env.qpos[0, 7:19].numpy().copy())
            fell = bool(terminated[0])
        alive &= ~(terminated | truncated)
        if step >= settle and bool(alive.any()):
            qpos, qvel = env.qpos.numpy(), env.qvel.numpy()
            vx = quat_rotate_inverse(qpos[:, 3:7], qvel[:, :3])[:, 0]
            errors.append(np.abs(vx - command.numpy())[alive.numpy()].mean())
        if not bool(alive.any()):
            break
    env.close()
    error = float(np.mean(errors)) if errors else float('nan')
    trace = {'t': np.array(times), 'q': np.array(angles), 'fell': fell}
    return float(total.mean()), float(length.mean()), error, trace


def mujoco_episodes(policy_path, command, seeds):
    """Falls, forward error (m/s, after 1 s) and seed 0's trace of the policy file in MuJoCo."""
    from loco_policy.policy_file import OnnxPolicy
    from loco_policy.sim.backends import make_backend
    from loco_train.experiments import evaluate

    policy = OnnxPolicy(policy_path)
    backend = make_backend('mujoco')
    schedule = (('forward', 20.0, tuple(float(c) for c in command)),)
    falls, errors, first = 0, [], None
    for seed in range(seeds):
        config = evaluate.EvalConfig()
        trace = evaluate.run_episode(policy, backend, config, seed, schedule=schedule)
        falls += int(trace['fell'])
        settled = trace['t'] > evaluate.SETTLE_S
        if np.any(settled):
            errors.append(float(np.abs(trace['lin_vel'][settled, 0] - command[0]).mean()))
        first = first or trace
    error = float(np.mean(errors)) if errors else float('nan')
    return falls, error, first


def gait_plot(traces, path, window=(5.0, 7.0), where='MuJoCo'):
    """One row per model: two legs' hip and knee flexion over window (s) in `where` (PNG)."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    from loco_policy import spec

    joints = [spec.JOINT_NAMES.index(n) for n in ('LF_HFE', 'LF_KFE', 'RH_HFE', 'RH_KFE')]
    fig, axes = plt.subplots(len(traces), 1, figsize=(8, 2.2 * len(traces)), sharex=True,
                             squeeze=False)  # fmt: skip
    for axis, (name, trace) in zip(axes[:, 0], traces.items()):
        t = trace['t']
        mask = (t >= window[0]) & (t <= window[1])
        for j in joints:
            axis.plot(t[mask], trace['q'][mask, j], label=spec.JOINT_NAMES[j])
        axis.set_ylabel(f'{name}\njoint angle (rad)')
        axis.grid(alpha=0.3)
        if trace['fell']:
            axis.set_title(f'{name} contact: fell at {t[-1]:.1f} s', fontsize=9)
    axes[0, 0].legend(ncol=4, fontsize=8)
    first = 'seed 0' if where == 'MuJoCo' else 'environment 0'
    axes[-1, 0].set_xlabel(f'time (s), {where}, {first}')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(results, path):
    """Bar chart of training return and hard-contact return per contact model (PNG)."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    names = list(results)
    x = np.arange(len(names))
    fig, axis = plt.subplots(figsize=(7, 4))
    axis.bar(x - 0.2, [results[n]['train_return'] or 0.0 for n in names], 0.4, label='training')
    axis.bar(x + 0.2, [results[n]['hard_return'] for n in names], 0.4, label='under hard')
    axis.set_xticks(x, [f'{n} contact' for n in names])
    axis.set_ylabel('mean episode return')
    axis.axhline(0.0, color='k', lw=0.6)
    axis.legend()
    axis.grid(alpha=0.3, axis='y')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def train_model(model, args):
    """Train one model, evaluate it under hard contact (and in MuJoCo); its result dict."""
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    cfg = ShacRunConfig(
        num_envs=args.num_envs,
        iterations=args.iterations,
        seed=args.seed,
        log_dir=os.path.join(args.out, model),
        checkpoint_interval=max(args.iterations // 4, 1),
        progress=False,
        shac=SHACConfig(horizon=args.horizon, actor_lr=args.actor_lr),
    )
    env = make_env(
        'anymal', args.num_envs, 'cpu', args.seed, differentiable=True, contact=model,
        reward_overrides=args.reward, command_overrides=args.command or None,
    )  # fmt: skip
    start = time.time()
    runner = ShacRunner(env, cfg)
    summary = runner.learn()
    env.close()
    hard_return, hard_length, hard_error, hard_trace = hard_contact_return(
        runner.shac, args.num_envs, args.seed + 1000, args.reward, args.command
    )
    np.savez(os.path.join(args.out, model, 'hard_trace.npz'), **hard_trace)
    result = {
        'train_return': summary['final_return'],
        'hard_return': hard_return,
        'hard_episode_length': hard_length,
        'hard_forward_error': hard_error,
        'env_steps': summary['env_steps'],
        'train_seconds': round(time.time() - start, 1),
    }
    if args.mujoco_seeds > 0:
        from loco_train.policy.export import export_policy, load_policy

        policy, info = load_policy(summary['checkpoint'])
        path = os.path.join(args.out, model, 'policy.onnx')
        export_policy(policy, path, 'shac', info['iterations'], summary['final_return'] or 0.0,
                      getattr(runner.env, 'command_ranges', None))  # fmt: skip
        command = [0.0, 0.0, 0.0]
        for item in args.command or ():
            name, value = item.split('=', 1)
            if name in ('vx', 'vy', 'wz'):
                command[('vx', 'vy', 'wz').index(name)] = float(value)
        falls, error, trace = mujoco_episodes(path, command, args.mujoco_seeds)
        result.update(mujoco_falls=falls, mujoco_episodes=args.mujoco_seeds,
                      mujoco_forward_error=error, policy=path)  # fmt: skip
        np.savez(os.path.join(args.out, model, 'mujoco_trace.npz'),
                 **{k: v for k, v in trace.items() if k != 'reward_terms'})  # fmt: skip
    with open(os.path.join(args.out, model, 'result.json'), 'w') as handle:
        json.dump(result, handle)
    return result


def main(argv=None):
    """Train each contact model, evaluate under hard contact (and MuJoCo), print JSON, plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iterations', type=int, default=100)
    parser.add_argument('--num-envs', type=int, default=64)
    parser.add_argument('--horizon', type=int, default=32)
    parser.add_argument('--actor-lr', type=float, default=5e-4)
    parser.add_argument('--seed', type=int, default=0)
    add_override_argument(parser)
    add_command_argument(parser)
    parser.add_argument(
        '--mujoco-seeds', type=int, default=0,
        help='MuJoCo episodes per policy through the deployment controller (0: none)',
    )  # fmt: skip
    parser.add_argument('--models', default=','.join(MODELS))
    parser.add_argument(
        '--table', action='store_true', help="merge the models' result.json under --out"
    )
    parser.add_argument('--out', default=os.path.join('runs', 'contact_comparison'))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = {}
    for model in args.models.split(','):
        if args.table:
            with open(os.path.join(args.out, model, 'result.json')) as handle:
                results[model] = json.load(handle)
        else:
            results[model] = train_model(model, args)
        print(f'{model}: {json.dumps(results[model])}', flush=True)
    os.makedirs(args.out, exist_ok=True)
    png = os.path.join(args.out, 'contact_comparison.png')
    plot(results, png)
    gaits = {}
    for name, where in (('mujoco', 'MuJoCo'), ('hard', 'Warp under hard contact')):
        traces = {}
        for model in results:
            trace_file = os.path.join(args.out, model, f'{name}_trace.npz')
            if os.path.isfile(trace_file):
                with np.load(trace_file) as data:
                    traces[model] = {k: data[k] for k in data.files}
        if traces:
            gaits[name] = os.path.join(args.out, f'contact_gaits_{name}.png')
            gait_plot(traces, gaits[name], where=where)
    print(json.dumps({'iterations': args.iterations, 'results': results, 'plot': png,
                      'gaits': gaits}))  # fmt: skip
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
