import torch

from loco_train.runners.ppo import PpoRunConfig, train
from test.helpers.toy_env import PointMassEnv


def test_rsl_rl_ppo_trains_unchanged_on_a_loco_train_env(tmp_path):
    torch.manual_seed(0)
    env = PointMassEnv(num_envs=16, episode_steps=20, seed=2)
    cfg = PpoRunConfig(
        env='toy',
        num_envs=16,
        steps_per_env=20,
        max_episode_length=20,
        hidden=(32, 32),
        init_std=0.5,
        log_dir=str(tmp_path),
        save_interval=100,
    )
    runner, summary = train(env, cfg, iterations=30)
    assert summary['iterations'] == 30 and summary['env_steps'] == 30 * 20 * 16
    first = list(runner.logger.rewbuffer)
    assert summary['final_return'] is not None
    # reward is -|v - u|^2 per step; a good policy makes episodes far better than random
    assert summary['final_return'] > -4.0, first
    assert any(p.name.startswith('model_') for p in tmp_path.iterdir())


def test_resume_continues_from_an_rsl_rl_checkpoint(tmp_path):
    torch.manual_seed(1)
    cfg = PpoRunConfig(
        env='toy', num_envs=8, steps_per_env=10, max_episode_length=20, hidden=(16,),
        log_dir=str(tmp_path / 'a'), save_interval=100,
    )  # fmt: skip
    train(PointMassEnv(num_envs=8, episode_steps=20, seed=2), cfg, iterations=4)
    saved = max((tmp_path / 'a').glob('model_*.pt'), key=lambda p: int(p.stem.split('_')[1]))
    cfg.resume, cfg.log_dir = str(saved), str(tmp_path / 'b')
    runner, summary = train(PointMassEnv(num_envs=8, episode_steps=20, seed=2), cfg, iterations=3)
    start = int(saved.stem.split('_')[1])
    assert runner.current_learning_iteration == start + 3  # updates start+1 .. start+3
    assert summary['iterations'] == start + 4
