import json

import numpy as np
import onnx
import pytest

from loco_policy import spec
from loco_policy.policy_file import (
    contract_mismatches,
    METADATA_KEYS,
    OnnxPolicy,
    parse_metadata,
    PolicyFileError,
    session_options,
)
from loco_policy.tools.random_policy import ALGORITHM
from test.helpers.deploy_fixtures import contract_metadata, make_policy_file


@pytest.fixture(scope='module')
def good(tmp_path_factory):
    return make_policy_file(tmp_path_factory.mktemp('policy') / 'good.onnx')


def refusal(path):
    with pytest.raises(PolicyFileError) as info:
        OnnxPolicy(path)
    return str(info.value)


def test_valid_file_loads_with_its_contract_and_acts_finitely(good):
    policy = OnnxPolicy(good)
    contract = policy.contract
    assert contract.joint_names == spec.JOINT_NAMES
    assert np.allclose(contract.kp, spec.KP) and contract.control_dt == spec.CONTROL_DT
    assert len(contract.version) == 12 and contract.provenance['algorithm'] == ALGORITHM
    action = policy.act(np.ones(spec.OBS_DIM, dtype=np.float32))
    assert action.shape == (spec.ACTION_DIM,) and np.all(np.isfinite(action))
    summary = json.loads(json.dumps(policy.describe()))
    assert set(summary) == {'path', 'version', 'observation', 'provenance'}
    assert summary['observation'] == 'velocity'


def test_session_is_single_threaded_without_spinning():
    options = session_options()
    assert options.intra_op_num_threads == 1 and options.inter_op_num_threads == 1
    assert options.get_session_config_entry('session.intra_op.allow_spinning') == '0'
    assert options.get_session_config_entry('session.inter_op.allow_spinning') == '0'


def test_wrong_observation_size_is_refused_naming_it(tmp_path):
    message = refusal(make_policy_file(tmp_path / 'p.onnx', obs_dim=45))
    assert 'input obs width 45 is not 48' in message


def test_wrong_joint_order_is_refused_naming_it(tmp_path):
    names = list(spec.JOINT_NAMES)
    names[0], names[1] = names[1], names[0]
    message = refusal(make_policy_file(tmp_path / 'p.onnx', joint_names=names))
    assert 'joint order' in message and 'LF_HFE' in message


def test_mismatched_gains_dt_and_observation_are_each_named(tmp_path):
    obs = spec.observation_metadata()
    obs[0] = dict(obs[0], dim=4)
    path = make_policy_file(tmp_path / 'p.onnx', kp=[60.0] * 12, control_dt=0.01, observation=obs)
    message = refusal(path)
    assert 'kp' in message and 'control_dt 0.01' in message and 'observation layout' in message


def test_corrupt_and_missing_files_are_refused(tmp_path, good):
    corrupt = tmp_path / 'corrupt.onnx'
    corrupt.write_bytes(open(good, 'rb').read()[:3000])
    assert 'not a loadable ONNX model' in refusal(corrupt)
    assert 'does not exist' in refusal(tmp_path / 'absent.onnx')


def test_tampered_weights_fail_the_digest(tmp_path, good):
    model = onnx.load(good)
    weights = onnx.numpy_helper.to_array(model.graph.initializer[0]).copy()
    weights[0, 0] += 1.0
    model.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(weights, 'w0'))
    onnx.save(model, tmp_path / 'tampered.onnx')
    assert 'weights sha256' in refusal(tmp_path / 'tampered.onnx')


def test_missing_metadata_key_and_non_finite_output_are_refused(tmp_path):
    model = onnx.load(make_policy_file(tmp_path / 'p.onnx'))
    kept = [p for p in model.metadata_props if p.key != 'torque_limit']
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    onnx.save(model, tmp_path / 'nokey.onnx')
    assert "lacks key 'torque_limit'" in refusal(tmp_path / 'nokey.onnx')
    assert 'non-finite' in refusal(make_policy_file(tmp_path / 'nan.onnx', nan=True))


def test_parse_metadata_and_mismatches_without_onnxruntime():
    meta = {k: json.dumps(v) for k, v in contract_metadata().items()}
    meta['provenance'] = json.dumps(dict(contract_metadata()['provenance'], weights_sha256='x'))
    assert set(meta) == set(METADATA_KEYS)
    contract = parse_metadata(meta)
    assert contract_mismatches(contract) == []
    meta['command_ranges'] = json.dumps({'vx': [-3, 3], 'vy': [-1, 1], 'wz': [-1, 1]})
    assert 'command range vx' in contract_mismatches(parse_metadata(meta))[0]
    meta['command_ranges'] = json.dumps({'vx': [0.5, 1], 'vy': [-1, 1], 'wz': [-1, 1]})
    assert 'does not hold 0 (stop)' in contract_mismatches(parse_metadata(meta))[0]
    meta['loco_format'] = '2'
    with pytest.raises(PolicyFileError, match='loco_format'):
        parse_metadata(meta)


def test_wider_action_bounds_than_the_robot_allows_are_refused(tmp_path):
    wide = {'low': (2 * spec.ACTION_LOW).tolist(), 'high': (2 * spec.ACTION_HIGH).tolist()}
    message = refusal(make_policy_file(tmp_path / 'p.onnx', action_bounds=wide))
    assert 'action_high' in message and 'action_low' in message


def test_weights_in_an_external_file_are_refused_whatever_the_digest_says(
    good, tmp_path, monkeypatch
):
    from loco_policy.weights_digest import weights_sha256

    model = onnx.load(good)
    side = tmp_path / 'side.onnx'
    onnx.save_model(
        model, side, save_as_external_data=True, all_tensors_to_one_file=True,
        location='weights.bin', size_threshold=0,
    )  # fmt: skip
    # a forger who re-signs: provenance made to match the graph with its external references
    model = onnx.load(side, load_external_data=False)
    blob = model.SerializeToString()
    meta = {p.key: p.value for p in model.metadata_props}
    provenance = json.loads(meta['provenance'])
    provenance['weights_sha256'] = weights_sha256(blob)
    for p in model.metadata_props:
        if p.key == 'provenance':
            p.value = json.dumps(provenance)
    side.write_bytes(model.SerializeToString())
    monkeypatch.chdir(tmp_path)  # where onnxruntime would look for weights.bin
    message = refusal(side)
    assert 'external files' in message and 'weights must be inside' in message


def contract_graph(path, nodes, inputs, outputs, initializers):
    """Write a graph with the full contract and a matching weights digest to path."""
    from onnx import helper

    from loco_policy.weights_digest import weights_sha256

    graph = helper.make_graph(nodes, 'policy', inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    model.ir_version = 9
    digest = weights_sha256(model.SerializeToString())
    provenance = {'algorithm': 'shac', 'iterations': 1, 'return': 0.0, 'code_revision': 'x',
                  'created': 'x', 'weights_sha256': digest}  # fmt: skip
    for key, value in spec.contract_metadata(provenance).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, json.dumps(value)
    onnx.save(model, path)
    return path


def test_a_file_that_fails_to_run_or_takes_float64_is_refused_not_raised(tmp_path):
    from onnx import helper, numpy_helper, TensorProto

    obs = helper.make_tensor_value_info('obs', TensorProto.FLOAT, ['batch', spec.OBS_DIM])
    actions = helper.make_tensor_value_info('actions', TensorProto.FLOAT, ['batch', 12])
    index = np.array(list(range(11)) + [60], dtype=np.int64)  # 60: beyond the 48 inputs
    gather = helper.make_node('Gather', ['obs', 'index'], ['actions'], axis=1)
    failing = contract_graph(tmp_path / 'failing.onnx', [gather], [obs], [actions],
                             [numpy_helper.from_array(index, 'index')])  # fmt: skip
    assert 'fails to run' in refusal(failing)
    obs64 = helper.make_tensor_value_info('obs', TensorProto.DOUBLE, ['batch', spec.OBS_DIM])
    actions64 = helper.make_tensor_value_info('actions', TensorProto.DOUBLE, ['batch', 12])
    weights = numpy_helper.from_array(np.zeros((spec.OBS_DIM, 12)), 'w')
    matmul = helper.make_node('MatMul', ['obs', 'w'], ['actions'])
    double = contract_graph(tmp_path / 'f64.onnx', [matmul], [obs64], [actions64], [weights])
    assert 'tensor(double)' in refusal(double)
