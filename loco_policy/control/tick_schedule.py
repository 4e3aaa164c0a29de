"""When the control loop ticks: on the joint state that completes a period, or by a timer.

Ticking on the arrival of /joint_states (as a robot's controller synchronised to its state
estimator does) makes the command use a state that is fresh, not up to one state period old. The
schedule keeps the 50 Hz average exactly when the state rate is not a multiple of it: each tick
is due one control period after the previous due time, and the first state arriving within half
a state period of that time triggers it. The due times are a fixed grid one period apart plus
a phase, pulled a fraction of the way towards each triggering state's arrival and bounded by
half a state period, so they settle on the stream's own phase while the grid keeps the average:
a grid locked half a state period off (e.g. to a late first message at start-up) would pick the
earlier or the later state by a fraction of a millisecond of noise, a period 5 ms long or
short. A fallback check (a
timer restarted at every tick) ticks when states stop arriving, so the watchdog still sees them
go stale. The simulated robot's publish grid (its driver clock, the other end of that timing) is
here too. No ROS here.
"""

import math

PHASE_GAIN = 0.2
"""Share of a triggering state's offset from its due time moved into the phase."""


def grid_publish_time(awake, origin, period, lead):
    """When a driver clock woken at `awake` publishes: the grid point origin + k period + lead.

    Its timer fires every period from origin, `lead` before each publish time; k is the grid
    point it was woken for (the last one at or before awake). A late wake-up (after that grid
    point's publish time) publishes at once, so the result is never before awake. Seconds.
    """
    cycles = math.floor((awake - origin) / period)
    return max(awake, origin + cycles * period + lead)


class TickSchedule:
    """Decides on which /joint_states arrivals (or fallback checks) the control loop ticks."""

    def __init__(self, period, fallback_periods=1.25):
        """Tick every period (s); the fallback ticks after fallback_periods without a tick."""
        self.period = float(period)
        self.fallback = float(fallback_periods) * self.period
        self.state_period = None  # s, smoothed interval between /joint_states arrivals
        self.last_state = None  # monotonic s of the last arrival
        self.next_due = None  # monotonic s at which the next tick is due: grid + phase
        self.grid = None  # monotonic s of the next nominal due time (exactly a period apart)
        self.phase = 0.0  # s, where the stream's states arrive against the grid (|.| <= T/2)
        self.last_tick = None  # monotonic s of the last tick

    def on_state(self, now):
        """Record a /joint_states arrival at now (s); return whether to tick on it."""
        if self.last_state is not None:
            interval = min(max(now - self.last_state, 0.0), self.period)
            self.state_period = (
                interval if self.state_period is None else 0.9 * self.state_period + 0.1 * interval
            )
        self.last_state = now
        if self.next_due is None:
            return True
        return now >= self.next_due - 0.5 * (self.state_period or 0.0)

    def on_check(self, now):
        """Fallback (timer) check at now (s): whether to tick because states stopped."""
        return self.last_tick is None or now - self.last_tick >= self.fallback

    def ticked(self, now, state_time=None):
        """Record a tick at now (s); the next one is due a period after this one was due.

        state_time: arrival (s) of the first /joint_states that made the tick due (None: a
        timer or fallback tick); the phase moves PHASE_GAIN of its offset from the due time.
        """
        if self.next_due is None or abs(now - self.next_due) > self.period:
            self.grid, self.phase = now + self.period, 0.0  # first tick, or resync after a gap
        else:
            if state_time is not None:
                half = 0.5 * (self.state_period or 0.0)  # T/2: no drift past the next state
                offset = min(max(state_time - self.next_due, -half), half)
                self.phase = min(max(self.phase + PHASE_GAIN * offset, -half), half)
            self.grid += self.period
        self.next_due = self.grid + self.phase
        self.last_tick = now
