import os
from pathlib import Path

import mujoco
import numpy as np
import pytest

from loco_policy import description, spec
from loco_policy.sim.backends import MujocoBackend

SHARED = Path(os.environ.get('LOCO_SHARED_DIR', Path(__file__).resolve().parents[2] / 'shared'))
REFERENCE = SHARED / 'robots' / 'anymal_c' / 'anymal_c.xml'
needs_reference = pytest.mark.skipif(
    not REFERENCE.is_file(),
    reason=f'reference ANYmal C figures not found at {REFERENCE} (set LOCO_SHARED_DIR)',
)

# Total mass from the link figures: base 19.2035 + 4 x (hip 2.781 + thigh 3.071 + shank 0.58842)
TOTAL_MASS = 19.2035 + 4 * (2.781 + 3.071 + 0.58842)


@pytest.fixture(scope='module')
def model():
    return description.load_model()


def random_qpos(rng):
    qpos = np.zeros(19)
    qpos[:3] = rng.normal(size=3)
    quat = rng.normal(size=4)
    qpos[3:7] = quat / np.linalg.norm(quat)
    qpos[7:] = rng.uniform(-1.0, 1.0, 12)
    return qpos


def full_mass_matrix(model, qpos):
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_forward(model, data)
    dense = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, dense)
    return dense, data


def test_loader_gives_a_free_base_then_the_spec_joints(model):
    assert model.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE
    assert model.body(int(model.jnt_bodyid[0])).name == spec.BASE_BODY
    assert tuple(model.joint(i).name for i in range(1, model.njnt)) == spec.JOINT_NAMES
    assert (model.nq, model.nv, model.nu) == (19, 18, 12)
    assert tuple(model.actuator(i).name for i in range(model.nu)) == spec.JOINT_NAMES


def test_total_mass_is_the_sum_of_the_link_figures(model):
    assert abs(float(np.sum(model.body_mass)) - TOTAL_MASS) < 1e-9


def test_description_agrees_with_the_spec(model):
    ranges = np.array([model.jnt_range[model.joint(name).id] for name in spec.JOINT_NAMES])
    np.testing.assert_allclose(ranges, spec.JOINT_POS_LIMITS)
    np.testing.assert_allclose(model.actuator_ctrlrange[:, 1], spec.TORQUE_LIMIT)
    np.testing.assert_allclose(model.actuator_ctrlrange[:, 0], -spec.TORQUE_LIMIT)
    assert model.opt.timestep * 4 == pytest.approx(spec.CONTROL_DT)


def test_feet_are_spheres_of_3_cm(model):
    for foot in spec.FOOT_NAMES:
        geom = model.geom(foot)
        assert geom.type[0] == mujoco.mjtGeom.mjGEOM_SPHERE
        assert geom.size[0] == pytest.approx(0.03)


def test_mass_matrix_is_symmetric_positive_definite(model):
    dense, _ = full_mass_matrix(model, random_qpos(np.random.default_rng(5)))
    np.testing.assert_allclose(dense, dense.T, atol=1e-12)
    assert np.linalg.eigvalsh(dense).min() > 0
    # Base translation block is the total mass times identity.
    np.testing.assert_allclose(dense[:3, :3], TOTAL_MASS * np.eye(3), rtol=1e-9)


def test_default_pose_is_level_and_mirrored(model):
    data = mujoco.MjData(model)
    data.qpos[:] = description.default_qpos()
    mujoco.mj_kinematics(model, data)
    feet = np.array([data.geom_xpos[model.geom(foot).id] for foot in spec.FOOT_NAMES])
    np.testing.assert_allclose(feet[:, 2], feet[0, 2], atol=1e-9)  # all four at one height
    np.testing.assert_allclose(feet[0] * [1, -1, 1], feet[1], atol=1e-9)  # LF mirrors RF
    np.testing.assert_allclose(feet[0] * [-1, 1, 1], feet[2], atol=1e-9)  # LF mirrors LH
    assert 0.0 < feet[0, 2] - 0.03 < 0.1  # feet start a few cm above the ground


def test_robot_stands_under_the_spec_pd_gains():
    robot = MujocoBackend()  # holds the default pose with the spec's kp, kd, torque limit
    heights = []
    for _ in range(400):  # 2 s at 5 ms
        robot.step(None)
        heights.append(robot.state().base_pos[2])
    heights = np.asarray(heights)
    assert 0.45 < heights[-1] < 0.56
    assert np.ptp(heights[-50:]) < 2e-3  # settled: under 2 mm motion over the last 0.25 s


def test_loader_rejects_a_description_with_joints_out_of_order(tmp_path):
    text = Path(description.DESCRIPTION_FILE).read_text()
    swapped = text.replace('name="LF_HFE"', 'name="TMP"')
    swapped = swapped.replace('name="LF_KFE"', 'name="LF_HFE"')
    swapped = swapped.replace('name="TMP"', 'name="LF_KFE"')
    bad = tmp_path / 'bad.xml'
    bad.write_text(swapped)
    with pytest.raises(ValueError, match='differ from spec'):
        description.load_model(str(bad))


@needs_reference
def test_mass_matrix_equals_the_reference_model_at_20_configurations(model):
    reference = mujoco.MjModel.from_xml_path(str(REFERENCE))
    assert tuple(reference.joint(i).name for i in range(1, reference.njnt)) == spec.JOINT_NAMES
    assert float(np.sum(reference.body_mass)) == pytest.approx(
        float(np.sum(model.body_mass)), rel=1e-12
    )
    rng = np.random.default_rng(2026)
    for _ in range(20):
        qpos = random_qpos(rng)
        ours, ours_data = full_mass_matrix(model, qpos)
        theirs, theirs_data = full_mass_matrix(reference, qpos)
        assert np.abs(ours - theirs).max() / np.abs(theirs).max() < 1e-6
        for foot in spec.FOOT_NAMES:
            np.testing.assert_allclose(
                ours_data.geom_xpos[model.geom(foot).id],
                theirs_data.geom_xpos[reference.geom(foot).id],
                atol=1e-9,
            )
