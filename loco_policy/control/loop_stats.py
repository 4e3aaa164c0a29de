"""Control-loop timing statistics (ROS-free): period jitter, inference time, latency, CPU."""

from collections import deque
import os
import resource
import time

import numpy as np


def percentiles(values, qs=(50, 99)):
    """Return {'p50': ..., 'p99': ..., 'max': ...} of a sequence (NaN-free; zeros when empty)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return {**{f'p{q}': 0.0 for q in qs}, 'max': 0.0}
    out = {f'p{q}': float(np.percentile(values, q)) for q in qs}
    out['max'] = float(values.max())
    return out


class LoopStats:
    """Per-tick timing samples: a recent window for diagnostics, the run's for its summary."""

    def __init__(self, period, window=500, max_total=200_000):
        """Expect ticks every period (s); keep `window` recent samples per series.

        Of the run's samples at most max_total are kept: past that, every other one is dropped,
        an even subsample of the whole run, so a day on the robot costs megabytes, not gigabytes.
        """
        self.period = period
        self.window = window
        self.max_total = int(max_total)
        self.series = {}
        """name -> deque of recent samples (s)."""
        self.totals = {}
        """name -> list of the run's samples (s), every `stride[name]`-th one once thinned."""
        self.stride = {}
        self.last_tick = None
        self.ticks = 0
        self.start_wall = time.monotonic()
        self.start_cpu = self._cpu()

    @staticmethod
    def _cpu():
        """Process CPU time (s), user + system."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def restart_totals(self):
        """Drop the run's samples so far (e.g. start-up) and restart CPU and rate accounting."""
        self.totals = {name: [] for name in self.totals}
        self.stride = {name: [1, 0] for name in self.totals}
        self.ticks = 0
        self.start_wall, self.start_cpu = time.monotonic(), self._cpu()

    def add(self, name, value):
        """Record one sample (s) of a series."""
        if name not in self.series:
            self.series[name] = deque(maxlen=self.window)
            self.totals[name] = []
            self.stride[name] = [1, 0]  # keep every stride-th sample; samples since the last
        self.series[name].append(value)
        stride = self.stride[name]
        stride[1] += 1
        if stride[1] < stride[0]:
            return
        stride[1] = 0
        total = self.totals[name]
        total.append(value)
        if len(total) >= self.max_total:  # thin to every other sample, keep half as many
            del total[1::2]
            stride[0] *= 2

    def tick(self, now):
        """Record a tick at monotonic time now (s): its period and |period - nominal| jitter."""
        if self.last_tick is not None:
            period = now - self.last_tick
            self.add('period', period)
            self.add('jitter', abs(period - self.period))
        self.last_tick = now
        self.ticks += 1

    def rate(self, recent=True):
        """Mean loop rate (Hz) over the window (recent) or the whole run."""
        periods = self.series.get('period', ()) if recent else self.totals.get('period', ())
        return float(1.0 / np.mean(periods)) if len(periods) else 0.0

    def cpu_percent(self):
        """Process CPU use (% of one core) since the stats started."""
        wall = time.monotonic() - self.start_wall
        return 100.0 * (self._cpu() - self.start_cpu) / wall if wall > 0 else 0.0

    def summary(self, recent=True):
        """Return a flat dict of figures in ms (and Hz, %) for diagnostics or the run summary."""
        source = self.series if recent else self.totals
        out = {'ticks': self.ticks, 'loop_rate_hz': self.rate(recent)}
        for name, values in source.items():
            if name == 'period':
                continue
            for key, value in percentiles(values).items():
                out[f'{name}_{key}_ms'] = value * 1e3
        out['cpu_percent'] = self.cpu_percent()
        out['pid'] = os.getpid()
        return out
