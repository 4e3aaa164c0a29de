"""The deployment benchmark's timing baseline: a 50 Hz sleep loop with no ROS and no policy.

    python -m loco_policy.tools.sleep_loop [--seconds 20] [--rate 50] [--rt-priority 50]

Sleeps to absolute deadlines one period apart and prints one JSON line with the period jitter
p50/p99/max (ms) of its wake-ups, as policy_node's run summary defines it (control/loop_stats):
the floor this machine gives a Python process that does nothing but wake up on time. Where that
floor is above the loop's jitter goal, no control loop on the machine can meet the goal.
--rt-priority runs it under SCHED_FIFO, as policy_node's realtime_priority does.
"""

import argparse
import json
import sys
import time

from loco_policy.control.loop_stats import LoopStats
from loco_policy.control.realtime import set_realtime_priority


def sleep_loop(seconds: float, rate: float) -> LoopStats:
    """Wake up every 1/rate s (absolute deadlines) for `seconds`; the ticks' statistics."""
    period = 1.0 / rate
    stats = LoopStats(period)
    deadline = time.monotonic() + period
    for _ in range(max(1, round(seconds * rate))):
        pause = deadline - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        stats.tick(time.monotonic())
        deadline += period
    return stats


def main(argv=None):
    """Run the loop, print the JSON line; exit status 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=20.0)
    parser.add_argument('--rate', type=float, default=50.0, help='Hz')
    parser.add_argument('--rt-priority', type=int, default=0, help='SCHED_FIFO 1-99 (0: off)')
    args = parser.parse_args(argv)
    scheduling = set_realtime_priority(args.rt_priority)
    print(scheduling, file=sys.stderr)
    applied = args.rt_priority if scheduling.startswith('SCHED_FIFO priority') else 0
    summary = sleep_loop(args.seconds, args.rate).summary(recent=False)
    jitter = {k: round(summary[f'jitter_{k}_ms'], 4) for k in ('p50', 'p99', 'max')}
    print(json.dumps({'ticks': summary['ticks'], 'jitter_ms': jitter,
                      'realtime_priority': applied}))  # fmt: skip
    return 0


if __name__ == '__main__':
    sys.exit(main())
