"""`loco-train sac`: the command, checkpoints, resume, the ANYmal stub, Pendulum learning."""

import contextlib
import io
import json
import os

import pytest
import torch

from loco_train.atomic_io import torch_load
from loco_train.cli import main


def run_cli(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(['sac', *argv])
    lines = out.getvalue().strip().splitlines()
    return status, (json.loads(lines[-1]) if lines else None)


def test_anymal_is_refused_with_a_clear_message(capsys):
    assert main(['sac', '--env', 'anymal', '--no-progress']) == 2
    assert 'ANYmal environment is not built yet' in capsys.readouterr().err


def test_unknown_env_and_discrete_actions_are_rejected():
    with pytest.raises(ValueError, match='unknown environment'):
        main(['sac', '--env', 'Pendulum-v1'])
    with pytest.raises(ValueError, match='Box'):
        main(['sac', '--env', 'gymnasium:CartPole-v1'])


def test_smoke_run_checkpoint_and_resume(tmp_path):
    common = [
        '--env',
        'gymnasium:Pendulum-v1',
        '--learning-starts',
        '200',
        '--batch-size',
        '32',
        '--eval-episodes',
        '1',
        '--log-dir',
        str(tmp_path),
        '--no-progress',
        '--checkpoint-interval',
        '200',
        '--save-replay',
    ]
    status, first = run_cli('--total-steps', '400', *common)
    assert status == 0
    assert first['env_steps'] == 400 and first['updates'] == 100  # utd 0.5 after 200 steps
    assert first['skipped_updates'] == 0 and first['eval_return'] < 0
    checkpoint = torch_load(first['checkpoint'])
    for key in (
        'actor',
        'critic',
        'critic_target',
        'log_alpha',
        'actor_optim',
        'critic_optim',
        'alpha_optim',
        'normalizer',
    ):
        assert key in checkpoint['sac']
    assert checkpoint['sac']['normalizer']['count'] == 400
    assert os.path.exists(tmp_path / 'replay.pt')
    assert any(name.startswith('events.out.tfevents') for name in os.listdir(tmp_path))

    status, second = run_cli('--total-steps', '600', '--resume', first['checkpoint'], *common)
    assert status == 0
    assert second['env_steps'] == 600 and second['updates'] == 200  # continued, not restarted
    resumed = torch_load(second['checkpoint'])
    assert resumed['sac']['normalizer']['count'] == 600
    replay = torch_load(tmp_path / 'replay.pt')
    assert replay['obs'].shape[0] * 4 == 600  # replay restored then extended
    assert not torch.equal(
        resumed['sac']['actor']['head.weight'], checkpoint['sac']['actor']['head.weight']
    )


@pytest.mark.slow
def test_sac_learns_pendulum_within_20k_steps(tmp_path):
    """Acceptance: `loco-train sac --env gymnasium:Pendulum-v1 --total-steps 20000`."""
    status, result = run_cli(
        '--env',
        'gymnasium:Pendulum-v1',
        '--total-steps',
        '20000',
        '--log-dir',
        str(tmp_path),
        '--no-progress',
    )
    assert status == 0
    print(json.dumps(result))
    assert result['env_steps'] == 20_000 and result['skipped_updates'] == 0
    assert result['final_return'] > -250  # mean of the last 20 training episodes
    assert result['eval_return'] > -250  # deterministic policy, 10 fresh episodes
