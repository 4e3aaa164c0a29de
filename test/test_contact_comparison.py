"""The contact-model comparison trains, evaluates under hard contact and in MuJoCo, and merges."""

import json
import math
import os

from numpy import load as np_load

from loco_train.experiments import contact_comparison

FORWARD = ['--command', 'vx=1', '--command', 'vy=0', '--command', 'wz=0']


def test_a_model_is_trained_evaluated_twice_and_merged_into_the_table(tmp_path, capsys):
    out = str(tmp_path / 'contacts')
    argv = ['--iterations', '1', '--num-envs', '4', '--horizon', '2', '--models', 'soft',
            '--mujoco-seeds', '1', '--out', out, *FORWARD]  # fmt: skip
    assert contact_comparison.main(argv) == 0
    with open(os.path.join(out, 'soft', 'result.json')) as handle:
        result = json.load(handle)
    assert result['env_steps'] == 1 * 4 * 2 and result['mujoco_episodes'] == 1
    assert 0 < result['hard_episode_length'] <= 1000 and result['mujoco_falls'] in (0, 1)
    # an untrained policy stands: its forward errors are about the commanded 1 m/s
    assert math.isfinite(result['hard_forward_error']) and result['mujoco_forward_error'] > 0.5
    for where in ('mujoco', 'hard'):  # the gait figure from each simulator
        assert os.path.getsize(os.path.join(out, f'contact_gaits_{where}.png')) > 10_000
    with np_load(os.path.join(out, 'soft', 'hard_trace.npz')) as trace:
        assert trace['q'].shape == (len(trace['t']), 12) and len(trace['t']) > 0
        assert abs(trace['t'][1] - trace['t'][0] - 0.02) < 1e-9  # one control step apart
    capsys.readouterr()
    assert contact_comparison.main(['--table', '--models', 'soft', '--out', out]) == 0
    merged = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert merged['results']['soft'] == result
