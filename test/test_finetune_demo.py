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
    ]  # fmt: skip
    proc = subprocess.run(
        argv, env=ros_env(request.node.name), capture_output=True, text=True, timeout=420
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
    assert (out / 'finetune_curve.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert (out / 'store' / 'index.json').is_file()  # the crash-safe store was written
    loop = result['control_loop']  # policy_node's own run summary, its stalls counted
    assert loop and loop['ticks'] > 1000 and loop['stalls'] >= 0 and 'jitter_p99_ms' in loop, loop
