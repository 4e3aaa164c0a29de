"""Real-time scheduling and CPU placement of a control process (ROS-free, Linux)."""

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


def parse_cpus(text):
    """'1', '0,2' or '2-3' -> sorted list of CPU ids; '' -> [] (no pinning); ValueError if bad."""
    cpus = set()
    for part in filter(None, (p.strip() for p in str(text).split(','))):
        low, dash, high = part.partition('-')
        high = high if dash else low
        if not (low.isdigit() and high.isdigit() and int(low) <= int(high)):
            raise ValueError(f'cpu_affinity {text!r}: expected ids like "1", "0,2" or "2-3"')
        cpus.update(range(int(low), int(high) + 1))
    return sorted(cpus)


def set_cpu_affinity(text):
    """Pin every thread of this process (executor and middleware) to the CPUs in text.

    On a robot PC the control process gets cores of its own (isolcpus or cpusets) so that no other
    process evicts its caches between ticks. '' leaves the placement alone. Returns what happened;
    ValueError for a malformed list or CPUs this process may not use.
    """
    cpus = parse_cpus(text)
    if not cpus:
        return 'CPU affinity unchanged'
    available = os.sched_getaffinity(0)
    if not set(cpus) <= available:
        raise ValueError(f'cpu_affinity {cpus} is not within the allowed CPUs {sorted(available)}')
    for tid in (int(t) for t in os.listdir('/proc/self/task')):
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:  # a thread that ended meanwhile
            pass
    return f'pinned to CPUs {cpus}'


DMA_LATENCY_PATH = '/dev/cpu_dma_latency'
"""The kernel's PM QoS interface for CPU wake-up latency."""

_DMA_LATENCY_FD = None  # held open: the kernel honours the request while the file is open


def hold_cpu_dma_latency(microseconds, path=DMA_LATENCY_PATH):
    """Ask the kernel to keep every CPU's wake-up latency under microseconds (PM QoS).

    Writing to /dev/cpu_dma_latency and keeping it open keeps idle CPUs out of deep sleep states
    (cyclictest does the same), which removes most of the wake-up delay of a sleeping control
    loop at the cost of idle power. Needs root. A negative value leaves the setting alone; more
    than 2^31 - 1 is a ValueError. Returns what happened.
    """
    global _DMA_LATENCY_FD
    if microseconds < 0:
        return 'CPU wake-up latency unchanged'
    if microseconds > 2**31 - 1:
        raise ValueError(f'cpu_dma_latency {microseconds} us is above 2^31 - 1')
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as error:
        return f'cpu_dma_latency {microseconds} us refused ({error}); unchanged'
    try:
        os.write(fd, int(microseconds).to_bytes(4, 'little', signed=True))
    except OSError as error:
        os.close(fd)
        return f'cpu_dma_latency {microseconds} us refused ({error}); unchanged'
    release_cpu_dma_latency()
    _DMA_LATENCY_FD = fd
    return f'CPU wake-up latency held under {int(microseconds)} us'


def release_cpu_dma_latency():
    """Drop a request made by hold_cpu_dma_latency (closing the file ends it)."""
    global _DMA_LATENCY_FD
    if _DMA_LATENCY_FD is not None:
        os.close(_DMA_LATENCY_FD)
        _DMA_LATENCY_FD = None
