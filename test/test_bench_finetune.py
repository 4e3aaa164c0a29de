"""`loco-train bench finetune` runs end to end with tiny settings and ends with its JSON line.

A functional test of the script (real DDS, real learner, real loco-launch stack), not a timed
one: it checks the figures are there and that no row was lost at 50 Hz, never how fast.
"""

import json
import subprocess
import sys

import pytest

from test.helpers.deploy_fixtures import REPO, ros_env

pytestmark = pytest.mark.ros


def test_the_bench_reports_every_part_and_loses_no_row_at_50_hz():
    env = ros_env('test_bench_finetune')
    env['OMP_NUM_THREADS'] = '1'
    argv = [
        sys.executable, '-m', 'loco_train.cli', 'bench', 'finetune', '--seconds', '1',
        '--warmup', '2', '--updates', '5', '--validations', '2', '--swaps', '2',
        '--domain-id', env['ROS_DOMAIN_ID'],
    ]  # fmt: skip
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result['bench'] == 'finetune' and result['parts'] == [
        'transport', 'learner', 'validation', 'swap',
    ]  # fmt: skip

    cases = result['transport']['cases']
    assert [(c['rate_hz'], c['subscriber']) for c in cases] == [
        (50.0, 'bare'), (50.0, 'assembler'), (500.0, 'bare'), (500.0, 'assembler'),
    ]  # fmt: skip
    for case in cases:
        for key in ('rows_sent', 'rows_received', 'loss', 'rows_per_s', 'callback_us_mean',
                    'cpu_percent', 'zero_loss', 'all_acked'):  # fmt: skip
            assert key in case, (key, case)
    slow = [c for c in cases if c['rate_hz'] == 50.0]
    assert all(c['rows_sent'] == 50 and c['loss'] == 0 and c['zero_loss'] for c in slow), slow
    assembled = slow[1]
    assert assembled['sequence_gaps'] == 0 and assembled['duplicates'] == 0, assembled
    assert assembled['malformed'] == 0 and assembled['transitions_paired'] == 49, assembled
    assert result['transport']['zero_loss']['50'] is True

    learner = result['learner']
    assert learner['phases']['critic_warmup']['actor_frozen'] is True
    assert learner['phases']['steady']['actor_frozen'] is False
    assert all(p['updates'] == 5 for p in learner['phases'].values())
    assert learner['needed_updates_per_s'] == 62.5 and learner['torch_threads'] == 1
    assert learner['utd_sustained_ratio'] == round(learner['updates_per_s'] / 62.5, 3)

    validation = result['validation']
    assert validation['repetitions'] == 2 and validation['observations'] == 100
    assert validation['accepted'] + len(validation['rejections']) == 2
    assert validation['ms_max'] >= validation['ms_p50'] > 0

    swap = result['swap']
    assert [u['version'] for u in swap['updates']] == [1, 2]
    for update in swap['updates']:
        if update['accepted']:
            assert update['validation_ms'] > 0 and update['update_to_active_ms'] > 0, update
            assert update['mode_after'] == 'WALK', update
        else:  # only the candidate's inference budget may fail on a loaded machine
            assert 'inference p90' in update['rejection']['reason'], update
    assert len(swap['validation_ms']) == len(swap['update_to_active_ms']) == 2
