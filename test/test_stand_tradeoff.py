import json

from loco_train.experiments.stand_tradeoff import main, tradeoff


def nominal_row(policy, stand, forward):
    segments = {'stand': {'lin_err': stand}, 'forward_0.5': {'lin_err': forward}}
    return {'policy': policy, 'segments': segments, 'lin_err': 0.1, 'yaw_err': 0.1, 'falls': 0}


def screen_row(file, falls, first_seed=0):
    return {'file': file, 'falls': falls, 'first_seed': first_seed, 'seeds': 2}


def test_cells_with_a_fall_count_only_the_chosen_seed_set_and_unscreened_is_none():
    nominal = [nominal_row('a', 0.1, 0.2), nominal_row('b', 0.02, 0.5)]
    screen = [screen_row('a', 0), screen_row('a', 2), screen_row('a', 1), screen_row('a', 3, 2)]
    screen.append(screen_row('unknown', 1))
    points = tradeoff(nominal, screen)
    assert points['a']['cells'] == 2 and points['a']['screened'] == 3
    assert points['a']['stand'] == 0.1 and points['a']['forward_0.5'] == 0.2
    assert points['b']['cells'] is None and points['b']['screened'] == 0
    assert tradeoff(nominal, screen, first_seed=2)['a']['cells'] == 1


def test_the_cli_plots_and_refuses_a_broken_row_file(tmp_path, capsys):
    nominal, screen = tmp_path / 'nominal.jsonl', tmp_path / 'screen.jsonl'
    nominal.write_text(json.dumps(nominal_row('a', 0.1, 0.2)) + '\n')
    screen.write_text(json.dumps(screen_row('a', 1)) + '\n')
    png = tmp_path / 'tradeoff.png'
    assert main([str(nominal), str(screen), '--plot', str(png)]) == 0
    assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert json.loads(capsys.readouterr().out.splitlines()[0])['cells'] == 1
    screen.write_text(json.dumps(screen_row('a', 1)) + '\n{"file": \n')
    assert main([str(nominal), str(screen)]) == 2
    assert 'screen.jsonl:2' in capsys.readouterr().err
    empty = tmp_path / 'empty.jsonl'
    empty.write_text('')
    assert main([str(nominal), str(empty), '--plot', str(tmp_path / 'x.png')]) == 2  # no point


def test_nominal_rows_from_several_files_joined_by_commas(tmp_path, capsys):
    first, second = tmp_path / 'a.jsonl', tmp_path / 'b.jsonl'
    first.write_text(json.dumps(nominal_row('a', 0.1, 0.2)) + '\n')
    second.write_text(json.dumps(nominal_row('b', 0.02, 0.3)) + '\n')
    screen = tmp_path / 'screen.jsonl'
    screen.write_text(json.dumps(screen_row('b', 2)) + '\n')
    assert main([f'{first},{second}', str(screen)]) == 0
    points = {p['policy']: p for p in map(json.loads, capsys.readouterr().out.splitlines())}
    assert set(points) == {'a', 'b'} and points['b']['cells'] == 1
    assert main([f'{first},{tmp_path / "missing.jsonl"}', str(screen)]) == 2
