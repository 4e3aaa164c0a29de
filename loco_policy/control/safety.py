"""Safety state machine and input watchdog of the policy node (ROS-free).

Modes: PASSIVE (damping only) -> STAND (interpolate to the default pose) -> WALK (policy) and
back; DAMP on any fault or estop, latched until reset. Requests (the node's services) are:

    start : PASSIVE -> STAND; STAND (pose reached, policy loaded) -> WALK (a second start)
    stop  : WALK -> STAND; STAND -> PASSIVE
    estop : any -> DAMP (latched)
    reset : DAMP -> PASSIVE (only when the inputs are fresh again)
"""

from dataclasses import dataclass, field
import enum
import math


class Mode(str, enum.Enum):
    """Control modes of the safety state machine."""

    PASSIVE = 'PASSIVE'
    STAND = 'STAND'
    WALK = 'WALK'
    DAMP = 'DAMP'


@dataclass
class Transition:
    """One change of mode, for logs and the demo summary."""

    time: float
    """Monotonic time (s)."""
    source: Mode
    target: Mode
    reason: str


class SafetyStateMachine:
    """The mode, its allowed transitions, and the latched fault."""

    def __init__(self):
        """Start in PASSIVE with no fault."""
        self.mode = Mode.PASSIVE
        self.fault = ''
        """Reason of the latched fault ('' when none)."""
        self.history = []
        """Every Transition so far."""
        self.entered = 0.0
        """Monotonic time (s) the current mode was entered."""

    def _go(self, target, now, reason):
        """Switch to target and record why."""
        self.history.append(Transition(now, self.mode, target, reason))
        self.mode, self.entered = target, now

    def start(self, now, stand_done, policy_ready, inputs_ok, why_not_policy=''):
        """Handle a start request; return (accepted, message)."""
        if self.mode is Mode.DAMP:
            return False, f'latched in DAMP ({self.fault}); call reset first'
        if not inputs_ok:
            return False, 'refused: robot inputs are missing or stale'
        if self.mode is Mode.PASSIVE:
            self._go(Mode.STAND, now, 'start')
            if not policy_ready:
                why = why_not_policy or 'no policy loaded'
                return True, f'STAND: standing up to the default pose; WALK unavailable: {why}'
            return True, 'STAND: standing up to the default pose; call start again to walk'
        if self.mode is Mode.STAND:
            if not policy_ready:
                return False, f'WALK refused: {why_not_policy or "no policy loaded"}'
            if not stand_done:
                return False, 'WALK refused: the default pose is not reached yet'
            self._go(Mode.WALK, now, 'start')
            return True, 'WALK: policy in control'
        return False, 'already in WALK'

    def hint(self, policy_ready, why_not_policy=''):
        """What the operator can ask for next in the current mode, in words (the status 'hint')."""
        if self.mode is Mode.PASSIVE:
            return 'call start to stand'
        if self.mode is Mode.STAND:
            if not policy_ready:
                why = why_not_policy or 'no policy loaded'
                return f'WALK unavailable: {why}; call stop for PASSIVE'
            return 'call start to walk (accepted once stand_progress is 1)'
        if self.mode is Mode.WALK:
            return 'call stop to stand'
        return 'call reset'

    def stop(self, now):
        """Handle a stop request: WALK -> STAND, STAND -> PASSIVE; return (accepted, message)."""
        if self.mode is Mode.WALK:
            self._go(Mode.STAND, now, 'stop')
            return True, 'STAND: policy stopped, holding the default pose'
        if self.mode is Mode.STAND:
            self._go(Mode.PASSIVE, now, 'stop')
            return True, 'PASSIVE: damping only'
        return False, f'nothing to stop in {self.mode.value}'

    def trip(self, now, reason):
        """Enter DAMP and latch the reason (a fault or an estop); no-op when already in DAMP."""
        if self.mode is Mode.DAMP:
            return False
        self.fault = reason
        self._go(Mode.DAMP, now, reason)
        return True

    def reset(self, now, inputs_ok):
        """Leave DAMP for PASSIVE when inputs are fresh; return (accepted, message)."""
        if self.mode is not Mode.DAMP:
            return False, f'nothing to reset in {self.mode.value}'
        if not inputs_ok:
            return False, f'reset refused: inputs still faulty ({self.fault})'
        self.fault = ''
        self._go(Mode.PASSIVE, now, 'reset')
        return True, 'PASSIVE: fault cleared'


@dataclass
class Watchdog:
    """Ages of the robot inputs; stale when older than the limit, after each arrived once."""

    limit: float
    """Largest allowed input age (s), by default 3 control periods."""
    names: tuple = ('/joint_states', '/imu', '/odom')
    """The watched inputs."""
    last: dict = field(default_factory=dict)
    """Monotonic time (s) each input's age counts from: its last valid message's arrival, moved
    later by the node's own stalls (awake)."""
    arrived: dict = field(default_factory=dict)
    """Monotonic receive time (s) of each input's last valid message."""
    stamps: dict = field(default_factory=dict)
    """Header stamp (s) of each input's last stamped message, valid or not."""
    idle: float = float('inf')
    """Longest silence (s) between the node's callbacks while it runs (its timer's period plus
    jitter); a longer one is the node's own stall. inf: stalls are not looked for."""
    max_credit: float = 0.2
    """Most (s) of one stall taken out of the inputs' ages; a longer absence of the controller
    is not forgiven: the inputs go stale as before."""
    awake_at: float = None
    """Monotonic time (s) of the node's last callback (None before the first)."""
    stall_end: float = None
    """Monotonic time (s) the last credited stall ended (None: none yet)."""
    stalls: int = 0
    """Stalls of the node itself seen so far."""
    longest_stall: float = 0.0
    """Longest silence (s) beyond `idle` seen so far."""
    credited_at: dict = field(default_factory=dict)
    """Monotonic time (s) of each input's last credit."""

    def feed(self, name, now):
        """Record a valid message of one input that arrived at monotonic time now (s).

        Never moves the input's age back: a message read at a tick may have arrived before a
        stall that awake() has already taken out of the input's age.
        """
        self.arrived[name] = now
        self.last[name] = max(now, self.last.get(name, now))

    def awake(self, now):
        """The node runs a callback at monotonic now (s); the stall (s) that ended, else 0.

        The watchdog asks whether the robot stopped sending while the node was there to hear it.
        After the node's own stall (descheduled, stopped, busy) the inputs that came meanwhile
        wait in its queue, and a tick run before their callbacks would read them as stale: a
        walking robot damped because its controller stalled, not because a sensor went quiet.
        So the silence beyond `idle`, up to `max_credit`, is taken out of each input's age;
        an input that has not arrived since its last credit gets none, so repeated stalls do
        not hide a sensor that went quiet.
        """
        stall = 0.0 if self.awake_at is None else now - self.awake_at - self.idle
        self.awake_at = now
        if stall <= 0.0:
            return 0.0
        self.stalls += 1
        self.longest_stall = max(self.longest_stall, stall)
        self.stall_end = now
        credit = min(stall, self.max_credit)
        for name in self.last:
            credited = self.credited_at.get(name)
            if credited is None or self.arrived.get(name, -math.inf) > credited:
                self.last[name] += credit
                self.credited_at[name] = now
        return stall

    def behind_stall(self):
        """True while an input has not arrived since the last stall ended.

        What a tick would read then predates the stall; the messages queued meanwhile come next.
        """
        if self.stall_end is None:
            return False
        return any(self.arrived.get(n, -math.inf) < self.stall_end for n in self.names)

    def stamp_error(self, name, stamp):
        """'' when a message's header stamp (s; 0 unstamped) is newer than the input's last one.

        A driver that hangs while something re-sends its last sample arrives on time with a
        stamp that does not advance: such a message is not fresh, so it must not feed the
        watchdog. The stamp is not compared with this
        computer's clock (the robot's may be another's); a backwards clock step costs one
        message. An unstamped message is watched by its arrival alone.
        """
        if stamp == 0.0:  # unstamped: neither judged nor the reference for the next one
            return ''
        last, self.stamps[name] = self.stamps.get(name), stamp
        if last is None or stamp > last:
            return ''
        return (
            f'{name} rejected: header stamp {stamp:.6f} s is not newer than the last '
            f'({last:.6f} s)'
        )

    def ages(self, now):
        """Age (s) of each input, inf when never received."""
        return {n: now - self.last[n] if n in self.last else float('inf') for n in self.names}

    @property
    def armed(self):
        """True once every input has arrived at least once."""
        return all(n in self.last for n in self.names)

    def stale(self, now):
        """Names of inputs older than the limit (never-received ones included)."""
        return [n for n, age in self.ages(now).items() if age > self.limit]

    def fault(self, now):
        """A fault reason when armed and an input is stale, else ''."""
        if not self.armed:
            return ''
        ages = self.ages(now)
        stale = [f'{n} {ages[n] * 1e3:.0f} ms' for n in self.stale(now)]
        if stale:
            return f'watchdog: stale {", ".join(stale)} (limit {self.limit * 1e3:.0f} ms)'
        return ''
