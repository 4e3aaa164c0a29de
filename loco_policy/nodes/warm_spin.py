"""Spin a node that sleeps between ticks but is awake and warm when the next one is due.

An idle CPU loses its caches (and on a VM its physical core) while the loop sleeps, so the first
inference after a 20 ms sleep costs several times a warm one. From `lead` before the expected
tick this loop calls node.warm() once (a throw-away inference) and then polls the executor
without blocking until the tick has run, or gives up `lead` after it was expected (the node's
fallback timer then ticks as usual). Cost: about lead / period of one CPU.
The node provides next_tick_expected() (monotonic s or None) and warm().
"""

import time

import rclpy
from rclpy.executors import SingleThreadedExecutor

IDLE_WAIT = 0.005
"""Longest blocking wait (s) outside the window, so a new expectation is seen in time."""


def spin_warm(node, lead):
    """Spin `node` until shutdown, awake and warmed from lead (s) before each expected tick.

    lead <= 0: plain rclpy.spin.
    """
    if lead <= 0:
        rclpy.spin(node)
        return
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    warmed_for = None  # the expected tick time already warmed for
    try:
        while rclpy.ok(context=node.context):
            expected = node.next_tick_expected()
            now = time.monotonic()
            if expected is None or now > expected + lead:  # no schedule, or the tick is late
                executor.spin_once(timeout_sec=IDLE_WAIT)
            elif now < expected - lead:
                executor.spin_once(timeout_sec=min(expected - lead - now, IDLE_WAIT))
            else:
                if warmed_for is None or abs(expected - warmed_for) > lead:  # once per tick
                    warmed_for = expected
                    node.warm()
                executor.spin_once(timeout_sec=0.0)
    finally:
        executor.remove_node(node)
        executor.shutdown()
