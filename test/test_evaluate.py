import json

import numpy as np
import pytest

from loco_policy import spec
from loco_train import cli
from loco_train.experiments.evaluate import SCHEDULE, schedule_command
from loco_train.policy.export import DeployedPolicy, export_policy
from loco_train.policy.normalizer import EmpiricalNormalizer
from loco_train.sac.actor import SquashedGaussianActor


@pytest.fixture(scope='module')
def standing_policy(tmp_path_factory):
    """A policy whose action is always 0: q* = q_default, i.e. it stands."""
    actor = SquashedGaussianActor(
        spec.OBS_DIM, np.zeros(12), np.ones(12), hidden=(16,), mean_init_std=0.0
    )
    path = tmp_path_factory.mktemp('eval') / 'stand.onnx'
    export_policy(
        DeployedPolicy(EmpiricalNormalizer(spec.OBS_DIM), actor), str(path), 'test', 0, 0
    )
    return path


def test_schedule_is_20_seconds_and_ordered():
    assert sum(seconds for _, seconds, _ in SCHEDULE) == pytest.approx(20.0)
    assert schedule_command(0.0)[0] == 0
    index, command = schedule_command(4.0)
    assert SCHEDULE[index][0] == 'forward_0.5' and command.tolist() == [0.5, 0.0, 0.0]


def test_standing_policy_in_mujoco_stands_and_misses_every_moving_command(
    standing_policy, tmp_path, capsys
):
    png = tmp_path / 'eval.png'
    status = cli.main(
        ['eval', str(standing_policy), '--sim', 'mujoco', '--seeds', '1', '--plot', str(png)]
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert status == 0 and summary['falls'] == 0
    segments = summary['segments']
    assert segments['stand']['lin_err'] < 0.05 and segments['stand']['yaw_err'] < 0.05
    # a robot that stands still misses a moving command by the commanded speed
    assert segments['forward_1.0']['lin_err'] == pytest.approx(1.0, abs=0.05)
    assert segments['forward_0.5']['lin_err'] == pytest.approx(0.5, abs=0.05)
    assert segments['turn_1.0']['yaw_err'] == pytest.approx(1.0, abs=0.05)
    assert png.stat().st_size > 10_000
    terms = summary['reward_terms']
    # standing still: tracking kernel of the mean squared command speed, no tilt, little motion
    assert 0.2 < terms['track_lin_vel_xy'] < 0.9 and terms['orientation'] < 0.01
    assert terms['lin_vel_z'] < 0.01 and terms['torques'] > 0.0
    assert summary['gait']['air_share'] < 0.01  # standing: every foot on the ground
    assert summary['crawls'] == 0 and 0.4 < summary['base_height']['median'] < 0.6
    assert summary['base_height']['max_s_below'] == 0.0


def test_a_robot_below_the_crawl_height_without_falling_counts_as_a_crawl(standing_policy):
    from loco_train.experiments.evaluate import EvalConfig, evaluate

    # the standing robot's base (about 0.5 m) is below a crawl height of 0.7 m all the time
    summary = evaluate(str(standing_policy), EvalConfig(seeds=1, crawl_height=0.7))
    assert summary['falls'] == 0 and summary['crawls'] == 1
    assert summary['base_height']['max_s_below'] == pytest.approx(20.0, abs=0.05)


def test_an_actuator_file_sets_the_drives_the_policy_is_evaluated_on(
    standing_policy, tmp_path, capsys
):
    from ruamel.yaml import YAML

    from loco_train.actuator.model import ActuatorParams, to_document

    weak = ActuatorParams(kp_scale=0.15, kd_scale=0.5, delay=0.01)  # a drive too weak to stand
    path = tmp_path / 'weak.yaml'
    with open(path, 'w') as handle:
        YAML(typ='safe').dump(to_document(weak, spec.KP, spec.KD), handle)
    status = cli.main(['eval', str(standing_policy), '--seeds', '1', '--actuator', str(path)])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary['perturbation']['actuator'] == str(path)
    assert status == 1 and summary['falls'] == 1  # it stands on the ideal drive (test above)


def test_gait_figures_count_swings_in_the_moving_segments_only():
    from loco_train.experiments.evaluate import gait_figures

    t = np.arange(1, 1001) * 0.02  # the 20 s schedule
    segment = np.array([schedule_command(x - 0.02)[0] for x in t])
    feet = np.zeros((len(t), 4))
    feet[50:60, 0] = 0.2  # lifted while standing: not counted
    feet[400:410, 1] = np.linspace(0.02, 0.06, 10)  # two swings in forward_1.0, settled
    feet[420:430, 1] = 0.04
    figures = gait_figures({'feet': feet, 't': t, 'segment': segment})
    assert figures['swings'] == 2
    assert figures['clearance_m'] == pytest.approx(0.05)
    moving = sum(1 for k, i in enumerate(segment) if any(SCHEDULE[i][2]))
    assert figures['air_share'] == pytest.approx(20 / (4 * (moving - 4 * 50)), rel=0.05)


def test_a_command_reaches_the_drives_latency_seconds_after_it_was_sent():
    from loco_train.experiments.evaluate import CommandDelay

    delay = CommandDelay(0.01)
    delay.send(0.0, 'a')
    assert [delay.at(x) for x in (0.0, 0.005, 0.01, 0.015)] == ['a'] * 4  # the first: at once
    delay.send(0.02, 'b')
    assert [delay.at(x) for x in (0.02, 0.025, 0.03, 0.035)] == ['a', 'a', 'b', 'b']


def test_phase_jitter_shifts_the_command_changes_per_seed_and_is_bounded(
    standing_policy, capsys, monkeypatch
):
    from loco_train.experiments.evaluate import EvalConfig, jittered_schedule

    shifted = jittered_schedule(SCHEDULE, 0.4)
    assert [name for name, _, _ in shifted] == [name for name, _, _ in SCHEDULE]
    assert sum(seconds for _, seconds, _ in shifted) == pytest.approx(20.0)
    assert shifted[1][1] == pytest.approx(SCHEDULE[1][1] + 0.4)
    assert shifted[-1][1] == pytest.approx(SCHEDULE[-1][1] - 0.4)
    with pytest.raises(ValueError, match='phase_jitter'):
        EvalConfig(phase_jitter=SCHEDULE[-1][1])  # the last segment would vanish
    from loco_train.experiments import evaluate as module

    schedules = []  # the schedule each seed ran
    real = module.run_episode
    monkeypatch.setattr(
        module, 'run_episode',
        lambda *args: schedules.append(args[-1]) or real(*args),
    )  # fmt: skip
    argv = ['eval', str(standing_policy), '--seeds', '2', '--phase-jitter', '0.5']
    status = cli.main([*argv, '--no-sensor-noise'])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert status == 0 and summary['phase_jitter'] == 0.5
    assert summary['sensor_noise'] == [0.0, 0.0, 0.0]
    shifts = [schedule[1][1] - SCHEDULE[1][1] for schedule in schedules]
    assert len(shifts) == 2 and all(0.0 <= x < 0.5 for x in shifts) and shifts[0] != shifts[1]
    # a standing robot misses each moving command by its speed, wherever the changes fall
    assert summary['segments']['forward_1.0']['lin_err'] == pytest.approx(1.0, abs=0.05)
    assert cli.main(['eval', str(standing_policy), '--phase-jitter', '9']) == 2
    assert 'phase_jitter must lie in' in capsys.readouterr().err


def test_first_seed_runs_later_seeds_and_falls_name_their_segment(standing_policy, capsys):
    from loco_train.experiments.evaluate import EvalConfig, evaluate

    both = evaluate(str(standing_policy), EvalConfig(seeds=2, phase_jitter=0.5))
    second = evaluate(str(standing_policy), EvalConfig(seeds=1, first_seed=1, phase_jitter=0.5))
    assert second['first_seed'] == 1 and second['fell_in'] == []
    # seed 1 alone is the second episode of seeds 0-1: its noise stream and schedule shift
    assert [line.split(':')[0] for line in capsys.readouterr().err.splitlines()[-3:]] == [
        'seed 0', 'seed 1', 'seed 1'
    ]  # fmt: skip
    first = evaluate(str(standing_policy), EvalConfig(seeds=1, phase_jitter=0.5))
    for name in ('forward_0.5', 'forward_1.0', 'sideways_0.5'):  # both: the mean of the two
        pair = (first['segments'][name]['lin_err'], second['segments'][name]['lin_err'])
        assert both['segments'][name]['lin_err'] == pytest.approx(np.mean(pair))
    assert first['segments']['forward_1.0'] != second['segments']['forward_1.0']
    weak = evaluate(str(standing_policy), EvalConfig(seeds=1, gain_scale=0.05, first_seed=3))
    assert weak['falls'] == 1 and weak['fell_in'] == ['stand']  # sinks at once on limp drives
    with pytest.raises(ValueError, match='first_seed'):
        EvalConfig(first_seed=-1)


def test_target_jitter_is_drawn_per_seed_reproducibly_and_refused_when_negative(
    standing_policy, capsys
):
    def run(*extra):
        argv = ['eval', str(standing_policy), '--seeds', '1', '--no-sensor-noise', *extra]
        assert cli.main(argv) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    exact, jittered, again = run(), run('--target-jitter', '1e-3'), run('--target-jitter', '1e-3')
    assert exact['target_jitter'] == 0.0 and jittered['target_jitter'] == 1e-3
    stand = [s['segments']['stand']['lin_err'] for s in (exact, jittered, again)]
    assert stand[1] == stand[2] != stand[0]  # the same seed draws the same noise
    assert stand[1] == pytest.approx(stand[0], abs=0.01)  # 1 mrad moves a standing robot little
    assert cli.main(['eval', str(standing_policy), '--target-jitter', '-1']) == 2
