"""TF for bags: frames from robot-state messages; a recorded sim_robot bag a viewer can show."""

import time

import mujoco
import numpy as np
import pytest
from rosbags.typesys import get_typestore

from loco_policy import description, spec
from loco_policy.tools import bag_tf
from loco_policy.tools.bag_writer import list_splits, TYPESTORE
from test.helpers.bag_frames import check_tf, matrix, read, world_poses
from test.helpers.deploy_fixtures import (
    Probe,
    publish_damping,
    ros_env,
    start_node,
    stop_process,
)

TYPES = get_typestore(TYPESTORE)


def header(sec, nanosec, frame=''):
    t = TYPES.types
    return t['std_msgs/msg/Header'](
        stamp=t['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec), frame_id=frame
    )


def joint_states(sec, q, names=spec.JOINT_NAMES):
    t = TYPES.types
    return t['sensor_msgs/msg/JointState'](
        header=header(sec, 7), name=list(names), position=np.asarray(q, dtype=np.float64),
        velocity=np.zeros(len(names)), effort=np.zeros(len(names)),
    )  # fmt: skip


def odometry(sec, pos, quat):
    t = TYPES.types
    pose = t['geometry_msgs/msg/PoseWithCovariance'](
        pose=t['geometry_msgs/msg/Pose'](
            position=t['geometry_msgs/msg/Point'](*pos),
            orientation=t['geometry_msgs/msg/Quaternion'](
                x=quat[1], y=quat[2], z=quat[3], w=quat[0]
            ),
        ),
        covariance=np.zeros(36),
    )
    twist = t['geometry_msgs/msg/TwistWithCovariance'](
        twist=t['geometry_msgs/msg/Twist'](
            linear=t['geometry_msgs/msg/Vector3'](0.0, 0.0, 0.0),
            angular=t['geometry_msgs/msg/Vector3'](0.0, 0.0, 0.0),
        ),
        covariance=np.zeros(36),
    )
    return t['nav_msgs/msg/Odometry'](
        header=header(sec, 7, 'odom'), child_frame_id='base', pose=pose, twist=twist
    )


def decode(raw):
    return TYPES.deserialize_cdr(raw, bag_tf.TF_TYPE)


def transforms(*messages):
    return {
        t.child_frame_id: (t.header.frame_id, matrix(t.transform))
        for m in messages
        for t in m.transforms
    }


def test_frames_from_states_equal_mujoco_at_random_states():
    model = description.load_model()
    data = mujoco.MjData(model)
    tf = bag_tf.BagTf(description.load_urdf(), TYPES)
    rng = np.random.default_rng(2)
    static = None
    for sec in range(1, 11):
        qpos = description.default_qpos()
        qpos[:3] = rng.normal(size=3)
        quat = rng.normal(size=4)
        qpos[3:7] = quat / np.linalg.norm(quat)
        qpos[7:] = rng.uniform(-2.0, 2.0, 12)
        order = rng.permutation(12)  # /joint_states may come in any order
        out = tf.feed(
            '/joint_states', joint_states(sec, qpos[7:][order], np.array(spec.JOINT_NAMES)[order])
        )
        if static is None:  # the first message brings /tf_static along
            assert [topic for topic, _ in out] == ['/tf_static', '/tf']
            static = decode(out[0][1])
            assert {t.child_frame_id for t in static.transforms} == set(spec.FOOT_NAMES)
        assert out[-1][0] == '/tf'
        joints = decode(out[-1][1])
        assert len(joints.transforms) == 12
        assert all(
            (t.header.stamp.sec, t.header.stamp.nanosec) == (sec, 7) for t in joints.transforms
        )
        [(topic, raw)] = tf.feed('/odom', odometry(sec, qpos[:3], qpos[3:7]))
        base = decode(raw)
        assert topic == '/tf' and [
            (t.header.frame_id, t.child_frame_id) for t in base.transforms
        ] == [('odom', 'base')]
        data.qpos[:] = qpos
        mujoco.mj_kinematics(model, data)
        poses = world_poses(transforms(static, joints, base))
        for body in range(1, model.nbody):
            pose = poses[model.body(body).name]
            np.testing.assert_allclose(pose[:3, 3], data.xpos[body], atol=1e-6)
            np.testing.assert_allclose(pose[:3, :3].ravel(), data.xmat[body], atol=1e-6)
        for foot in spec.FOOT_NAMES:
            np.testing.assert_allclose(poses[foot][:3, 3], data.site(foot).xpos, atol=1e-6)


def test_a_new_description_is_used_and_a_bad_one_is_named():
    tf = bag_tf.BagTf(description.load_urdf(), TYPES, topics=('/tf',))
    assert [t for t, _ in tf.feed('/joint_states', joint_states(1, np.zeros(12)))] == ['/tf']
    longer = description.load_urdf().replace(
        'xyz="0.01305 -0.08795 -0.31547"', 'xyz="0.01305 -0.08795 -0.5"'
    )
    assert longer != description.load_urdf()
    both = bag_tf.BagTf(description.load_urdf(), TYPES)
    both.feed('/joint_states', joint_states(1, np.zeros(12)))
    assert both.feed('/robot_description', TYPES.types['std_msgs/msg/String'](data=longer)) == []
    topics = [t for t, _ in both.feed('/joint_states', joint_states(2, np.zeros(12)))]
    assert topics == ['/tf_static', '/tf']  # due again for the new description
    string = TYPES.types['std_msgs/msg/String']
    assert both.feed('/robot_description', string(data='<robot><link')) == []
    assert 'not valid XML' in both.error
    static = decode(both.static_message(3, 0))
    foot = {t.child_frame_id: t for t in static.transforms}['LF_FOOT']
    assert foot.transform.translation.z == pytest.approx(-0.5)  # the good one stayed
    assert both.feed('/imu', None) == []
    assert bag_tf.derived_topics(['/tf', '/odom', '/tf_static'], importable=False) == (
        '/tf',
        '/tf_static',
    )
    assert bag_tf.derived_topics(['/tf'], importable=True) == ()
    assert bag_tf.derived_topics(['/odom'], importable=False) == ()


def log_of(tmp_path):
    return '\n'.join(p.read_text() for p in sorted(tmp_path.glob('*.log')))


@pytest.mark.ros
def test_recorded_sim_robot_bag_holds_description_and_moving_tf_in_every_split(request, tmp_path):
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    env = ros_env(request.node.name)
    probe = Probe(request.node.name)
    received = []
    latched = QoSProfile(
        depth=1,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL,
    )
    sim = start_node('sim_robot', ['-p', 'publish_rate:=100.0'], env, tmp_path / 'sim.log')
    bag = tmp_path / 'bag'
    recorder = None
    try:
        time.sleep(3.0)  # sim_robot published /robot_description before anyone listened
        probe.node.create_subscription(String, '/robot_description', received.append, latched)
        assert probe.spin_until(lambda: received, 20.0), (tmp_path / 'sim.log').read_text()
        assert received[0].data == description.load_urdf()
        recorder = start_node(
            'recorder', ['-p', f'output:={bag}', '-p', 'split_duration:=1.0'], env,
            tmp_path / 'recorder.log',
        )  # fmt: skip
        assert probe.spin_until(lambda: list_splits(str(bag)), 30.0), log_of(tmp_path)
        # damping only: the robot sinks, base and legs move
        pub = probe.node.create_publisher(JointState, '/joint_command', 10)
        publish_damping(probe, pub, 1.5)
        assert probe.spin_until(lambda: len(list_splits(str(bag))) >= 4, 30.0), log_of(tmp_path)
    finally:
        if recorder is not None:
            stop_process(recorder)
        stop_process(sim)
        probe.close()
    log = (tmp_path / 'recorder.log').read_text()
    splits = list_splits(str(bag))
    assert len(splits) >= 4, log
    heights = []  # base heights (m) in every split's /odom
    for split in splits:
        messages = read(split)
        topics = [topic for topic, _ in messages]
        # every split opens on its own in a viewer: the URDF and the static frames are in it
        assert topics.count('/robot_description') == 1 and topics.count('/tf_static') == 1, split
        heights += [msg.pose.pose.position.z for topic, msg in messages if topic == '/odom']
        if split in (splits[0], splits[-1]):
            # the first opens while discovery may still be matching the state publishers (a
            # loaded machine: a split of 1 s with a few messages); the last is cut short by the
            # recorder's stop (SIGINT may land between two writes)
            continue
        assert topics.count('/tf') >= topics.count('/joint_states') > 20
        checked, worst, _ = check_tf(split)
        assert checked > 20 and worst < 1e-6, (split, checked, worst)
    heights = np.asarray(heights)
    assert heights.max() - heights.min() > 0.1  # the base moved in odom
