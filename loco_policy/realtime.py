"""Real-time scheduling of the control process (ROS-free, Linux)."""

import os


def set_realtime_priority(priority):
    """Put the calling thread under SCHED_FIFO at priority (1-99); return what happened.

    The calling thread is the node's main thread, where rclpy's executor runs every callback;
    middleware threads created before the call keep normal scheduling.

    Needs root or CAP_SYS_NICE (on a robot PC: an rtprio limit in /etc/security/limits.conf).
    Priority 0 leaves normal scheduling.
    """
    if priority <= 0:
        return 'normal scheduling (realtime_priority 0)'
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(priority)))
    except (OSError, AttributeError) as error:
        return f'SCHED_FIFO {priority} refused ({error}); normal scheduling'
    return f'SCHED_FIFO priority {priority}'
