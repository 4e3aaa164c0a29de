"""Excitation schedules for actuator identification (ROS-free): chirps, step trains, slow ramps.

Each joint's target moves around the default pose, q*(t) = q_default + a_j s_j(t), with the
velocity target qd*(t) its time derivative (so that the drive's kd is told apart from the
joint's viscous damping). The amplitude a_j (rad) is the configured one, cut so that q* stays
``margin`` inside the joint range and the PD torque stays within ``torque_fraction`` of the limit
even when the joint lags a full swing behind: kp 2 a + kd 2 a w_max <= fraction * limit.

Kinds: 'chirp' (logarithmic sweep f_start -> f_end, sign alternating over joints), 'steps'
(levels drawn per joint in [-1, 1], held step_period s), 'ramps' (triangle wave of ramp_period s,
constant velocity segments for Coulomb friction), 'mixed' (chirp for half the duration, then
steps and ramps a quarter each). Before 0 and after ``duration`` the targets rest at the default
pose with zero velocity (a lead-in recorded before the schedule gives the fit the command history).
"""

from dataclasses import dataclass

import numpy as np

from loco_policy import spec

KINDS = ('chirp', 'steps', 'ramps', 'mixed')


@dataclass(frozen=True)
class ExcitationConfig:
    """What to excite and how hard."""

    duration: float = 20.0
    """Length (s) of the excitation."""
    kind: str = 'mixed'
    """One of KINDS."""
    amplitude: float = 0.15
    """Largest target offset (rad) from the default pose, before the limits cut it."""
    f_start: float = 0.1
    """Chirp start frequency (Hz)."""
    f_end: float = 10.0
    """Chirp end frequency (Hz)."""
    step_period: float = 0.4
    """Hold time (s) of one step level."""
    ramp_period: float = 4.0
    """Period (s) of the triangle wave."""
    margin: float = 0.1
    """Distance (rad) kept from the joint range."""
    torque_fraction: float = 0.7
    """Share of the torque limit the PD may use (the rest holds gravity)."""
    seed: int = 0
    """Seed of the step levels."""

    def check(self):
        """Raise ValueError naming a setting that is out of range."""
        if self.kind not in KINDS:
            raise ValueError(f'excitation kind {self.kind!r}: choose one of {", ".join(KINDS)}')
        positive = ('duration', 'amplitude', 'f_start', 'f_end', 'step_period', 'ramp_period')
        for name in positive:
            value = getattr(self, name)
            if not np.isfinite(value) or value <= 0:
                raise ValueError(f'excitation {name} must be > 0, got {value}')
        if self.f_end <= self.f_start:
            raise ValueError(f'excitation f_end {self.f_end} Hz must exceed f_start')
        if not 0 < self.torque_fraction <= 1 or self.margin < 0:
            raise ValueError('excitation torque_fraction must be in (0, 1], margin >= 0')


class Excitation:
    """Targets q*, qd* (12,) at any time for one configuration and the commanded gains."""

    def __init__(self, config, kp=spec.KP, kd=spec.KD, torque_limit=spec.TORQUE_LIMIT,
                 limits=spec.JOINT_POS_LIMITS):  # fmt: skip
        """Plan amplitudes for gains kp, kd (12,), torque limits (12,), joint limits (12, 2)."""
        config.check()
        self.config = config
        self.kp, self.kd = np.asarray(kp, float), np.asarray(kd, float)
        self.torque_limit = np.asarray(torque_limit, float)
        limits = np.asarray(limits, float)
        center = spec.DEFAULT_JOINT_POS
        reach = np.minimum(limits[:, 1] - center, center - limits[:, 0]) - config.margin
        if np.any(reach <= 0):
            raise ValueError('excitation: the default pose is within the margin of a joint limit')
        w_max = 2 * np.pi * config.f_end  # rad/s
        if config.kind in ('steps', 'ramps'):
            w_max = 0.0 if config.kind == 'steps' else 4.0 / config.ramp_period
        torque_bound = (
            config.torque_fraction
            * self.torque_limit
            / (2 * self.kp + 2 * self.kd * w_max + 1e-12)
        )
        self.amplitude = np.minimum(np.minimum(config.amplitude, reach), torque_bound)
        """(12,) rad, the amplitude each joint gets."""
        self.sign = np.where(np.arange(spec.NUM_JOINTS) % 2 == 0, 1.0, -1.0)
        rng = np.random.default_rng(config.seed)
        count = int(np.ceil(config.duration / config.step_period)) + 1
        self.levels = rng.uniform(-1.0, 1.0, size=(count, spec.NUM_JOINTS))
        self.levels[0] = 0.0  # start at the default pose

    def segments(self):
        """[(kind, start s, end s)] of the schedule."""
        c = self.config
        if c.kind != 'mixed':
            return [(c.kind, 0.0, c.duration)]
        half, quarter = 0.5 * c.duration, 0.25 * c.duration
        return [('chirp', 0.0, half), ('steps', half, half + quarter),
                ('ramps', half + quarter, c.duration)]  # fmt: skip

    def _shape(self, kind, tau, length):
        """Unit shapes s (n, 12) and ds/dt (n, 12) at times tau (n,) into a segment of length s."""
        c = self.config
        n = tau.shape[0]
        if kind == 'chirp':
            rate = np.log(c.f_end / c.f_start) / length  # 1/s
            growth = np.exp(rate * tau)
            phase = 2 * np.pi * c.f_start * (growth - 1.0) / rate
            omega = 2 * np.pi * c.f_start * growth
            s, ds = np.sin(phase), np.cos(phase) * omega
            return np.outer(s, self.sign), np.outer(ds, self.sign)
        if kind == 'steps':
            index = np.minimum((tau / c.step_period).astype(int), len(self.levels) - 1)
            return self.levels[index], np.zeros((n, spec.NUM_JOINTS))
        # ramps: triangle 0 -> 1 -> -1 -> 0 over each period, sign alternating over joints
        u = (tau / c.ramp_period) % 1.0
        s = np.where(u < 0.25, 4 * u, np.where(u < 0.75, 2 - 4 * u, 4 * u - 4))
        ds = np.where((u >= 0.25) & (u < 0.75), -4.0, 4.0) / c.ramp_period
        return np.outer(s, self.sign), np.outer(ds, self.sign)

    def targets(self, t):
        """q* (n, 12) rad and qd* (n, 12) rad/s at times t (n,) s from the start (scalar: 12)."""
        scalar = np.ndim(t) == 0
        t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        s = np.zeros((t.shape[0], spec.NUM_JOINTS))
        ds = np.zeros_like(s)
        for kind, start, end in self.segments():
            inside = (t >= start) & (t < end)
            if np.any(inside):
                s[inside], ds[inside] = self._shape(kind, t[inside] - start, end - start)
        q = spec.DEFAULT_JOINT_POS + self.amplitude * s
        qd = self.amplitude * ds
        return (q[0], qd[0]) if scalar else (q, qd)

    def command(self, t, mode='IDENTIFY'):
        """The JointCommand at time t (s): targets, zero feed-forward, the planned gains."""
        from loco_policy.control.joint_command import JointCommand

        q, qd = self.targets(float(t))
        return JointCommand(q, qd, np.zeros(spec.NUM_JOINTS), self.kp.copy(), self.kd.copy(),
                            self.torque_limit.copy(), mode)  # fmt: skip
