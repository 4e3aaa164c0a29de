"""`loco-train bench sac` runs and ends with one JSON object (figures come from real runs)."""

import contextlib
import io
import json

from loco_train.cli import main


def test_bench_prints_updates_per_second_as_json_last_line():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(['bench', 'sac', '--seconds', '0.05', '--skip-preset']) == 0
    result = json.loads(out.getvalue().strip().splitlines()[-1])
    (case,) = result['cases']
    assert result['bench'] == 'sac' and case['config'] == 'default'
    assert case['updates_per_s'] > 0 and case['skipped'] == 0
    assert result['env_steps_to_reference_return']['measured'] is False


def test_bench_reports_env_steps_to_the_reference_return_from_run_logs(tmp_path):
    from test.test_compare_runs import write_runs

    ppo, _ = write_runs(tmp_path)
    out = io.StringIO()
    argv = ['bench', 'sac', '--seconds', '0.02', '--skip-preset']
    argv += ['--sac-run', str(tmp_path / 'sac'), '--ppo-run', str(ppo)]
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    steps = json.loads(out.getvalue().strip().splitlines()[-1])['env_steps_to_reference_return']
    assert steps['measured'] and abs(steps['reference_return'] - 9.0) < 1e-9
    assert steps['ppo'] == 73_000 and steps['sac'] == 45_000


def test_anymal_preset_end_to_end_against_a_baseline_tree_with_this_preset():
    """--env-steps times the ANYmal preset's runner here and in --baseline-tree (here: this
    checkout again) in subprocesses; --same-preset applies this tree's preset to the baseline."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = io.StringIO()
    argv = ['bench', 'sac', '--seconds', '0.05', '--skip-preset', '--env-steps', '1']
    argv += ['--baseline-tree', root, '--same-preset']
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    runs = json.loads(out.getvalue().strip().splitlines()[-1])['anymal_env_steps']
    assert len(runs) == 3 and all('error' not in r for r in runs)
    assert all(r['env_steps_per_s'] > 0 and r['num_envs'] == 512 for r in runs)
    assert runs[-1]['tree'] == root and runs[-1]['preset'] == 'this tree'
    assert all(r['updates'] > 0 for r in runs)  # the timed step updates, not only collects
    # The preset's learner threads, then --learner-threads (1), then the preset's again.
    assert [r['learner_threads'] for r in runs] == [2, 1, 2]
