"""loco-train compare reads both trainers' TensorBoard logs and finds steps to 90 % of PPO."""

import json

import pytest
from torch.utils.tensorboard import SummaryWriter

from loco_train import cli


def write_runs(tmp_path):
    """A PPO run rising linearly to 10 over 100 iterations of 1,000 steps; a faster SHAC run."""
    ppo, shac = tmp_path / 'ppo', tmp_path / 'shac'
    ppo.mkdir()
    (ppo / 'run.json').write_text(json.dumps({'num_envs': 100, 'steps_per_env': 10}))
    writer = SummaryWriter(str(ppo))
    for it in range(100):
        writer.add_scalar('Train/mean_reward', 10.0 * min(1.0, it / 80.0), it)
        writer.add_scalar('Perf/collection_time', 1.0, it)
        writer.add_scalar('Perf/learning_time', 0.5, it)
    writer.close()
    writer = SummaryWriter(str(shac))
    for it in range(1, 41):
        writer.add_scalar('train/episode_return', 0.5 * it, it)  # reaches 9 at iteration 18
        writer.add_scalar('perf/env_steps', 500.0 * it, it)
        writer.add_scalar('perf/iteration_s', 2.0, it)
    writer.close()
    sac = tmp_path / 'sac'
    writer = SummaryWriter(str(sac))
    for steps in range(1000, 60_001, 1000):  # SAC logs against env steps: reaches 9 at 45,000
        writer.add_scalar('train/episode_return', 10.0 * steps / 50_000, steps)
        writer.add_scalar('perf/env_steps_per_s', 500.0, steps)
    writer.close()
    return ppo, shac


def test_several_sac_runs_with_labels_and_a_tracking_panel(tmp_path, capsys):
    ppo, _ = write_runs(tmp_path)
    writer = SummaryWriter(str(ppo))
    for it in range(100):
        writer.add_scalar('/reward/lin_vel_tracking', 0.001 * it, it)
    writer.close()
    slow = tmp_path / 'slow'
    writer = SummaryWriter(str(slow))
    for steps in range(1000, 200_001, 1000):  # reaches 9 at 180,000
        writer.add_scalar('train/episode_return', 10.0 * steps / 200_000, steps)
        writer.add_scalar('perf/env_steps_per_s', 250.0, steps)
        writer.add_scalar('reward/lin_vel_tracking', 0.02 * steps / 200_000, steps)
    writer.close()
    png = tmp_path / 'many.png'
    argv = ['compare', '--ppo', str(ppo), '--sac', f'fast={tmp_path / "sac"}']
    argv += ['--sac', f'slow={slow}', '--plot', str(png)]
    assert cli.main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary['sac_env_steps_to_threshold'] == pytest.approx(45_000)  # the first run
    fast, slow_run = summary['sac_runs']
    assert (fast['label'], slow_run['label']) == ('fast', 'slow')
    assert slow_run['env_steps_to_threshold'] == pytest.approx(180_000)
    assert slow_run['ppo_over_steps'] == pytest.approx(73_000 / 180_000)
    assert slow_run['s_per_1000_steps'] == pytest.approx(4.0)
    assert png.stat().st_size > 10_000


def test_steps_to_ninety_percent_ratio_and_plot(tmp_path, capsys):
    ppo, shac = write_runs(tmp_path)
    png = tmp_path / 'cmp.png'
    argv = ['compare', '--shac', str(shac), '--ppo', str(ppo), '--plot', str(png)]
    argv += ['--sac', str(tmp_path / 'sac')]
    assert cli.main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary['ppo_final_return'] == pytest.approx(10.0)
    # PPO: 10 it/80 >= 0.9 first at iteration 72 -> (72 + 1) x 1,000 steps
    assert summary['ppo_env_steps_to_threshold'] == pytest.approx(73_000)
    assert summary['shac_env_steps_to_threshold'] == pytest.approx(18 * 500)
    assert summary['ppo_over_shac_steps'] == pytest.approx(73_000 / 9_000)
    assert summary['ppo_s_per_iteration'] == pytest.approx(1.5)
    assert summary['shac_s_per_iteration'] == pytest.approx(2.0)
    # SHAC's last logged step is 20,000: PPO had done 19 iterations (log index 19 -> 20,000)
    assert summary['ppo_return_at_shac_steps'] == pytest.approx(10.0 * 19 / 80)
    assert summary['sac_env_steps_to_threshold'] == pytest.approx(45_000)
    assert summary['ppo_over_sac_steps'] == pytest.approx(73_000 / 45_000)
    assert summary['sac_s_per_1000_steps'] == pytest.approx(2.0)
    assert png.stat().st_size > 10_000


def test_a_directory_without_logs_is_refused_naming_it(tmp_path, capsys):
    ppo, _ = write_runs(tmp_path)
    assert cli.main(['compare', '--shac', str(tmp_path), '--ppo', str(ppo)]) == 2
    assert "no 'train/episode_return' scalars" in capsys.readouterr().err


def test_sac_alone_beside_ppo(tmp_path, capsys):
    ppo, _ = write_runs(tmp_path)
    assert cli.main(['compare', '--sac', str(tmp_path / 'sac'), '--ppo', str(ppo)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary['sac_env_steps_to_threshold'] == pytest.approx(45_000)
    assert 'shac_env_steps_to_threshold' not in summary
    assert cli.main(['compare', '--ppo', str(ppo)]) == 2  # nothing to compare with


def test_a_non_positive_ppo_return_is_no_target(tmp_path, capsys):
    from torch.utils.tensorboard import SummaryWriter

    ppo, _ = write_runs(tmp_path)
    bad = tmp_path / 'bad_ppo'
    bad.mkdir()
    (bad / 'run.json').write_text((ppo / 'run.json').read_text())
    writer = SummaryWriter(str(bad))
    for it in range(20):
        writer.add_scalar('Train/mean_reward', -5.0, it)
        writer.add_scalar('Perf/collection_time', 1.0, it)
        writer.add_scalar('Perf/learning_time', 0.5, it)
    writer.close()
    assert cli.main(['compare', '--sac', str(tmp_path / 'sac'), '--ppo', str(bad)]) == 2
    assert 'no target' in capsys.readouterr().err
