"""finetune_offline: the fine-tuning loop without ROS runs, swaps candidates in and reports."""

import json
import os

from loco_train.experiments import finetune_offline

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_offline_loop_learns_swaps_and_reports(tmp_path, capsys):
    finetune_offline.main([
        '--warm-start', os.path.join(REPO, 'checkpoints', 'sac_anymal_paper', 'checkpoint.pt'),
        '--minutes', '0.3', '--export-every', '150', '--eval-every', '0.15', '--eval-seeds', '1',
        '--set', 'checkpoint_warmup_updates=100', '--set', 'learning_starts=64',
        '--out', str(tmp_path),
    ])  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    transitions = 0.3 * 60 * 50  # 900 at 50 Hz
    # UTD 1.25 on what came after learning_starts (a few rows wait in the assembler's window)
    assert 1.25 * (transitions - 64 - 40) <= result['updates'] <= 1.25 * transitions
    rows = [json.loads(line) for line in open(tmp_path / 'rows.jsonl')]
    assert rows[0]['robot_minutes'] == 0.0  # the frozen policy's row, then one every 0.15 min
    assert len(rows) == 3 and rows[1]['robot_minutes'] >= 0.15
    assert rows[-1]['version'] == rows[-1]['exported'] >= 3  # exported, all swapped in
    assert (tmp_path / 'v001.onnx').exists()  # version 1: the warm start
    assert result['rejected'] == 0 and result['robot_falls'] == 0
    assert 0.0 < result['frozen'] < 1.0 and 0.0 < result['nominal_last'] < 1.0
    assert (tmp_path / 'curve.png').stat().st_size > 5000


def test_the_nominal_gate_rejects_a_candidate_and_resets_the_actor(tmp_path, capsys):
    # margin -1: every candidate tracks worse than "0 x the frozen policy's error" and is gated
    finetune_offline.main([
        '--warm-start', os.path.join(REPO, 'checkpoints', 'sac_anymal_paper', 'checkpoint.pt'),
        '--minutes', '0.2', '--export-every', '150', '--eval-every', '0.2', '--eval-seeds', '1',
        '--set', 'checkpoint_warmup_updates=100', '--set', 'learning_starts=64',
        '--gate-seeds', '1', '--gate-margin', '-1', '--out', str(tmp_path),
    ])  # fmt: skip
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert result['gated'] >= 1 and result['rejected'] == result['gated']
    assert 'gate: nominal tracking error' in captured.err and 'actor reset' in captured.err
    rows = [json.loads(line) for line in open(tmp_path / 'rows.jsonl')]
    assert rows[-1]['version'] == 1  # the robot kept the warm start


def test_a_candidate_the_swap_check_rejects_resets_the_actor_as_the_sidecar_does(tmp_path, capsys):
    # deviation limits of 1e-6: every candidate whose actor moved is rejected by the swap check
    finetune_offline.main([
        '--warm-start', os.path.join(REPO, 'checkpoints', 'sac_anymal_paper', 'checkpoint.pt'),
        '--minutes', '0.2', '--export-every', '150', '--eval-every', '0.2', '--eval-seeds', '1',
        '--set', 'checkpoint_warmup_updates=100', '--set', 'learning_starts=64',
        '--max-action-deviation', '1e-6', '--max-mean-action-deviation', '1e-6',
        '--out', str(tmp_path),
    ])  # fmt: skip
    err = capsys.readouterr().err
    rejections = [line for line in err.splitlines() if 'exceeds max_action_deviation' in line]
    assert rejections and all(line.endswith('; actor reset') for line in rejections), err


def test_the_regression_guard_sends_the_actor_back_to_the_best_version(tmp_path, capsys):
    # margin -1: a candidate must beat the best by the whole reference error, so each one
    # judged is a regression and the warm start (version 1) stays the best
    finetune_offline.main([
        '--warm-start', os.path.join(REPO, 'checkpoints', 'sac_anymal_paper', 'checkpoint.pt'),
        '--minutes', '0.4', '--export-every', '100', '--eval-every', '0.4', '--eval-seeds', '1',
        '--set', 'checkpoint_warmup_updates=100', '--set', 'learning_starts=64',
        '--set', 'guard_rows=150', '--set', 'guard_margin=-1', '--out', str(tmp_path),
    ])  # fmt: skip
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert result['guard_resets'] >= 1, captured.err
    assert 'regressed: tracking' in captured.err and '(version 1)' in captured.err
    swaps = [line for line in captured.err.splitlines() if 'swapped in' in line]
    # one candidate per verdict: each waits until the running one has 150 judged rows
    assert 1 <= len(swaps) <= 0.4 * 60 * 50 / 150
    rows = [json.loads(line) for line in open(tmp_path / 'rows.jsonl')]
    assert rows[-1]['guard']['best_version'] == 1
    assert rows[0]['robot_minutes'] == 0.0 and rows[0]['tracking_error'] == result['frozen']
    assert json.loads((tmp_path / 'result.json').read_text()) == result
    # runs drawn together: the frozen line is the first run's row at 0 minutes
    figure = tmp_path / 'both.png'
    finetune_offline.main(['--compare', f'a={tmp_path / "rows.jsonl"}', '--compare',
                           f'b={tmp_path / "rows.jsonl"}', '--out', str(figure)])  # fmt: skip
    drawn = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert drawn == {'figure': str(figure), 'runs': ['a', 'b'], 'frozen': result['frozen']}
    assert figure.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_the_robot_and_its_evaluations_can_be_the_stacks_exact_sensors_and_drawn_phases(
    tmp_path, capsys
):
    from loco_train.experiments.evaluate import EvalConfig, evaluate, NO_NOISE
    from loco_train.experiments.finetune_offline import tracking_error

    finetune_offline.main([
        '--warm-start', os.path.join(REPO, 'checkpoints', 'sac_anymal_paper', 'checkpoint.pt'),
        '--minutes', '0.1', '--export-every', '150', '--eval-every', '0.1', '--eval-seeds', '2',
        '--set', 'checkpoint_warmup_updates=100', '--set', 'learning_starts=64',
        '--no-sensor-noise', '--eval-phase-jitter', '0.4', '--gain-scale', '0.75',
        '--out', str(tmp_path),
    ])  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result['args']['sensor_noise'] is False and result['args']['eval_phase_jitter'] == 0.4
    # the frozen row is loco-train eval's with the same exact sensors and drawn phases
    config = EvalConfig(seeds=2, gain_scale=0.75, phase_jitter=0.4, **NO_NOISE)
    summary = evaluate(str(tmp_path / 'v001.onnx'), config)
    assert result['frozen'] == tracking_error(summary)
    noisy = evaluate(str(tmp_path / 'v001.onnx'), EvalConfig(seeds=2, gain_scale=0.75))
    assert tracking_error(noisy) != result['frozen']
