"""`loco-train sac`: the command, checkpoints, resume, the ANYmal stub, Pendulum learning."""

import contextlib
import io
import json
import os
import shutil
import warnings

import numpy as np
import pytest
import torch

from loco_train.cli import main
from loco_train.envs import vec_env
from loco_train.policy.atomic_io import torch_load
from loco_train.runners.sac import RunnerConfig, SACRunner


def run_cli(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(['sac', *argv])
    lines = out.getvalue().strip().splitlines()
    return status, (json.loads(lines[-1]) if lines else None)


def test_missing_anymal_module_gives_a_clear_message(capsys, monkeypatch):
    monkeypatch.setattr(vec_env, 'ANYMAL_MODULE', 'loco_train.envs.not_installed')
    assert main(['sac', '--env', 'anymal', '--no-progress']) == 2
    assert 'ANYmal environment cannot be loaded' in capsys.readouterr().err


def test_anymal_run_exports_through_the_shared_exporter(tmp_path):
    """SAC on the ANYmal VecEnv, then `loco-train export` and `check-policy` on its checkpoint."""
    import onnxruntime as ort  # core dependency: a missing one is a failure, not a skip

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        status, result = run_cli('--env', 'anymal', '--num-envs', '8', '--total-steps', '160',
                                 '--learning-starts', '80', '--batch-size', '32', '--utd-ratio',
                                 '0.25', '--replay-capacity', '4096', '--eval-episodes', '0',
                                 '--log-dir', str(tmp_path), '--no-progress')  # fmt: skip
    assert status == 0 and result['updates'] == 20 and result['skipped_updates'] == 0
    # The preset's compiled update compiled in the learner thread (no eager fallback).
    assert not [w for w in caught if 'running it eagerly' in str(w.message)]
    onnx_path = str(tmp_path / 'sac.onnx')
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(['export', result['checkpoint'], '-o', onnx_path]) == 0
        assert main(['check-policy', onnx_path]) == 0
    # The graph is normaliser + deterministic b + c tanh(mu), the same as SAC.act(..., True).
    from loco_train.policy.export import load_policy

    policy, info = load_policy(result['checkpoint'])
    assert info['algorithm'] == 'sac' and info['iterations'] == 20
    obs = torch.randn(5, 48)
    session = ort.InferenceSession(onnx_path, providers=['CPUExecutionProvider'])
    (actions,) = session.run(None, {session.get_inputs()[0].name: obs.numpy()})
    np.testing.assert_allclose(actions, policy(obs).detach().numpy(), atol=1e-5)


def test_unknown_env_and_discrete_actions_are_rejected(capsys):
    assert main(['sac', '--env', 'Pendulum-v1']) == 2
    assert 'unknown environment' in capsys.readouterr().err
    assert main(['sac', '--env', 'gymnasium:CartPole-v1']) == 2
    assert 'Box' in capsys.readouterr().err


def test_smoke_run_checkpoint_and_resume(tmp_path):
    common = [
        '--env',
        'gymnasium:Pendulum-v1',
        '--learning-starts',
        '200',
        '--batch-size',
        '32',
        '--eval-episodes',
        '1',
        '--log-dir',
        str(tmp_path),
        '--no-progress',
        '--checkpoint-interval',
        '200',
        '--save-replay',
    ]
    status, first = run_cli('--total-steps', '400', *common)
    assert status == 0
    assert first['env_steps'] == 400 and first['updates'] == 50  # utd 0.25 after 200 steps
    assert first['skipped_updates'] == 0 and first['eval_return'] < 0
    checkpoint = torch_load(first['checkpoint'])
    for key in (
        'actor',
        'critic',
        'critic_target',
        'log_alpha',
        'actor_optim',
        'critic_optim',
        'alpha_optim',
        'normalizer',
    ):
        assert key in checkpoint['sac']
    assert checkpoint['sac']['normalizer']['count'] == 400
    assert os.path.exists(tmp_path / 'replay.pt')
    assert any(name.startswith('events.out.tfevents') for name in os.listdir(tmp_path))

    bare = tmp_path / 'bare'  # the first checkpoint alone, as committed without its replay
    bare.mkdir()
    shutil.copy(first['checkpoint'], bare / 'checkpoint.pt')
    status, second = run_cli('--total-steps', '600', '--resume', first['checkpoint'], *common)
    assert status == 0
    assert second['env_steps'] == 600 and second['updates'] == 100  # continued, not restarted
    resumed = torch_load(second['checkpoint'])
    assert resumed['sac']['normalizer']['count'] == 600
    replay = torch_load(tmp_path / 'replay.pt')
    assert replay['obs'].shape[0] * 4 == 600  # replay restored then extended
    assert not torch.equal(
        resumed['sac']['actor']['head.weight'], checkpoint['sac']['actor']['head.weight']
    )

    # Without the replay file the buffer refills learning_starts (200) transitions first:
    # steps 400-600 add no update, 600-700 add 100 x 0.25.
    resume_bare = ['--resume', str(bare / 'checkpoint.pt'), '--log-dir', str(bare)]
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        status, third = run_cli('--total-steps', '700', *common, *resume_bare)
    assert status == 0 and third['env_steps'] == 700 and third['updates'] == 75
    assert 'no replay file' in stderr.getvalue()


@pytest.mark.slow
def test_sac_learns_pendulum_within_20k_steps(tmp_path):
    """Acceptance: `loco-train sac --env gymnasium:Pendulum-v1 --total-steps 20000`."""
    status, result = run_cli(
        '--env',
        'gymnasium:Pendulum-v1',
        '--total-steps',
        '20000',
        '--log-dir',
        str(tmp_path),
        '--no-progress',
    )
    assert status == 0
    print(json.dumps(result))
    assert result['env_steps'] == 20_000 and result['skipped_updates'] == 0
    assert result['final_return'] > -250  # mean of the last 20 training episodes
    assert result['eval_return'] > -250  # deterministic policy, 10 fresh episodes
    assert result['episode_length'] == 200  # Pendulum's time limit: every episode a timeout


class NaNOnceVecEnv:
    """Two environments; environment 1 returns a NaN observation and reward at step 3."""

    num_envs, obs_dim, action_dim = 2, 3, 1
    action_low, action_high = np.array([-2.0]), np.array([2.0])

    def reset(self, seed=None):
        self.t = 0
        return torch.zeros(2, 3)

    def step(self, actions):
        assert torch.isfinite(actions).all()
        self.t += 1
        obs = torch.randn(2, 3)
        reward = -actions[:, 0].abs()
        if self.t == 3:
            obs[1], reward[1] = float('nan'), float('nan')
        truncated = torch.full((2,), self.t % 5 == 0)
        return obs, reward, torch.zeros(2, dtype=torch.bool), truncated, {'final_obs': obs}

    def close(self):
        pass


def test_nan_from_the_env_never_reaches_buffer_normaliser_or_networks(tmp_path):
    cfg = RunnerConfig(
        total_steps=40,
        learning_starts=10,
        eval_episodes=0,
        progress=False,
        log_dir=str(tmp_path),
        checkpoint_interval=0,
    )
    cfg.sac.batch_size = 8
    runner = SACRunner(NaNOnceVecEnv(), cfg)
    summary = runner.learn()
    # Env 1's NaN step and the one that starts from its NaN observation are replaced by
    # terminations; env 0's transitions are all stored, so its n-step windows stay aligned.
    assert summary['dropped_env_steps'] == 2 and summary['skipped_updates'] == 0
    assert len(runner.buffer) == 40  # 20 vector steps of 2 envs, none dropped
    assert runner.sac.num_updates > 0
    assert all(torch.isfinite(getattr(runner.buffer, f)).all() for f in ('obs', 'next_obs'))
    assert torch.isfinite(runner.sac.normalizer.mean).all()
    assert runner.episodes > 0 and np.isfinite(summary['final_return'])
    assert all(torch.isfinite(p).all() for p in runner.sac.actor.parameters())


def test_gymnasium_ids_get_the_sb3_like_preset_and_pendulum_its_own():
    import argparse

    from loco_train.runners import sac as sac_runner

    parser = argparse.ArgumentParser()
    sac_runner.add_arguments(parser)
    hopper = sac_runner.config_from_args(parser.parse_args(['--env', 'gymnasium:Hopper-v5']))
    assert hopper.num_envs == 1 and hopper.sac.utd_ratio == 1.0 and hopper.sac.n_step == 1
    assert hopper.sac.critic_hidden == (256, 256) and hopper.sac.critic_lr == 3e-4
    assert hopper.learning_starts == hopper.random_steps == 100 and hopper.overlap
    assert hopper.sac.matmul_dtype == 'float32'  # the default SB3 is compared against
    assert hopper.sac.compile  # the compiled update (loco_train.sac.compiled)
    pendulum = sac_runner.config_from_args(parser.parse_args(['--env', 'gymnasium:Pendulum-v1']))
    assert pendulum.num_envs == 4 and pendulum.sac.utd_ratio == 0.25 and pendulum.overlap
    assert not pendulum.sac.compile
    flags = ['--env', 'gymnasium:Hopper-v5', '--utd-ratio', '0.5', '--overlap', '0']
    tuned = sac_runner.config_from_args(parser.parse_args([*flags, '--no-compile']))
    assert tuned.sac.utd_ratio == 0.5 and not tuned.overlap and tuned.num_envs == 1
    assert not tuned.sac.compile
    flagged = sac_runner.config_from_args(parser.parse_args(['--env', 'x', '--compile']))
    assert flagged.sac.compile


def test_hidden_and_lr_flags_override_the_anymal_preset():
    import argparse

    from loco_train.runners import sac as sac_runner

    parser = argparse.ArgumentParser()
    sac_runner.add_arguments(parser)
    args = parser.parse_args(['--env', 'anymal', '--hidden', '256,128', '--lr', '3e-4'])
    cfg = sac_runner.config_from_args(args)
    assert cfg.sac.actor_hidden == cfg.sac.critic_hidden == (256, 128)
    assert cfg.sac.actor_lr == cfg.sac.critic_lr == cfg.sac.alpha_lr == 3e-4
    assert cfg.num_envs == sac_runner.PRESETS['anymal']['num_envs']  # the rest of the preset
    # The collecting thread on one torch thread, the overlapped learner on two.
    assert cfg.threads == 1 and cfg.learner_threads == 2 and cfg.overlap
    flags = ['--env', 'anymal', '--learner-threads', '1']
    one = sac_runner.config_from_args(parser.parse_args(flags))
    assert one.learner_threads == 1


def test_env_options_are_refused_for_a_gymnasium_env():
    from loco_train.envs.vec_env import make_env

    with pytest.raises(ValueError, match='anymal environment only'):
        make_env('gymnasium:Pendulum-v1', 1, reward_overrides=['torque=0'])


def test_actor_metrics_are_averaged_over_the_actor_updates():
    """With a delayed actor the logged entropy is the mean of the actor updates' entropies."""
    from test.test_sac_sac import make_batch, make_sac

    sac = make_sac(actor_update_interval=2)
    sums, entropies = {}, []
    for i in range(4):
        metrics = sac.update(make_batch(seed=i))
        if 'policy/entropy' in metrics:
            entropies.append(float(metrics['policy/entropy']))
        for key, value in metrics.items():
            sums[key] = sums[key] + value if key in sums else value
    means = SACRunner._mean_metrics(sums, 4)
    assert len(entropies) == 2 and 'actor_updates' not in means
    assert means['policy/entropy'] == pytest.approx(sum(entropies) / 2, rel=1e-5)
    assert means['skipped'] == 0.0


def test_the_anymal_preset_is_the_walking_recipe_and_a_reward_flag_wins():
    import argparse

    from loco_train.envs import env_overrides
    from loco_train.envs.rewards import parse_overrides
    from loco_train.runners import sac as sac_runner

    parser = argparse.ArgumentParser()
    sac_runner.add_arguments(parser)
    args = parser.parse_args(['--env', 'anymal'])
    cfg = sac_runner.config_from_args(args)
    assert cfg.num_envs == 512 and cfg.sac.n_step == 5 and cfg.sac.gamma == 0.97
    assert cfg.sac.actor_hidden == (256, 128, 64) and cfg.sac.activation == 'silu'
    assert cfg.sac.batch_size * cfg.sac.utd_ratio == 16  # replay ratio 16 per transition
    assert cfg.sac.matmul_dtype == 'auto'  # bfloat16 products where the CPU has units for them
    flagged_dtype = parser.parse_args(['--env', 'anymal', '--matmul-dtype', 'float32'])
    assert sac_runner.config_from_args(flagged_dtype).sac.matmul_dtype == 'float32'
    extra = sac_runner.preset_env_options('anymal', env_overrides(args))
    assert parse_overrides(extra['reward_overrides']) == {'feet_air_time': 0.125}
    flagged = parser.parse_args(
        ['--env', 'anymal', '--reward', 'feet_air_time=2', '--reward', 'torque=0']
    )
    extra = sac_runner.preset_env_options('anymal', env_overrides(flagged))
    assert parse_overrides(extra['reward_overrides']) == {'feet_air_time': 2.0, 'torque': 0.0}
    other = parser.parse_args(['--env', 'gymnasium:Hopper-v5'])
    assert 'reward_overrides' not in sac_runner.preset_env_options(other.env, env_overrides(other))
