"""Spin a node that sleeps between ticks but is awake and warm when the next one is due.

An idle CPU loses its caches (and on a VM its physical core) while the loop sleeps, so the first
inference after a 20 ms sleep costs several times a warm one. From `lead` before the expected
tick this loop calls node.warm() once (a throw-away inference; it returns whether it ran, only
in WALK) and then, if it ran, polls the executor without blocking until the tick has run or
`lead` after the expected time, when it goes back to blocking waits (the tick still runs when
its inputs arrive). Cost: up to 2 lead / period of one CPU, in WALK only.
With `busy` false (a SCHED_FIFO loop, whose middleware threads keep normal scheduling and may
share its core: a non-blocking poll would starve them of the very messages it waits for) the
warm-up still runs, and the loop then waits blocking.
The node provides next_tick_expected() (monotonic s or None) and warm() -> bool.
"""

import time

import rclpy

IDLE_WAIT = 0.005
"""Longest blocking wait (s) outside the window, so a new expectation is seen in time."""

BLOCKING_WAIT = 0.1
"""Longest blocking wait (s) without warm-ups: only bounds how late a shutdown is seen."""


def spin_warm(node, lead, busy=True, executor=None):
    """Spin `node` until shutdown, warmed from lead (s) before each expected tick.

    lead <= 0: plain spin. busy: poll without blocking after a warm-up (see above). executor:
    the one to spin (e.g. rclpy's EventsExecutor); None is rclpy's global executor.
    """
    # rclpy's global executor, as rclpy.spin uses: the context's shutdown (Ctrl-C, SIGTERM)
    # shuts it down. A private SingleThreadedExecutor shut down here, or left to the garbage
    # collector with its wait generator, crashed the process at exit (SIGSEGV) in about 1 run
    # in 15; an EventsExecutor is woken by the context's shutdown itself.
    executor = executor or rclpy.get_global_executor()
    executor.add_node(node)
    if lead <= 0:  # spin_once in a loop: EventsExecutor.spin() left services unanswered
        try:
            while executor.context.ok():
                executor.spin_once(timeout_sec=BLOCKING_WAIT)
        finally:
            executor.remove_node(node)
        return
    warmed_for, polling = None, False  # the expected tick time warmed for; whether it ran
    try:
        while executor.context.ok():
            expected = node.next_tick_expected()
            now = time.monotonic()
            if expected is None or now > expected + lead:  # no schedule, or the tick is late
                executor.spin_once(timeout_sec=IDLE_WAIT)
                continue
            if now < expected - lead:
                executor.spin_once(timeout_sec=min(expected - lead - now, IDLE_WAIT))
                continue
            if warmed_for is None or abs(expected - warmed_for) > lead:  # once per tick
                warmed_for = expected
                polling = bool(node.warm()) and busy
            executor.spin_once(timeout_sec=0.0 if polling else expected + lead - now)
    finally:
        executor.remove_node(node)
