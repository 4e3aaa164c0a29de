"""The nominal gate: MuJoCo episodes of a candidate against the policy fine-tuning started from."""

import os

import pytest
import torch

import loco_policy
from loco_train.finetune.gate import GateRefused, NominalGate
from loco_train.finetune.learner import FinetuneConfig, FineTuner

SHIPPED = os.path.join(os.path.dirname(loco_policy.__file__), 'policies', 'anymal_c_walk.onnx')


def scaled_policy(path, factor):
    """The shipped policy with its mean head multiplied by factor, exported to path."""
    tuner = FineTuner.from_onnx(SHIPPED, FinetuneConfig())
    with torch.no_grad():
        tuner.sac.actor.head.weight[: tuner.sac.actor.action_dim].mul_(factor)
    tuner.export(str(path))
    return str(path)


def test_the_reference_passes_and_a_falling_or_worse_policy_is_refused(tmp_path):
    gate = NominalGate(1, 0.25, SHIPPED)
    assert 0.0 < gate.reference < 0.3  # m/s + rad/s: the shipped policy walks the schedule
    assert gate.check(SHIPPED) == pytest.approx(gate.reference)  # same seeds, same episodes
    violent = scaled_policy(tmp_path / 'violent.onnx', 10.0)  # actions at their bounds: falls
    with pytest.raises(GateRefused, match=r'fell in 1 of 1 nominal episodes'):
        gate.check(violent)
    strict = NominalGate(1, -0.5, SHIPPED)  # must track twice as well as the reference
    with pytest.raises(GateRefused, match=r'nominal tracking error .* above'):
        strict.check(SHIPPED)


def test_a_reference_that_falls_closes_the_gate(tmp_path):
    violent = scaled_policy(tmp_path / 'violent.onnx', 10.0)
    with pytest.raises(GateRefused, match='reference .* fell'):
        NominalGate(1, 0.25, violent)
    with pytest.raises(ValueError, match='at least 1'):
        NominalGate(0, 0.25, SHIPPED)


def test_the_stacks_gate_walks_exact_velocities_at_a_drawn_phase():
    # the stack's robot: no sensor noise, the command changes shifted per seed; each setting
    # changes the episode the reference is scored on
    noisy = NominalGate(1, 0.0, SHIPPED)
    exact = NominalGate(1, 0.0, SHIPPED, sensor_noise=False)
    drawn = NominalGate(1, 0.0, SHIPPED, sensor_noise=False, phase_jitter=0.5)
    assert exact.config.lin_vel_noise == 0.0 and exact.config.joint_vel_noise == 0.0
    assert noisy.config.lin_vel_noise > 0.0 and drawn.config.phase_jitter == 0.5
    references = {noisy.reference, exact.reference, drawn.reference}
    assert len(references) == 3 and all(0.0 < r < 0.3 for r in references), references
    assert drawn.check(SHIPPED) == pytest.approx(drawn.reference)  # the same draw every time
    with pytest.raises(ValueError, match='phase_jitter must lie in'):
        NominalGate(1, 0.0, SHIPPED, phase_jitter=50.0)
