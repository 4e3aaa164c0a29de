"""CDR: reading the state messages equals rclpy's deserialisation; rclpy reads what we write."""

import numpy as np
import pytest
from rclpy.serialization import serialize_message

from loco_policy.control import cdr


def random_header(msg, rng):
    msg.header.stamp.sec = int(rng.integers(0, 2**31))
    msg.header.stamp.nanosec = int(rng.integers(0, 10**9))
    msg.header.frame_id = 'f' * int(rng.integers(0, 9))  # every alignment of what follows


@pytest.mark.parametrize('seed', range(20))
def test_joint_state_equals_rclpy(seed):
    from sensor_msgs.msg import JointState

    rng = np.random.default_rng(seed)
    msg = JointState()
    random_header(msg, rng)
    n = int(rng.integers(0, 14))
    msg.name = ['J' * int(rng.integers(1, 9)) + str(i) for i in range(n)]
    msg.position = rng.normal(size=n).tolist()
    msg.velocity = rng.normal(size=int(rng.integers(0, 2)) * n).tolist()  # may be empty
    msg.effort = rng.normal(size=n).tolist()
    names, q, qd, tau = cdr.joint_state(serialize_message(msg))
    stamp = msg.header.stamp
    assert cdr.stamp(serialize_message(msg)) == stamp.sec + stamp.nanosec * 1e-9
    assert names == list(msg.name)
    assert q.tolist() == list(msg.position) and qd.tolist() == list(msg.velocity)
    assert tau.tolist() == list(msg.effort)


@pytest.mark.parametrize('seed', range(10))
def test_imu_and_odometry_equal_rclpy(seed):
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import Imu

    rng = np.random.default_rng(seed)
    imu = Imu()
    random_header(imu, rng)
    o = rng.normal(size=4)
    imu.orientation.x, imu.orientation.y, imu.orientation.z, imu.orientation.w = o.tolist()
    w = rng.normal(size=3)
    imu.angular_velocity.x, imu.angular_velocity.y, imu.angular_velocity.z = w.tolist()
    imu.orientation_covariance = rng.normal(size=9).tolist()
    quat, ang = cdr.imu(serialize_message(imu))
    assert quat.tolist() == o.tolist() and ang.tolist() == w.tolist()

    odom = Odometry()
    random_header(odom, rng)
    odom.child_frame_id = 'b' * int(rng.integers(0, 9))
    odom.pose.pose.position.x = 3.0
    odom.pose.covariance = rng.normal(size=36).tolist()
    v = rng.normal(size=3)
    odom.twist.twist.linear.x, odom.twist.twist.linear.y, odom.twist.twist.linear.z = v.tolist()
    odom.twist.twist.angular.z = 7.0
    assert cdr.odometry_linear_velocity(serialize_message(odom)).tolist() == v.tolist()
    for m in (imu, odom):
        assert (
            cdr.stamp(serialize_message(m)) == m.header.stamp.sec + m.header.stamp.nanosec * 1e-9
        )


def test_truncated_and_foreign_bytes_are_refused_clearly():
    from sensor_msgs.msg import JointState

    msg = JointState(name=['a', 'b'], position=[1.0, 2.0])
    blob = serialize_message(msg)
    for cut in (0, 3, 10, 30, 50):  # inside the header, the names, the positions
        with pytest.raises(cdr.CdrError, match='truncated|shorter'):
            cdr.joint_state(blob[:cut])
    with pytest.raises(cdr.CdrError, match='encapsulation'):
        cdr.joint_state(b'\x12\x34\x00\x00' + blob[4:])


@pytest.mark.parametrize('seed', range(8))
def test_written_joint_state_and_float32_array_read_back_by_rclpy(seed):
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float32MultiArray

    rng = np.random.default_rng(seed)
    frame = 'M' * int(rng.integers(0, 9))  # every alignment of the names after the header
    n = int(rng.integers(0, 25))
    names = ['J' * int(rng.integers(1, 9)) + str(i) for i in range(n)]
    arrays = [rng.normal(size=n) for _ in range(3)]
    sec, nanosec = int(rng.integers(0, 2**31)), int(rng.integers(0, 10**9))
    data = cdr.joint_state_bytes(sec, nanosec, frame, names, *arrays)
    msg = deserialize_message(data, JointState)
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (sec, nanosec)
    assert msg.header.frame_id == frame and list(msg.name) == names
    for got, want in zip((msg.position, msg.velocity, msg.effort), arrays):
        assert np.array_equal(np.asarray(got), want)
    assert cdr.joint_state(data)[0] == names

    dims = [('l' * int(rng.integers(0, 7)), int(rng.integers(0, 9)), 7), ('schema', 3, 3)]
    data = rng.normal(size=int(rng.integers(0, 40))).astype(np.float32)
    msg = deserialize_message(cdr.float32_multiarray_bytes(dims, data), Float32MultiArray)
    assert [(d.label, d.size, d.stride) for d in msg.layout.dim] == dims
    assert msg.layout.data_offset == 0 and np.array_equal(np.asarray(msg.data), data)
