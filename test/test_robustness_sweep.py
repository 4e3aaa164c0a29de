"""The MuJoCo robustness sweep: real evaluations per cell, a resumable cell log, the summary."""

import json

import pytest

from loco_train.experiments import robustness_sweep
from loco_train.policy.atomic_io import read_json_lines


def test_a_sweep_evaluates_each_cell_once_and_resumes_past_a_torn_line(tmp_path, capsys):
    args = ['--payload', '0', '--gain-scale', '0.6,1', '--friction', '0.8', '--latency', '0',
            '--seeds', '1', '--workers', '1', '--out', str(tmp_path)]  # fmt: skip
    assert robustness_sweep.main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = read_json_lines(tmp_path / 'cells.jsonl')
    assert len(rows) == 4 and summary['cells'] == 2  # 2 policies x 2 cells
    assert (tmp_path / 'robustness.png').stat().st_size > 10_000
    nominal = [r for r in rows if r['gain_scale'] == 1.0]
    assert all(r['falls'] == 0 and r['lin_err'] < 0.25 for r in nominal)  # both walk at nominal
    with open(tmp_path / 'cells.jsonl', 'a') as handle:
        handle.write('{"policy": "anymal_c_wa')  # a sweep killed mid-line
    assert robustness_sweep.main(args) == 0  # nothing left to evaluate
    assert len(read_json_lines(tmp_path / 'cells.jsonl')) == 4
    assert 'cells to evaluate' not in capsys.readouterr().err
    assert robustness_sweep.main([*args, '--stiff-feet']) == 0  # other feet: evaluated anew
    rows = read_json_lines(tmp_path / 'cells.jsonl')
    assert len(rows) == 8 and sum(bool(r.get('stiff_feet')) for r in rows) == 4
    assert robustness_sweep.main([*args, '--first-seed', '1']) == 0  # fresh seeds: anew
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = read_json_lines(tmp_path / 'cells.jsonl')
    assert len(rows) == 12 and sum(r['first_seed'] == 1 for r in rows) == 4
    assert summary['first_seed'] == 1 and summary['cells'] == 2  # only the fresh rows
    assert all(len(r['fell_in']) == r['falls'] for r in rows if 'fell_in' in r)
    assert robustness_sweep.main([*args, '--pool']) == 0  # seeds 0 and 1 of each cell together
    pooled = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert pooled['pooled'] and pooled['cells'] == 2
    assert all(p['episodes'] == 4 for p in pooled['policies'].values())  # 2 cells x 2 seeds


def test_the_summary_lists_cells_where_the_first_policy_falls_and_another_walks():
    def row(policy, gain, falls):
        return {'policy': policy, 'payload': 0.0, 'gain_scale': gain, 'friction': 0.8,
                'latency': 0.0, 'seeds': 2, 'falls': falls, 'lin_err': 0.1}  # fmt: skip

    rows = [row('a', 0.7, 2), row('b', 0.7, 0), row('a', 1.0, 0), row('b', 1.0, 0),
            row('a', 1.3, 1), row('b', 1.3, 1)]  # fmt: skip
    summary = robustness_sweep.summarise(rows, ['a', 'b'])
    assert summary['policies']['a']['walks'] == 1 and summary['policies']['b']['walks'] == 2
    worse = summary['a_falls_where_another_walks']
    assert worse == [{'payload': 0.0, 'gain_scale': 0.7, 'friction': 0.8, 'latency': 0.0}]


def test_pooling_adds_the_seed_sets_of_a_cell_and_a_fall_in_any_set_counts():
    def row(first, falls, err):
        cell = {'policy': 'a', 'payload': 0.0, 'gain_scale': 1.0, 'friction': 0.8, 'latency': 0.0}
        seeds = {'seeds': 2 if first == 0 else 4, 'first_seed': first}
        return cell | seeds | {'falls': falls, 'fell_in': ['stop'] * falls, 'lin_err': err,
                               'yaw_err': err}  # fmt: skip

    (merged,) = robustness_sweep.pool([row(0, 0, 0.1), row(2, 1, 0.4)])
    assert merged['seeds'] == 6 and merged['falls'] == 1 and merged['fell_in'] == ['stop']
    assert merged['lin_err'] == pytest.approx((2 * 0.1 + 4 * 0.4) / 6)
    summary = robustness_sweep.summarise([merged], ['a'])['policies']['a']
    assert summary['walks'] == 0 and summary['episodes'] == 6 and summary['falls'] == 1
    (again,) = robustness_sweep.pool([row(0, 0, 0.1), row(0, 2, 0.3)])  # a repeat replaces
    assert again['seeds'] == 2 and again['falls'] == 2
    six = row(0, 3, 0.2) | {'seeds': 6}  # seeds 0-5 overlap the 4-seed set at 2-5
    (wide,) = robustness_sweep.pool([row(0, 0, 0.1), row(2, 1, 0.4), six])
    assert wide['seeds'] == 6 and wide['falls'] == 3  # no seed counted twice
    old = {k: v for k, v in row(0, 1, 0.1).items() if k != 'fell_in'}  # rows before fell_in
    assert robustness_sweep.pool([old, row(2, 1, 0.4)])[0]['fell_in'] is None


def test_a_negative_first_seed_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        robustness_sweep.main(['--first-seed', '-1', '--out', str(tmp_path)])


def test_a_screen_evaluates_only_the_cells_where_the_reference_walked(tmp_path, capsys):
    from loco_policy.policy_file import file_sha256

    ppo = robustness_sweep.shipped('anymal_c_walk_ppo.onnx')
    shac = robustness_sweep.shipped('anymal_c_walk.onnx')

    def row(gain, first, falls):  # recorded reference rows: 2 + 2 seeds per cell
        return {'policy': 'anymal_c_walk_ppo.onnx', 'sha256': file_sha256(ppo), 'payload': 0.0,
                'gain_scale': gain, 'friction': 0.8, 'latency': 0.0, 'seeds': 2,
                'first_seed': first, 'falls': falls, 'fell_in': ['stop'] * falls,
                'lin_err': 0.1, 'yaw_err': 0.1, 'stiff_feet': False}  # fmt: skip

    with open(tmp_path / 'cells.jsonl', 'w') as handle:  # walks at 1.0; falls once at 0.6
        for r in (row(1.0, 0, 0), row(1.0, 2, 0), row(0.6, 0, 0), row(0.6, 2, 1)):
            handle.write(json.dumps(r) + '\n')
    args = ['--payload', '0', '--gain-scale', '0.6,1', '--friction', '0.8', '--latency', '0',
            '--seeds', '1', '--workers', '1', '--out', str(tmp_path), '--policies', shac,
            '--where-walks', ppo]  # fmt: skip
    assert robustness_sweep.main([*args, '--where-walks-episodes', '4']) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = read_json_lines(tmp_path / 'cells.jsonl')
    evaluated = [r for r in rows if r['policy'] == 'anymal_c_walk.onnx']
    assert [r['gain_scale'] for r in evaluated] == [1.0]  # the cell with a fall is left out
    assert summary['cells'] == 1 and summary['where_walks']['cells'] == 1
    with pytest.raises(SystemExit):  # no cell has 6 episodes of the reference
        robustness_sweep.main([*args, '--where-walks-episodes', '6'])
    assert 'walks in no cell' in capsys.readouterr().err
