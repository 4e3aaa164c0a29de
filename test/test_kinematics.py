"""numpy forward kinematics of the URDF against MuJoCo's on the MJCF: link and foot poses."""

import mujoco
import numpy as np
import pytest

from loco_policy import description, spec
from loco_policy.description import kinematics
from loco_policy.description.kinematics import Kinematics


@pytest.fixture(scope='module')
def model():
    return description.load_model()


@pytest.fixture(scope='module')
def tree():
    return Kinematics.from_urdf(description.load_urdf())


def random_qpos(rng):
    qpos = description.default_qpos()
    qpos[:3] = rng.normal(size=3)
    quat = rng.normal(size=4)
    qpos[3:7] = quat / np.linalg.norm(quat)
    qpos[7:] = rng.uniform(spec.JOINT_POS_LIMITS[:, 0], spec.JOINT_POS_LIMITS[:, 1])
    return qpos


def test_rotation_conversions_round_trip():
    rng = np.random.default_rng(3)
    for _ in range(200):
        quat = rng.normal(size=4)
        quat /= np.linalg.norm(quat)
        rot = kinematics.matrix_from_quat(quat)
        expected = np.zeros(9)
        mujoco.mju_quat2Mat(expected, quat)
        np.testing.assert_allclose(rot, expected.reshape(3, 3), atol=1e-12)
        back = kinematics.quat_from_matrix(rot)
        np.testing.assert_allclose(back, quat if quat[0] >= 0 else -quat, atol=1e-9)
        rpy = kinematics.rpy_from_matrix(rot)
        np.testing.assert_allclose(kinematics.matrix_from_rpy(rpy), rot, atol=1e-9)
    for pitch in (np.pi / 2, -np.pi / 2):  # gimbal lock: roll and yaw share one axis
        rot = kinematics.matrix_from_rpy((0.3, pitch, -0.4))
        np.testing.assert_allclose(
            kinematics.matrix_from_rpy(kinematics.rpy_from_matrix(rot)), rot, atol=1e-9
        )
    half_turn = np.diag([1.0, -1.0, -1.0])  # trace -1: the branch without w
    np.testing.assert_allclose(kinematics.quat_from_matrix(half_turn), [0, 1, 0, 0], atol=1e-12)


def test_tree_has_the_spec_joints_and_the_feet(tree):
    assert tree.root == spec.BASE_BODY
    assert tree.movable == spec.JOINT_NAMES
    assert {f.child for f in tree.static_frames()} == set(spec.FOOT_NAMES)
    assert len(tree.links) == 1 + 12 + 4


def test_link_poses_equal_mujoco_at_random_states(model, tree):
    data = mujoco.MjData(model)
    rng = np.random.default_rng(11)
    for _ in range(20):
        qpos = random_qpos(rng)
        data.qpos[:] = qpos
        mujoco.mj_kinematics(model, data)
        base = kinematics.transform(kinematics.matrix_from_quat(qpos[3:7]), qpos[:3])
        poses = tree.link_poses(dict(zip(spec.JOINT_NAMES, qpos[7:])), base)
        for body in range(1, model.nbody):
            pose = poses[model.body(body).name]
            np.testing.assert_allclose(pose[:3, 3], data.xpos[body], atol=1e-6)
            quat = kinematics.quat_from_matrix(pose[:3, :3])
            xquat = data.xquat[body] * np.sign(data.xquat[body][0] or 1.0)
            np.testing.assert_allclose(quat, xquat, atol=1e-6)
        for foot in spec.FOOT_NAMES:
            np.testing.assert_allclose(poses[foot][:3, 3], data.site(foot).xpos, atol=1e-6)


def test_joint_frames_compose_to_the_link_poses(tree):
    rng = np.random.default_rng(5)
    positions = dict(zip(spec.JOINT_NAMES, rng.uniform(-1.0, 1.0, 12)))
    poses = tree.link_poses(positions)
    frames = tree.joint_frames(positions) + tree.static_frames()
    assert len(frames) == 16
    for f in frames:
        rel = np.linalg.inv(poses[f.parent]) @ poses[f.child]
        np.testing.assert_allclose(f.translation, rel[:3, 3], atol=1e-12)
        np.testing.assert_allclose(kinematics.matrix_from_quat(f.rotation), rel[:3, :3], atol=1e-9)
    subset = tree.joint_frames({'LF_KFE': 0.3, 'not_a_joint': 1.0})  # as robot_state_publisher
    assert [(f.parent, f.child) for f in subset] == [('LF_THIGH', 'LF_SHANK')]


def test_bad_descriptions_and_missing_joints_are_named(tree):
    with pytest.raises(ValueError, match='not valid XML'):
        Kinematics.from_urdf('<robot><link name="a"></robot>')
    with pytest.raises(ValueError, match='not <robot>'):
        Kinematics.from_urdf('<mujoco/>')
    two = '<robot><link name="a"/><link name="b"/><link name="c"/>{}</robot>'
    joint = '<joint name="{}" type="{}"><parent link="{}"/><child link="{}"/></joint>'
    with pytest.raises(ValueError, match="joint 'j' has type 'floating'"):
        Kinematics.from_urdf(two.format(joint.format('j', 'floating', 'a', 'b')))
    with pytest.raises(ValueError, match='undefined link'):
        Kinematics.from_urdf(two.format(joint.format('j', 'fixed', 'a', 'z')))
    with pytest.raises(ValueError, match='form a loop'):
        Kinematics.from_urdf(
            two.format(joint.format('j', 'fixed', 'a', 'b') + joint.format('k', 'fixed', 'c', 'c'))
        )
    with pytest.raises(ValueError, match=r"one root link, found \['a', 'c'\]"):
        Kinematics.from_urdf(
            two.format('<link name="d"/>' + joint.format('j', 'fixed', 'a', 'b')).replace(
                '</robot>', joint.format('k', 'fixed', 'c', 'd') + '</robot>'
            )
        )
    with pytest.raises(ValueError, match='child of two joints'):
        Kinematics.from_urdf(
            two.format(joint.format('j', 'fixed', 'a', 'b') + joint.format('k', 'fixed', 'c', 'b'))
        )
    with pytest.raises(ValueError, match='three finite numbers'):
        Kinematics.from_urdf(
            two.format(
                '<joint name="j" type="revolute"><origin xyz="0 nan 0"/>'
                '<parent link="a"/><child link="b"/></joint>'
            )
        )
    with pytest.raises(ValueError, match=r"missing for \['RH_KFE'\]"):
        tree.link_poses(dict(zip(spec.JOINT_NAMES[:-1], np.zeros(11))))


def test_batched_joint_frames_equal_each_joints_motion():
    text = (
        '<robot><link name="a"/><link name="b"/><link name="c"/><link name="d"/>'
        '<joint name="slide" type="prismatic"><origin xyz="0.1 0.2 0.3" rpy="0.4 -0.5 0.6"/>'
        '<axis xyz="0 0 2"/><parent link="a"/><child link="b"/></joint>'
        '<joint name="spin" type="continuous"><origin rpy="1.0 0.2 -0.3"/>'
        '<axis xyz="1 1 0"/><parent link="b"/><child link="c"/></joint>'
        '<joint name="hinge" type="revolute"><origin xyz="0 0 -0.4"/>'
        '<parent link="c"/><child link="d"/></joint></robot>'
    )
    tree = Kinematics.from_urdf(text)
    positions = {'slide': 0.25, 'spin': -2.0, 'hinge': 0.7}
    frames = tree.joint_frames(positions)
    assert [f.child for f in frames] == ['b', 'c', 'd']
    for f, joint in zip(frames, tree.joints):
        expected = joint.motion(positions[joint.name])
        np.testing.assert_allclose(f.translation, expected[:3, 3], atol=1e-12)
        np.testing.assert_allclose(
            kinematics.matrix_from_quat(f.rotation), expected[:3, :3], atol=1e-12
        )
    np.testing.assert_allclose(tree.joints[0].axis, [0, 0, 1])  # normalised
