import numpy as np
import pytest

from loco_policy import spec
from loco_policy.observation import build_observation, projected_gravity, quat_rotate_inverse

SLICES = spec.observation_slices()


def rotation_matrix(quat):
    """World-from-body rotation of a unit quaternion w-x-y-z (textbook formula)."""
    w, x, y, z = quat
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def yaw_quat(angle):
    return np.array([np.cos(angle / 2), 0.0, 0.0, np.sin(angle / 2)])


def standing_obs(**overrides):
    state = dict(
        base_quat=[1.0, 0.0, 0.0, 0.0],
        base_lin_vel=np.zeros(3),
        base_ang_vel=np.zeros(3),
        joint_pos=spec.DEFAULT_JOINT_POS,
        joint_vel=np.zeros(12),
        command=np.zeros(3),
        last_action=np.zeros(12),
    )
    state.update(overrides)
    return build_observation(**state)


def test_upright_robot_sees_gravity_straight_down():
    obs = standing_obs()
    assert obs.shape == (48,) and obs.dtype == np.float32
    np.testing.assert_allclose(obs[SLICES['projected_gravity']], [0.0, 0.0, -1.0])
    np.testing.assert_allclose(obs[SLICES['joint_pos']], 0.0)  # default pose -> zero offset


def test_yaw_does_not_change_projected_gravity():
    for angle in (0.3, 1.7, -2.9):
        np.testing.assert_allclose(projected_gravity(yaw_quat(angle)), [0, 0, -1], atol=1e-12)


def test_yawed_robot_sees_world_velocity_rotated_into_the_body_frame():
    # Base yawed +90 deg: a world velocity along +x is along -y in the body frame.
    np.testing.assert_allclose(
        quat_rotate_inverse(yaw_quat(np.pi / 2), [1.0, 0.0, 0.0]), [0.0, -1.0, 0.0], atol=1e-12
    )


def test_pitched_robot_sees_gravity_along_its_x_axis():
    pitch = 0.4  # nose down about +y
    quat = np.array([np.cos(pitch / 2), 0.0, np.sin(pitch / 2), 0.0])
    np.testing.assert_allclose(
        projected_gravity(quat), [np.sin(pitch), 0.0, -np.cos(pitch)], atol=1e-12
    )


def test_rotation_matches_the_rotation_matrix_on_random_quaternions():
    rng = np.random.default_rng(3)
    quats = rng.normal(size=(200, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    vecs = rng.normal(size=(200, 3))
    expected = np.stack([rotation_matrix(q).T @ v for q, v in zip(quats, vecs)])
    np.testing.assert_allclose(quat_rotate_inverse(quats, vecs), expected, atol=1e-12)


def test_terms_are_scaled_and_placed_by_the_spec():
    rng = np.random.default_rng(0)
    lin, ang, cmd = rng.normal(size=3), rng.normal(size=3), rng.normal(size=3)
    qd, act = rng.normal(size=12), rng.normal(size=12)
    q = spec.DEFAULT_JOINT_POS + rng.normal(size=12) * 0.1
    obs = standing_obs(
        base_lin_vel=lin, base_ang_vel=ang, command=cmd, joint_pos=q, joint_vel=qd, last_action=act
    )
    scale = spec.observation_scale()
    for name, raw in (
        ('base_lin_vel', lin),
        ('base_ang_vel', ang),
        ('command', cmd),
        ('joint_pos', q - spec.DEFAULT_JOINT_POS),
        ('joint_vel', qd),
        ('last_action', act),
    ):
        np.testing.assert_allclose(obs[SLICES[name]], raw * scale[SLICES[name]], rtol=1e-6)


def test_batched_input_gives_batched_observations():
    rng = np.random.default_rng(1)
    quats = rng.normal(size=(7, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    obs = build_observation(
        quats,
        rng.normal(size=(7, 3)),
        rng.normal(size=(7, 3)),
        rng.normal(size=(7, 12)),
        rng.normal(size=(7, 12)),
        np.zeros(3),
        np.zeros(12),
    )
    assert obs.shape == (7, 48)
    single = build_observation(
        quats[2], np.zeros(3), np.zeros(3), np.zeros(12), np.zeros(12), np.zeros(3), np.zeros(12)
    )
    np.testing.assert_allclose(
        obs[2, SLICES['projected_gravity']], single[SLICES['projected_gravity']]
    )


def test_wrong_term_size_is_a_clear_error():
    with pytest.raises(ValueError, match='joint_vel'):
        standing_obs(joint_vel=np.zeros(11))


def test_the_control_loops_single_builder_equals_the_batched_one():
    from loco_policy.observation import SingleObservation

    rng, single = np.random.default_rng(5), SingleObservation()
    for _ in range(200):
        quat = rng.normal(size=4)
        quat /= np.linalg.norm(quat)
        args = [quat] + [rng.normal(size=k) for k in (3, 3, 12, 12, 3, 12)]
        got = single(*args)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, build_observation(*args), rtol=1e-6, atol=1e-7)
