"""`make finetune-demo` in small: the whole loop over real DDS ends in a paired measurement."""

import json
import subprocess
import sys

import pytest

from test.helpers.deploy_fixtures import ros_env

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def test_a_short_finetune_demo_swaps_learned_policies_in_and_measures_them(request, tmp_path):
    out = tmp_path / 'demo'
    argv = [
        sys.executable, '-m', 'loco_train.experiments.finetune_demo', '--minutes', '0.5',
        '--out', str(out), '--eval-seeds', '1', '--export-every', '150',
        '--set', 'warmup_updates=100', '--set', 'learning_starts=64', '--latency', '0.01',
        '--set', 'guard_rows=300',  # each version judged on 6 s of the robot's rows
        '--stack-episodes', '1', '--stack-points', '0',  # frozen and last again, on the stack
        '--stack-schedule', 'stand:1:0,0,0;forward:3:0.6,0,0',
    ]  # fmt: skip
    proc = subprocess.run(
        argv, env=ros_env(request.node.name), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-9000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result['accepted_versions'], result  # at least one candidate came back and ran
    assert min(result['accepted_versions']) == 1
    assert result['perturbation'] == {'payload': 2.0, 'gain_scale': 1.0, 'latency': 0.01}
    assert result['learner']['sequence_gaps'] == '0' and result['learner']['malformed'] == '0'
    assert int(result['learner']['updates']) > 150
    assert result['frozen_tracking_error'] > 0 and result['finetuned_tracking_error'] > 0
    assert result['active_at_end'] in {f'v{v}' for v in result['accepted_versions']}
    assert set(result['nominal']) == {'frozen', result['active_at_end']}
    stack = result['stack']  # the same two policies on sim_robot and policy_node over DDS
    assert [r['policy'] for r in stack['rows']] == ['frozen', result['active_at_end']], stack
    assert [r['policy'] for r in stack['nominal_rows']] == ['frozen', result['active_at_end']]
    for row in stack['rows'] + stack['nominal_rows']:
        assert row['tracking_error'] > 0 and row['falls'] == 0, stack
    goal = result['goal']  # judged on the stack's rows, every figure measured
    assert stack['episodes'] == 1 and goal['on'] == 'stack', goal
    assert goal['reduction'] is not None and goal['nominal_change'] is not None, goal
    assert goal['reached'] == (not goal['not_met']) == result['goal_reached']
    assert (out / 'finetune_curve.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert (out / 'store' / 'index.json').is_file()  # the crash-safe store was written
    loop = result['control_loop']  # policy_node's own run summary, its stalls counted
    assert loop and loop['ticks'] > 1000 and loop['stalls'] >= 0 and 'jitter_p99_ms' in loop, loop
