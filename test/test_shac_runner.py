import torch

from loco_train.policy.export import load_policy
from loco_train.runners.shac import ShacRunConfig, ShacRunner
from loco_train.shac import SHACConfig
from test.helpers.toy_env import PointMassEnv


def config(tmp_path, iterations):
    shac = SHACConfig(horizon=8, actor_hidden=(16,), critic_hidden=(16,), critic_iterations=2)
    return ShacRunConfig(
        env='toy',
        num_envs=8,
        iterations=iterations,
        log_dir=str(tmp_path),
        checkpoint_interval=3,
        progress=False,
        shac=shac,
    )


def test_smoke_run_checkpoints_resumes_and_exports(tmp_path):
    torch.manual_seed(0)
    runner = ShacRunner(PointMassEnv(num_envs=8, episode_steps=10), config(tmp_path, 6))
    summary = runner.learn()
    assert summary['iterations'] == 6 and summary['env_steps'] == 6 * 8 * 8
    assert summary['final_return'] is not None and summary['skipped_windows'] == 0
    assert (tmp_path / 'checkpoint.pt').is_file()
    assert any(p.name.startswith('events.out.tfevents') for p in tmp_path.iterdir())

    resumed = ShacRunner(PointMassEnv(num_envs=8, episode_steps=10), config(tmp_path, 8))
    resumed.load(str(tmp_path / 'checkpoint.pt'))
    assert resumed.shac.iterations == 6 and resumed.env_steps == 6 * 64
    obs = torch.randn(3, 4)
    before = runner.shac.actor(runner.shac.normalize(obs))
    torch.testing.assert_close(resumed.shac.actor(resumed.shac.normalize(obs)), before)
    assert resumed.learn()['iterations'] == 8

    policy, info = load_policy(str(tmp_path / 'checkpoint.pt'))
    assert info['algorithm'] == 'shac' and info['iterations'] == 8
    expected = resumed.shac.actor(resumed.shac.normalize(obs))
    torch.testing.assert_close(policy(obs), expected)
