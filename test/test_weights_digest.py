import hashlib

import onnx
import pytest

from loco_policy.weights_digest import initializer_bytes, weights_sha256
from test.helpers.deploy_fixtures import make_policy_file


def test_digest_equals_the_onnx_package_definition(tmp_path):
    path = make_policy_file(tmp_path / 'p.onnx', hidden=(16,))
    model = onnx.load(path)
    expected = hashlib.sha256(model.graph.SerializeToString())
    blob = open(path, 'rb').read()
    assert len(initializer_bytes(blob)) == len(model.graph.initializer) == 4
    assert weights_sha256(blob) == expected.hexdigest()


def test_digest_covers_the_computation_not_only_the_weights(tmp_path):
    path = make_policy_file(tmp_path / 'p.onnx', hidden=(8,))
    model = onnx.load(path)
    before = weights_sha256(model.SerializeToString())
    # same initializers, one more node scaling the output: the digest must change
    scale = onnx.helper.make_tensor('ten', onnx.TensorProto.FLOAT, [], [10.0])
    out = model.graph.output[0].name
    model.graph.node[-1].output[0] = 'raw'
    model.graph.node.append(onnx.helper.make_node('Constant', [], ['k'], value=scale))
    model.graph.node.append(onnx.helper.make_node('Mul', ['raw', 'k'], [out]))
    assert weights_sha256(model.SerializeToString()) != before


def test_digest_ignores_metadata_and_rejects_garbage(tmp_path):
    path = make_policy_file(tmp_path / 'p.onnx', hidden=(8,))
    model = onnx.load(path)
    before = weights_sha256(model.SerializeToString())
    model.metadata_props.add(key='extra', value='"x"')
    assert weights_sha256(model.SerializeToString()) == before
    with pytest.raises(ValueError, match='not an ONNX model'):
        weights_sha256(b'\x0f\xff\xff')
