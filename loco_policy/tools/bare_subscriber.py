"""The deployment benchmark's CPU baseline: a node that only takes the robot's state topics.

    python -m loco_policy.tools.bare_subscriber [--executor single_threaded|events]

Subscribes /joint_states, /imu and /odom with policy_node's QoS and keeps the newest message of
each, nothing else: what any rclpy node pays for the robot's 200 Hz state stream, with rclpy's
default executor or its EventsExecutor. Runs until SIGINT/SIGTERM.
"""

import argparse
import sys


def main(argv=None):
    """Spin the bare subscriber until shutdown; exit status 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--executor', choices=('single_threaded', 'events'), default='events')
    args = parser.parse_args(argv)
    from nav_msgs.msg import Odometry
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Imu, JointState

    rclpy.init()
    node = rclpy.create_node('bare_subscriber')
    newest = {}
    for msg_type, topic in ((JointState, '/joint_states'), (Imu, '/imu'), (Odometry, '/odom')):
        node.create_subscription(
            msg_type, topic, lambda msg, t=topic: newest.__setitem__(t, msg),
            qos_profile_sensor_data,
        )  # fmt: skip
    if args.executor == 'events':
        from rclpy.experimental import EventsExecutor

        executor = EventsExecutor(context=node.context)
    else:
        executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    try:
        while node.context.ok():
            executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        executor.remove_node(node)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
