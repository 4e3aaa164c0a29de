"""The evaluation's episode on the running stack (sim_robot and policy_node over real DDS)."""

import json
import subprocess
import sys

import pytest

from loco_train.experiments.stack_eval import drive_delays
from test.helpers.deploy_fixtures import ros_env

pytestmark = [pytest.mark.ros, pytest.mark.slow]

SHIPPED = 'loco_policy/policies/anymal_c_walk.onnx'


def _two_episodes(request, tmp_path, schedule, latency):
    """Run stack_eval on the shipped policy for 2 episodes; return its stdout (it succeeded)."""
    argv = [
        sys.executable, '-m', 'loco_train.experiments.stack_eval', SHIPPED, '--episodes', '2',
        '--schedule', schedule, '--latency', latency, '--out', str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.run(
        argv, env=ros_env(request.node.name), capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc.stdout


def test_the_shipped_policy_walks_a_short_schedule_on_the_stack_and_is_scored(request, tmp_path):
    stdout = _two_episodes(request, tmp_path, 'stand:1.5:0,0,0;forward:4:0.6,0,0', '0.01')
    rows = [json.loads(line) for line in (tmp_path / 'results.jsonl').read_text().splitlines()]
    assert len(rows) == 1
    row = rows[0]
    assert row['episodes'] == 2 and row['falls'] == 0 and row['faults'] == [None, None], row
    assert row['perturbation'] == {'payload': 0.0, 'gain_scale': 1.0, 'latency': 0.01}
    forward = row['segments']['forward']
    # it walks: within 0.3 m/s of 0.6 m/s (standing still would be an error of 0.6)
    assert 0.0 < forward['lin_err'] < 0.3, row
    assert row['segments']['stand']['lin_err'] < 0.2, row
    assert stdout.count('episode ') == 2
    assert row['stack_exit'] == 0
    # sample -> drives: the 10 ms latency, taken in on sim_robot's 5 ms grid from the sample's
    # own physics time (stamps on that grid: a few late ticks cannot move the median)
    delay = row['drive_delay_ms']
    assert delay['commands'] > 300, row  # two 5.5 s episodes at 50 Hz
    assert delay['median'] == pytest.approx(10.0, abs=0.01), row
    assert row['tick_period_ms']['median'] == pytest.approx(20.0, abs=0.01), row
    assert 0.0 < row['state_age_ms']['p50'] <= row['state_age_ms']['max'], row


def test_drive_delays_match_commands_to_their_sample_and_first_use():
    """Each command: newest sample stamped before it, first applied stamp of its positions."""
    a, b, c = (0.1,) * 12, (0.2,) * 12, (0.3,) * 12
    samples = [1.000, 1.005, 1.010, 1.015, 1.020, 1.025]
    commands = [(1.0012, a), (1.0213, b), (1.0299, c)]  # c: never applied (the episode ended)
    applied = [(1.035, b), (1.030, a), (1.040, b), (1.035, a)]  # a first drove at 1.030
    delays, periods = drive_delays(samples, commands, applied)
    assert delays == pytest.approx([30.0, 15.0])
    assert periods == pytest.approx([20.0, 5.0])  # samples 1.000, 1.020, 1.025 ticked on
    delays, periods = drive_delays([], commands, applied)
    assert delays.size == 0 and periods.size == 0  # no sample before any command


def test_a_missing_policy_file_or_a_bad_schedule_is_refused_before_any_stack(tmp_path):
    base = [sys.executable, '-m', 'loco_train.experiments.stack_eval', '--out', str(tmp_path)]
    proc = subprocess.run(
        [*base, str(tmp_path / 'none.onnx')], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0 and 'no policy file' in proc.stderr
    proc = subprocess.run(
        [*base, SHIPPED, '--schedule', 'walk:fast:1,0,0'], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0 and 'name:seconds:vx,vy,wz' in proc.stderr
    assert not (tmp_path / 'results.jsonl').exists()


def test_a_fall_is_counted_with_its_reason_and_the_episodes_go_on(request, tmp_path):
    # 150 ms of command delay: the shipped policy (it walks with 40 ms) tips over at 1 m/s
    stdout = _two_episodes(request, tmp_path, 'stand:1:0,0,0;forward:6:1.0,0,0', '0.15')
    row = json.loads((tmp_path / 'results.jsonl').read_text())
    assert len(row['faults']) == 2 and row['falls'] >= 1, row  # both episodes ran
    reasons = [fault for fault in row['faults'] if fault is not None]
    assert len(reasons) == row['falls'], row
    for fault in reasons:  # the base's height or tilt, or policy_node's DAMP reason: its tilt
        # check, or the joint speeds of the tipping robot (which of the two fires first is a race)
        assert fault == 'fallen' or 'tilt' in fault or 'rad/s >' in fault, row
    assert stdout.count('FELL at') == row['falls']
