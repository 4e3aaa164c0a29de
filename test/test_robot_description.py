"""robot_description over real DDS: the URDF latched for late joiners; bad files refused."""

import importlib.util
import time

import pytest

from loco_policy import description, spec
from test.helpers.deploy_fixtures import Probe, ros_env, start_node, stop_process

pytestmark = pytest.mark.ros


def latched_subscription(probe, msg_type, topic, sink):
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    qos = QoSProfile(
        depth=1,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL,
    )
    probe.node.create_subscription(msg_type, topic, sink.append, qos)


def test_late_subscriber_gets_the_urdf(request, tmp_path):
    from std_msgs.msg import String

    probe = Probe(request.node.name)
    node = start_node('robot_description', [], ros_env(request.node.name), tmp_path / 'node.log')
    received = []
    try:
        time.sleep(2.0)  # published before this subscriber exists
        latched_subscription(probe, String, '/robot_description', received)
        assert probe.spin_until(lambda: received, 20.0), (tmp_path / 'node.log').read_text()
        probe.spin(0.5)
        assert len(received) == 1 and received[0].data == description.load_urdf()
        assert node.poll() is None
    finally:
        code = stop_process(node)
        probe.close()
    log = (tmp_path / 'node.log').read_text()
    assert code == 0 and f'{description.URDF_FILE} (' in log and '17 links' in log
    if importlib.util.find_spec('tf2_msgs') is None:
        assert '/tf not published (tf2_msgs is not installed)' in log


@pytest.mark.skipif(importlib.util.find_spec('tf2_msgs') is None, reason='tf2_msgs not installed')
def test_joint_states_become_tf_where_tf2_msgs_is_installed(request, tmp_path):
    from sensor_msgs.msg import JointState
    from tf2_msgs.msg import TFMessage

    probe = Probe(request.node.name)
    node = start_node('robot_description', [], ros_env(request.node.name), tmp_path / 'node.log')
    static, tf = [], []
    latched_subscription(probe, TFMessage, '/tf_static', static)
    probe.node.create_subscription(TFMessage, '/tf', tf.append, 10)
    pub = probe.node.create_publisher(JointState, '/joint_states', 10)
    try:
        end = time.monotonic() + 20.0
        while not tf and time.monotonic() < end:
            pub.publish(JointState(name=list(spec.JOINT_NAMES), position=[0.1] * 12))
            probe.spin(0.05)
    finally:
        stop_process(node)
        probe.close()
    assert {t.child_frame_id for t in static[0].transforms} == set(spec.FOOT_NAMES)
    assert len(tf[0].transforms) == 12


@pytest.mark.parametrize(
    'content, message',
    [(None, 'No such file'), ('<robot><link name="a">', 'robot description: not valid XML')],
)
def test_a_missing_or_malformed_urdf_is_refused(request, tmp_path, content, message):
    path = tmp_path / 'robot.urdf'
    if content is not None:
        path.write_text(content)
    node = start_node(
        'robot_description', ['-p', f'urdf:={path}'], ros_env(request.node.name),
        tmp_path / 'node.log',
    )  # fmt: skip
    try:
        code = node.wait(30)
    finally:
        stop_process(node)
    log = (tmp_path / 'node.log').read_text()
    assert code == 2 and message in log, log


def test_transform_stamped_carries_a_frame_in_ros_order():
    from builtin_interfaces.msg import Time
    import numpy as np

    from loco_policy.description.kinematics import Frame
    from loco_policy.nodes.robot_tf import transform_stamped

    frame = Frame('odom', 'base', np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.5, -0.5, 0.5]))
    msg = transform_stamped(frame, Time(sec=5, nanosec=6))
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (5, 6)
    t, r = msg.transform.translation, msg.transform.rotation
    assert (msg.header.frame_id, msg.child_frame_id) == ('odom', 'base')
    assert (t.x, t.y, t.z) == (1.0, 2.0, 3.0) and (r.x, r.y, r.z, r.w) == (0.5, -0.5, 0.5, 0.5)
