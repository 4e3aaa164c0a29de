"""The command-response probe: single-axis commands held in MuJoCo, measured on their axis."""

import json
import os

from loco_train.experiments import command_response
from test.helpers.deploy_fixtures import REPO

PPO = os.path.join(REPO, 'loco_policy', 'policies', 'anymal_c_walk_ppo.onnx')


def test_the_ppo_file_reaches_its_commands_and_the_probe_draws_and_prints(tmp_path, capsys):
    commands = {'vx': (0.5,), 'wz': (0.6,)}
    result = command_response.response(PPO, commands)
    assert result['vy'] == []
    ((vx, measured_vx, fell_vx),) = result['vx']
    ((wz, measured_wz, fell_wz),) = result['wz']
    assert not fell_vx and not fell_wz
    assert (vx, wz) == (0.5, 0.6)
    assert 0.35 < measured_vx < 0.6  # m/s: walks forward at about the command
    assert 0.4 < measured_wz < 0.75  # rad/s: turns on the spot
    path = tmp_path / 'response.png'
    command_response.plot({'ppo': {**result, 'vy': [(0.2, 0.0, False)]}}, str(path))
    assert path.stat().st_size > 10_000


def test_a_standing_command_measures_nothing_and_the_cli_prints_one_line_per_file(
    capsys, monkeypatch
):
    result = command_response.response(PPO, {'vx': (0.0,)})
    ((_, measured, fell),) = result['vx']
    assert not fell and abs(measured) < 0.1
    monkeypatch.setattr(command_response, 'COMMANDS', {'vx': (), 'vy': (), 'wz': ()})  # fast
    command_response.main([PPO, PPO])
    lines = capsys.readouterr().out.strip().splitlines()
    assert [json.loads(line)['policy'] for line in lines] == ['anymal_c_walk_ppo'] * 2
