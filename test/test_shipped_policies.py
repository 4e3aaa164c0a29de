"""Every shipped policy file loads as the robot loads it and walks the evaluation schedule.

One seed each in MuJoCo (the independent simulator, sim2sim) with the evaluation's sensor noise;
the 10-seed figures of each file are in loco_policy/policies/README.md.
"""

import glob
import json
import os

import pytest

from loco_policy.policy_file import OnnxPolicy
from test.helpers.deploy_fixtures import REPO

POLICIES = sorted(glob.glob(os.path.join(REPO, 'loco_policy', 'policies', '*.onnx')))


def test_the_three_algorithms_are_shipped():
    names = {os.path.basename(p) for p in POLICIES}
    assert {'anymal_c_walk.onnx', 'anymal_c_walk_ppo.onnx', 'anymal_c_walk_sac.onnx'} <= names


@pytest.mark.parametrize('path', POLICIES, ids=os.path.basename)
def test_a_shipped_policy_has_its_training_record_and_walks_in_mujoco(path):
    from loco_train.experiments.evaluate import EvalConfig, evaluate

    contract = OnnxPolicy(path, warmup=1).contract  # refused here if the contract is broken
    record = path[: -len('.onnx')] + '.train.json'
    with open(record) as handle:
        assert json.load(handle)['policy'] == os.path.basename(path)
    algorithm = contract.provenance.get('algorithm', '')
    summary = evaluate(path, EvalConfig(sim='mujoco', seeds=1))
    assert summary['falls'] == 0, (algorithm, summary)
    assert summary['mean_lin_err'] < 0.25, (algorithm, summary)  # m/s over the schedule


def test_the_sac_checkpoint_warm_starts_the_sidecar_on_the_shipped_sac_policy(tmp_path):
    """sac_finetune warm-started from the shipped SAC state: its first candidate is the file."""
    import numpy as np

    from loco_train.finetune.learner import FineTuner

    tuner = FineTuner.from_checkpoint(
        os.path.join(REPO, 'checkpoints', 'sac_anymal_paper', 'checkpoint.pt')
    )
    tuner.export(str(tmp_path / 'v1.onnx'))
    shipped = OnnxPolicy(os.path.join(REPO, 'loco_policy', 'policies', 'anymal_c_walk_sac.onnx'))
    candidate = OnnxPolicy(str(tmp_path / 'v1.onnx'))
    rng = np.random.default_rng(0)
    for _ in range(20):
        obs = (0.5 * rng.standard_normal(48)).astype(np.float32)
        np.testing.assert_allclose(candidate.act(obs), shipped.act(obs), atol=1e-5)
