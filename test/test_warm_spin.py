"""warm_spin: one warm-up per expected tick, inside the window, with real rclpy timers."""

import os
import threading
import time

import pytest

from loco_policy.nodes.warm_spin import spin_warm
from test.helpers.deploy_fixtures import isolated_ros_env

pytestmark = pytest.mark.ros

PERIOD, LEAD = 0.02, 0.002  # s


@pytest.mark.parametrize('busy', [True, False])
def test_warms_once_per_expected_tick_inside_the_window(request, busy):
    import rclpy
    from rclpy.node import Node

    class Ticker(Node):
        """Ticks every PERIOD from a 1 ms timer; records warm-ups against the expectation."""

        def __init__(self):
            super().__init__('ticker')
            self.first = time.monotonic() + 0.05
            self.ticks, self.warms = [], []  # monotonic s; (s, expected s)
            self.create_timer(0.001, self.check)

        def next_tick_expected(self):
            return self.first + len(self.ticks) * PERIOD

        def check(self):
            if time.monotonic() >= self.next_tick_expected():
                self.ticks.append(time.monotonic())

        def warm(self):
            self.warms.append((time.monotonic(), self.next_tick_expected()))
            return True

    env = isolated_ros_env(request.node.name)
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = env['ROS_AUTOMATIC_DISCOVERY_RANGE']
    rclpy.init(domain_id=int(env['ROS_DOMAIN_ID']))  # the default context: spin_warm uses
    node = Ticker()  # rclpy's global executor, as rclpy.spin does
    errors = []

    def spin():
        try:
            spin_warm(node, LEAD, busy=busy)
        except rclpy.executors.ExternalShutdownException:
            pass
        except Exception as error:  # surfaced by the assertion below
            errors.append(error)

    thread = threading.Thread(target=spin)
    thread.start()
    time.sleep(0.5)
    rclpy.shutdown()
    thread.join(5.0)
    node.destroy_node()
    assert not thread.is_alive() and not errors, errors
    expected = [e for _, e in node.warms]
    assert len(node.ticks) >= 10 and len(node.warms) >= 5, (len(node.ticks), len(node.warms))
    assert len(set(expected)) == len(expected)  # at most one warm-up per expected tick
    for at, due in node.warms:  # never before the window; late only by Python's own delay
        assert due - LEAD <= at <= due + LEAD + 0.002, at - due
