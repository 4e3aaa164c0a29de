import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from loco_policy import spec
from loco_policy.policy_file import METADATA_KEYS, OnnxPolicy, PolicyFileError
from loco_train import cli
from loco_train.policy import check as check_policy
from loco_train.policy.export import DeployedPolicy, export_policy, load_policy, policy_payload
from loco_train.policy.normalizer import EmpiricalNormalizer
from loco_train.sac.actor import anymal_action_bounds, SquashedGaussianActor


@pytest.fixture(scope='module')
def trained_like():
    torch.manual_seed(0)
    b, c = anymal_action_bounds(max_offset=1.0)
    kwargs = dict(
        obs_dim=spec.OBS_DIM,
        action_bias=b.tolist(),
        action_scale=c.tolist(),
        hidden=(64, 64),
        mean_init_std=0.3,
    )
    actor = SquashedGaussianActor(**kwargs)
    normalizer = EmpiricalNormalizer(spec.OBS_DIM)
    normalizer.update(torch.randn(4096, spec.OBS_DIM) * 3.0 + 1.0)
    return actor, kwargs, normalizer


@pytest.fixture(scope='module')
def exported(trained_like, tmp_path_factory):
    actor, _, normalizer = trained_like
    path = tmp_path_factory.mktemp('export') / 'policy.onnx'
    policy = DeployedPolicy(normalizer, actor).eval()
    metadata = export_policy(policy, str(path), 'sac', 123, -4.5)
    return policy, path, metadata


def test_onnxruntime_matches_torch_on_1000_observations(exported):
    policy, path, _ = exported
    obs = (np.random.default_rng(0).normal(size=(1000, spec.OBS_DIM)) * 3.0).astype(np.float32)
    with torch.no_grad():
        expected = policy(torch.from_numpy(obs)).numpy()
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    got = session.run(['actions'], {'obs': obs})[0]
    assert got.shape == (1000, spec.ACTION_DIM)
    assert np.abs(got - expected).max() < 1e-5
    # the normaliser is inside the graph: a constant shift of obs changes the output
    assert np.abs(session.run(['actions'], {'obs': obs + 5.0})[0] - got).max() > 1e-3


def test_every_metadata_key_is_written_and_the_robot_accepts_the_file(exported):
    _, path, metadata = exported
    props = {p.key: json.loads(p.value) for p in onnx.load(str(path)).metadata_props}
    assert set(METADATA_KEYS) <= set(props)
    assert props['joint_names'] == list(spec.JOINT_NAMES)
    assert props['provenance']['algorithm'] == 'sac' and props['provenance']['iterations'] == 123
    policy = OnnxPolicy(str(path), warmup=2)  # raises on any contract or digest mismatch
    assert policy.contract.provenance['weights_sha256'] == metadata['provenance']['weights_sha256']


def test_export_is_deterministic(exported, tmp_path):
    policy, path, _ = exported
    again = tmp_path / 'again.onnx'
    export_policy(policy, str(again), 'sac', 123, -4.5)
    session_a = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    session_b = ort.InferenceSession(str(again), providers=['CPUExecutionProvider'])
    obs = np.random.default_rng(1).normal(size=(16, spec.OBS_DIM)).astype(np.float32)
    np.testing.assert_array_equal(
        session_a.run(None, {'obs': obs})[0], session_b.run(None, {'obs': obs})[0]
    )
    assert not [f for f in os.listdir(tmp_path) if f.endswith('.tmp')]  # no temp file left


def test_cli_exports_a_checkpoint_and_check_policy_accepts_it(trained_like, tmp_path, capsys):
    actor, kwargs, normalizer = trained_like
    ckpt = tmp_path / 'ckpt.pt'
    torch.save({'policy': policy_payload(actor, kwargs, normalizer, 'sac', 7, 1.5)}, ckpt)
    out = tmp_path / 'cli.onnx'
    assert cli.main(['export', str(ckpt), '-o', str(out)]) == 0
    assert cli.main(['check-policy', str(out)]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report['ok'] and report['provenance']['iterations'] == 7
    rebuilt, info = load_policy(str(ckpt))
    assert info == {'algorithm': 'sac', 'iterations': 7, 'return': 1.5, 'command_ranges': None,
                    'observation_layout': 'velocity'}  # fmt: skip
    assert report['command_ranges'] == {k: list(v) for k, v in spec.COMMAND_RANGES.items()}
    obs = torch.randn(5, spec.OBS_DIM)
    torch.testing.assert_close(rebuilt(obs), DeployedPolicy(normalizer, actor).eval()(obs))


def test_the_training_command_ranges_reach_the_contract_and_the_controller(trained_like, tmp_path):
    from loco_policy.control.controller import Controller

    actor, kwargs, normalizer = trained_like
    forward = {'vx': [1.0, 1.0], 'vy': [0.0, 0.0], 'wz': [-0.5, 0.5]}  # the paper's forward task
    ckpt = tmp_path / 'forward.pt'
    payload = policy_payload(actor, kwargs, normalizer, 'shac', 7, 1.5, forward)
    torch.save({'policy': payload}, ckpt)
    out = tmp_path / 'forward.onnx'
    assert cli.main(['export', str(ckpt), '-o', str(out)]) == 0
    policy = OnnxPolicy(str(out))
    # widened to hold 0: a stop command must never be clipped into motion
    expected = {'vx': (0.0, 1.0), 'vy': (0.0, 0.0), 'wz': (-0.5, 0.5)}
    assert policy.contract.command_ranges == expected
    controller = Controller(policy=policy)
    controller.on_cmd_vel(0.7, 0.8, -0.9, 0.0)  # sideways was never trained: clipped away
    assert controller.command.tolist() == [0.7, 0.0, -0.5]
    controller.on_cmd_vel(0.0, 0.0, 0.0, 0.0)
    assert controller.command.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match='outside'):
        export_policy(DeployedPolicy(normalizer, actor), str(out), 'shac', 1, 0.0, {'vx': [0, 2]})


def test_check_policy_names_the_mismatch(exported, tmp_path, capsys):
    _, path, _ = exported
    model = onnx.load(str(path))
    for prop in model.metadata_props:
        if prop.key == 'joint_names':
            names = list(spec.JOINT_NAMES)
            names[0], names[1] = names[1], names[0]
            prop.value = json.dumps(names)
    bad = tmp_path / 'swapped.onnx'
    onnx.save(model, str(bad))
    with pytest.raises(PolicyFileError, match='joint order'):
        OnnxPolicy(str(bad))
    assert check_policy.run(type('Args', (), {'policy': str(bad)})) == 1
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert not report['ok'] and 'joint order' in report['error']


def test_export_refuses_a_checkpoint_without_a_policy(tmp_path):
    ckpt = tmp_path / 'other.pt'
    torch.save({'something': 1}, ckpt)
    with pytest.raises(ValueError, match='not a policy checkpoint'):
        load_policy(str(ckpt))


def test_an_rsl_rl_ppo_checkpoint_exports_to_its_deterministic_actor(tmp_path, capsys):
    from rsl_rl.models.mlp_model import MLPModel
    from tensordict import TensorDict

    torch.manual_seed(3)
    example = TensorDict({'policy': torch.zeros(1, spec.OBS_DIM)}, batch_size=[1])
    model = MLPModel(
        example,
        {'actor': ['policy']},
        'actor',
        spec.ACTION_DIM,
        hidden_dims=(32, 16),
        activation='elu',
        obs_normalization=True,
        distribution_cfg={'class_name': 'GaussianDistribution', 'init_std': 1.0},
    )
    with torch.no_grad():  # a normaliser that has seen data
        model.obs_normalizer._mean.uniform_(-1.0, 1.0)
        model.obs_normalizer._std.uniform_(0.2, 3.0)
    checkpoint = tmp_path / 'model_7.pt'
    torch.save(
        {
            'actor_state_dict': model.state_dict(),
            'critic_state_dict': {},
            'iter': 7,
            'infos': None,
        },
        checkpoint,
    )
    with open(tmp_path / 'run.json', 'w') as handle:  # what loco-train ppo writes beside it
        json.dump({'command_ranges': {'vx': [-0.5, 1.0], 'vy': [0.0, 0.0], 'wz': [-1, 1]}}, handle)
    out = tmp_path / 'ppo.onnx'
    assert cli.main(['export', str(checkpoint), '-o', str(out), '--mean-return', '12.5']) == 0
    assert OnnxPolicy(str(out)).contract.command_ranges['vx'] == (-0.5, 1.0)
    obs = torch.randn(1000, spec.OBS_DIM) * 2.0
    with torch.no_grad():
        expected = model(TensorDict({'policy': obs}, batch_size=[1000])).numpy()
    session = ort.InferenceSession(str(out), providers=['CPUExecutionProvider'])
    got = session.run(['actions'], {'obs': obs.numpy()})[0]
    assert np.max(np.abs(got - expected)) < 1e-5
    provenance = OnnxPolicy(str(out)).contract.provenance
    assert (provenance['algorithm'], provenance['iterations'], provenance['return']) == (
        'ppo',
        7,
        12.5,
    )
