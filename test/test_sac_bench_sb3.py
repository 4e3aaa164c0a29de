"""`loco-train bench sac-sb3`: both implementations train, are scored alike, JSON last line."""

import contextlib
import io
import json

import pytest

from loco_train.cli import main

pytest.importorskip('stable_baselines3', reason='the bench group: requirements/bench.txt')


def test_side_by_side_run_prints_a_table_and_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # SB3 and the runner write nothing into the source tree
    out = io.StringIO()
    argv = ['bench', 'sac-sb3', '--envs', 'Pendulum-v1', '--steps', '120', '--seeds', '1']
    argv += ['--eval-episodes', '1', '--speed-seconds', '0.2', '--plot', 'returns.png']
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    assert (tmp_path / 'returns.png').stat().st_size > 5_000
    lines = out.getvalue().strip().splitlines()
    result = json.loads(lines[-1])
    assert result['bench'] == 'sac-sb3' and result['torch_threads'] == 1
    speed = result['learner_updates_per_s']
    assert speed['loco'] > 0 and speed['sb3'] > 0
    assert speed['ratio'] == pytest.approx(speed['loco'] / speed['sb3'], rel=1e-2)
    assert speed['loco_autograd'] > 0  # the same learner without its reverse passes, beside it
    assert speed['floor'] > 0 and speed['ratio_floor'] > 0  # its products alone
    assert any('products alone' in line for line in lines)
    runs = result['runs']
    assert sorted(r['impl'] for r in runs) == ['loco', 'sb3']
    for run in runs:
        # Pendulum returns are negative: 200 steps of cost; one episode evaluated for each.
        assert -2000 < run['eval_return'] < 0 and run['steps'] == 120
    table = result['results']['Pendulum-v1']
    assert set(table) == {'loco', 'sb3'}
    assert any(line.startswith('Pendulum-v1') and 'loco' in line for line in lines)


def test_unknown_implementation_is_refused():
    with pytest.raises(SystemExit, match='--impls'):
        main(['bench', 'sac-sb3', '--impls', 'loco,cleanrl', '--steps', '0'])


def test_results_file_resumes_without_training_again(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    results = tmp_path / 'runs.jsonl'
    argv = ['bench', 'sac-sb3', '--envs', 'Pendulum-v1', '--steps', '120', '--seeds', '1']
    argv += ['--eval-episodes', '1', '--speed-seconds', '0', '--impls', 'loco']
    argv += ['--results', str(results)]

    def run():
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(argv) == 0
        return out.getvalue()

    from loco_train.bench import sac_vs_sb3

    monkeypatch.setattr(sac_vs_sb3, 'HEARTBEAT_S', 0.2)
    argv += ['--jobs', '2']  # a worker process (spawned), a progress line while it trains
    first = run()
    assert '0 runs already in' in first and len(results.read_text().splitlines()) == 1
    assert '0 of 1 runs finished' in first
    argv = argv[:-2]
    with results.open('a') as handle:
        handle.write('{"impl": "loco", "env": "Pend')  # a run killed mid-write
    second = run()
    assert '1 runs already in' in second and '0 to train' in second
    runs = lambda text: json.loads(text.splitlines()[-1])['runs']  # noqa: E731
    assert runs(second) == runs(first)
    # Another seed count trains only the missing seed; the torn line stays skipped.
    argv[argv.index('--seeds') + 1] = '2'
    third = run()
    assert '1 runs already in' in third and '1 to train' in third
    assert sorted(r['seed'] for r in runs(third)) == [0, 1]
