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
