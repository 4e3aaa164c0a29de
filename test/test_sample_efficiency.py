"""The sample-efficiency table over seeds: targets per PPO setting, steps and ratios per group."""

import json

import pytest
from torch.utils.tensorboard import SummaryWriter

from loco_train.experiments import sample_efficiency


def ppo_run(path, final, ramp, envs=100):
    """A PPO run rising linearly to `final` over `ramp` of 100 iterations of envs x 10 steps."""
    path.mkdir()
    (path / 'run.json').write_text(json.dumps({'num_envs': envs, 'steps_per_env': 10}))
    writer = SummaryWriter(str(path))
    for it in range(100):
        writer.add_scalar('Train/mean_reward', final * min(1.0, it / ramp), it)
        writer.add_scalar('Perf/collection_time', 1.0, it)
        writer.add_scalar('Perf/learning_time', 0.5, it)
    writer.close()
    return str(path)


def shac_run(path, slope, windows=40, spike=None):
    """A SHAC run: return slope x window (or 100 at window `spike` alone), 500 steps a window."""
    writer = SummaryWriter(str(path))
    for it in range(1, windows + 1):
        value = slope * it if spike is None else (100.0 if it == spike else 0.0)
        writer.add_scalar('train/episode_return', value, it)
        writer.add_scalar('perf/env_steps', 500.0 * it, it)
        writer.add_scalar('perf/iteration_s', 2.0, it)
    writer.close()
    return str(path)


def test_targets_steps_and_ratios_over_seeds(tmp_path, capsys):
    big = [ppo_run(tmp_path / f'big{s}', 10.0, 80) for s in range(2)]  # 1,000 steps/iteration
    small = [ppo_run(tmp_path / f'small{s}', 12.0, 40, envs=10) for s in range(2)]
    fast = [shac_run(tmp_path / 'fast0', 0.5), shac_run(tmp_path / 'fast1', 1.0)]
    slow = [shac_run(tmp_path / 'slow0', 0.1)]  # never reaches 9 (4.0 at 40 windows)
    lucky = shac_run(tmp_path / 'lucky', 0.0, spike=5)  # one value above every target
    png = tmp_path / 'se.png'
    argv = ['--ppo', 'big=' + ','.join(big), '--ppo', 'small=' + ','.join(small)]
    argv += ['--shac', 'fast=' + ','.join(fast), '--shac', f'slow={slow[0]}']
    argv += ['--shac', f'lucky={lucky}', '--plot', str(png), '--markdown', '--hold', '2000']
    assert sample_efficiency.main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(out[-1])
    assert png.stat().st_size > 10_000
    assert '| fast | 2 |' in '\n'.join(out[:-1])
    big_target, small_target = summary['targets']
    assert big_target['threshold'] == pytest.approx(9.0)
    assert small_target['threshold'] == pytest.approx(10.8)
    groups = {row['group']: row for row in summary['groups']}
    # big reaches 9 at iteration 72 -> 73,000 steps; small reaches 10.8 at iteration 36 -> 3,700
    assert groups['big']['against'][0]['mean_env_steps'] == pytest.approx(73_000)
    assert groups['small']['against'][1]['mean_env_steps'] == pytest.approx(3_700)
    against_big = groups['fast']['against'][0]
    assert against_big['env_steps'] == pytest.approx([9_000, 4_500])  # windows 18 and 9
    assert against_big['ppo_over_steps'] == pytest.approx(73_000 / 6_750)
    assert against_big['all_reached']
    assert against_big['held_env_steps'] == pytest.approx([9_000, 4_500])  # rising: held at once
    assert against_big['all_held']
    spike = groups['lucky']['against'][0]
    assert spike['env_steps'] == [2_500.0] and spike['reached'] == [True]  # the one value
    assert spike['held'] == [False] and not spike['all_held']  # ... is not held
    never = groups['slow']['against'][0]
    assert never['reached'] == [False] and not never['all_reached']
    assert never['env_steps'] == [20_000.0]  # counted at its last step: a lower bound
    assert '(0 of 1 reached)' in '\n'.join(out[:-1]) and 'not reached' in '\n'.join(out[:-1])


def test_a_bad_group_is_a_clear_error(tmp_path, capsys):
    assert sample_efficiency.main(['--ppo', str(tmp_path)]) == 2
    assert 'LABEL=DIR' in capsys.readouterr().err
    assert sample_efficiency.main(['--ppo', f'x={tmp_path}']) == 2
    assert 'run.json is missing' in capsys.readouterr().err


def test_kept_scalars_read_the_same_and_leave_the_rest(tmp_path):
    from loco_train.experiments import keep_scalars
    from loco_train.experiments.compare import read_scalars, shac_curve

    run = shac_run(tmp_path / 'run', 0.5)
    writer = SummaryWriter(run)
    for it in range(1, 41):
        writer.add_scalar('shac/critic_loss', 1.0 / it, it)  # not kept
    writer.close()
    out = tmp_path / 'kept'
    assert keep_scalars.main([run, str(out)]) == 0
    for a, b in zip(shac_curve(run), shac_curve(str(out))):
        assert a == pytest.approx(b)
    with pytest.raises(ValueError, match='no'):
        read_scalars(str(out), 'shac/critic_loss')
    assert keep_scalars.main([str(tmp_path / 'empty'), str(tmp_path / 'x')]) == 2


def test_steps_until_the_tracking_term_reaches_a_level(tmp_path, capsys):
    ppo = ppo_run(tmp_path / 'ppo', 10.0, 80)
    writer = SummaryWriter(ppo)
    for it in range(100):
        writer.add_scalar('/reward/lin_vel_tracking', 0.00021 * it, it)  # 0.018 at iteration 86
    writer.close()
    shac = shac_run(tmp_path / 'shac', 0.5)
    writer = SummaryWriter(shac)
    for it in range(1, 41):
        writer.add_scalar('reward/lin_vel_tracking', 0.00101 * it, it)  # 0.018 at window 18
    writer.close()
    argv = ['--ppo', f'p={ppo}', '--shac', f's={shac}', '--tracking', '0.9', '--markdown']
    assert sample_efficiency.main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    tracking = json.loads(out[-1])['tracking']
    assert tracking['level'] == pytest.approx(0.018)
    assert tracking['env_steps']['p'] == [pytest.approx(87_000)]  # (86 + 1) x 1,000 steps
    assert tracking['env_steps']['s'] == [pytest.approx(9_000)]  # window 18 x 500 steps
    assert '0.09 M' in out[-2] or '0.01 M' in out[-2]
