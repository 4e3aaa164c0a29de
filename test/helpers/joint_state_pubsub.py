"""Two rclpy programs for the transport test: `publish N [WAIT_S]` and `subscribe N`.

The publisher sends N JointState messages with known contents once a subscriber is matched; the
subscriber prints each message it receives as one JSON line and exits after N (or a timeout).
"""

import json
import sys
import time

import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState

from loco_policy import spec

QOS = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)


def expected_message(index):
    """The contents of message `index` as plain Python (what the subscriber must print)."""
    return {
        'frame_id': f'msg{index}',
        'stamp': [1000 + index, 1000 * index],
        'name': list(spec.JOINT_NAMES),
        'position': [0.001 * index + 0.1 * j for j in range(spec.NUM_JOINTS)],
        'velocity': [-0.5 * index + j for j in range(spec.NUM_JOINTS)],
        'effort': [1e-3 * index * j for j in range(spec.NUM_JOINTS)],
    }


def publish(count, timeout=20.0):
    """Wait for a subscriber, then publish `count` messages at 100 Hz."""
    node = rclpy.create_node('joint_state_test_publisher')
    pub = node.create_publisher(JointState, '/joint_states', QOS)
    deadline = time.monotonic() + timeout
    while pub.get_subscription_count() == 0:
        if time.monotonic() > deadline:
            print('no subscriber matched', file=sys.stderr)
            return 1
        rclpy.spin_once(node, timeout_sec=0.05)
    for index in range(count):
        content = expected_message(index)
        msg = JointState()
        msg.header.frame_id = content['frame_id']
        msg.header.stamp.sec, msg.header.stamp.nanosec = content['stamp']
        msg.name = content['name']
        msg.position, msg.velocity, msg.effort = (
            content['position'],
            content['velocity'],
            content['effort'],
        )
        pub.publish(msg)
        time.sleep(0.01)
    time.sleep(1.0)  # let reliable delivery finish before the participant goes away
    node.destroy_node()
    return 0


def subscribe(count, timeout=30.0):
    """Print each received message as one JSON line; stop after `count` or `timeout` seconds."""
    node = rclpy.create_node('joint_state_test_subscriber')
    received = []

    def on_message(msg):
        received.append(msg)
        print(
            json.dumps(
                {
                    'frame_id': msg.header.frame_id,
                    'stamp': [msg.header.stamp.sec, msg.header.stamp.nanosec],
                    'name': list(msg.name),
                    'position': list(msg.position),
                    'velocity': list(msg.velocity),
                    'effort': list(msg.effort),
                }
            ),
            flush=True,
        )

    node.create_subscription(JointState, '/joint_states', on_message, QOS)
    deadline = time.monotonic() + timeout
    while len(received) < count and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    return 0 if len(received) >= count else 1


if __name__ == '__main__':
    mode, n = sys.argv[1], int(sys.argv[2])
    wait = float(sys.argv[3]) if len(sys.argv) > 3 else 20.0  # s, for a subscriber to match
    rclpy.init()
    try:
        status = publish(n, wait) if mode == 'publish' else subscribe(n)
    finally:
        rclpy.try_shutdown()
    sys.exit(status)
