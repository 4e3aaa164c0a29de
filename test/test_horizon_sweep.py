"""The horizon sweep trains one real SHAC run per window length and plots them."""

import json
import math
import os

from loco_train.experiments import horizon_sweep


def test_one_run_per_horizon_with_its_samples_gradient_norm_and_plot(tmp_path, capsys):
    out = str(tmp_path / 'sweep')
    argv = ['--horizons', '4,8', '--iterations', '2', '--num-envs', '8', '--out', out]
    assert horizon_sweep.main(argv) == 0
    with open(os.path.join(out, 'results.json')) as handle:
        results = json.load(handle)
    assert [r['horizon'] for r in results] == [4, 8]
    for r in results:
        assert r['env_steps'] == 2 * 8 * r['horizon']  # iterations x envs x window length
        assert len(r['actor_grad_norms']) == 2
        assert all(math.isfinite(g) and g > 0.0 for g in r['actor_grad_norms'])
    assert os.path.getsize(os.path.join(out, 'horizon_sweep.png')) > 10_000
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])['iterations'] == 2


def test_sweeps_run_in_parallel_merge_by_horizon(tmp_path, capsys):
    parts = [str(tmp_path / name) for name in ('a', 'b')]
    for horizons, out in zip(('8', '4'), parts):
        argv = ['--horizons', horizons, '--iterations', '1', '--num-envs', '4', '--out', out]
        assert horizon_sweep.main(argv) == 0
    merged = str(tmp_path / 'merged')
    assert horizon_sweep.main(['--merge', ','.join(parts), '--out', merged]) == 0
    with open(os.path.join(merged, 'results.json')) as handle:
        assert [r['horizon'] for r in json.load(handle)] == [4, 8]
    assert os.path.getsize(os.path.join(merged, 'horizon_sweep.png')) > 10_000
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])['horizons'] == [4, 8]
    try:  # the same horizon from two sweeps is refused, not silently overwritten
        horizon_sweep.main(['--merge', f'{parts[0]},{parts[0]}', '--out', merged])
    except SystemExit as stop:
        assert 'twice' in str(stop)
    else:
        raise AssertionError('a horizon given twice was merged')
