import numpy as np
import torch

from loco_policy import observation as numpy_obs
from loco_policy import spec
from loco_train.envs import observations as torch_obs


def random_state(rng, n):
    quat = rng.normal(size=(n, 4))
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    return dict(
        base_quat=quat,
        base_lin_vel=rng.normal(size=(n, 3)),
        base_ang_vel=rng.normal(size=(n, 3)),
        joint_pos=spec.DEFAULT_JOINT_POS + 0.3 * rng.normal(size=(n, 12)),
        joint_vel=5.0 * rng.normal(size=(n, 12)),
        command=rng.uniform(-1, 1, size=(n, 3)),
        last_action=rng.normal(size=(n, 12)),
    )


def test_training_and_deployment_builders_agree_on_the_same_states():
    state = random_state(np.random.default_rng(7), 256)
    expected = numpy_obs.build_observation(**state)
    got = torch_obs.build_observation(**{k: torch.tensor(v) for k, v in state.items()})
    assert got.shape == (256, spec.OBS_DIM)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-6)


def test_float32_builder_agrees_too():
    state = random_state(np.random.default_rng(8), 64)
    expected = numpy_obs.build_observation(**state)
    got = torch_obs.build_observation(
        **{k: torch.tensor(v, dtype=torch.float32) for k, v in state.items()}
    )
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_observation_is_differentiable_in_the_state():
    state = {
        k: torch.tensor(v, requires_grad=True)
        for k, v in random_state(np.random.default_rng(9), 4).items()
    }
    torch_obs.build_observation(**state).sum().backward()
    for name, tensor in state.items():
        assert tensor.grad is not None and torch.all(torch.isfinite(tensor.grad)), name
    # d(sum obs)/d(joint_vel) is the joint_vel scale
    np.testing.assert_allclose(state['joint_vel'].grad.numpy(), 0.05)
