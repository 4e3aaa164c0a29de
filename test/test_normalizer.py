"""The running observation normaliser: statistics, forward, NaN safety, export."""

import io

import numpy as np
import pytest
import torch

from loco_train.policy.normalizer import EmpiricalNormalizer


def test_running_statistics_match_numpy_over_uneven_batches():
    rng = np.random.default_rng(0)
    data = rng.normal([1.0, -3.0, 100.0], [0.5, 2.0, 10.0], size=(1000, 3))
    norm = EmpiricalNormalizer(3)
    for chunk in np.array_split(data, [1, 7, 300, 301, 999]):
        norm.update(torch.tensor(chunk, dtype=torch.float32))
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-5)
    np.testing.assert_allclose(norm.var.numpy(), data.var(0), rtol=1e-4)
    assert float(norm.count) == 1000


def test_forward_normalises_and_clips():
    norm = EmpiricalNormalizer(2, clip=5.0)
    norm.update(torch.randn(10_000, 2) * torch.tensor([3.0, 0.1]) + torch.tensor([5.0, -1.0]))
    y = norm(torch.randn(10_000, 2) * torch.tensor([3.0, 0.1]) + torch.tensor([5.0, -1.0]))
    torch.testing.assert_close(y.mean(0), torch.zeros(2), atol=0.05, rtol=0)
    torch.testing.assert_close(y.std(0), torch.ones(2), atol=0.05, rtol=0)
    assert norm(torch.tensor([[1e6, -1e6]])).tolist() == [[5.0, -5.0]]
    torch.testing.assert_close(
        norm.inverse(norm(torch.tensor([[5.5, -1.01]]))), torch.tensor([[5.5, -1.01]])
    )


def test_identity_before_any_data_and_nan_batches_are_ignored():
    norm = EmpiricalNormalizer(2)
    x = torch.tensor([[0.3, -0.7]])
    torch.testing.assert_close(norm(x), x)
    norm.update(torch.tensor([[float('nan'), 1.0]]))
    assert float(norm.count) == 0 and torch.isfinite(norm.mean).all()


def test_state_is_buffers_and_round_trips():
    norm = EmpiricalNormalizer(4)
    norm.update(torch.randn(50, 4))
    assert set(norm.state_dict()) == {'mean', 'var', 'count'}
    assert not list(norm.parameters())
    other = EmpiricalNormalizer(4)
    other.load_state_dict(norm.state_dict())
    x = torch.randn(3, 4)
    torch.testing.assert_close(other(x), norm(x))


@pytest.mark.filterwarnings('ignore::DeprecationWarning')  # the TorchScript exporter
def test_exports_to_onnx_with_its_statistics_baked_in():
    import onnx  # core dependencies: a missing one is a failure, not a skip
    import onnxruntime as ort

    norm = EmpiricalNormalizer(48)
    norm.update(torch.randn(500, 48) * 3.0 + 2.0)
    buffer = io.BytesIO()
    torch.onnx.export(
        norm,
        (torch.zeros(1, 48),),
        buffer,
        input_names=['obs'],
        output_names=['y'],
        dynamic_axes={'obs': {0: 'batch'}},
        dynamo=False,
    )
    onnx.checker.check_model(onnx.load_from_string(buffer.getvalue()))
    session = ort.InferenceSession(buffer.getvalue(), providers=['CPUExecutionProvider'])
    x = torch.randn(7, 48) * 3.0
    (y,) = session.run(None, {'obs': x.numpy()})
    np.testing.assert_allclose(y, norm(x).numpy(), atol=1e-5)
