"""Velocity-command schedules (ROS-free): named segments of constant (vx, vy, wz).

Text form (the command_source parameter and the demo): 'name:seconds:vx,vy,wz;...'
e.g. 'stand:4:0,0,0;forward:8:0.6,0,0'. vx, vy in m/s, wz in rad/s, body frame.
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Segment:
    """One constant command held for a duration."""

    name: str
    duration: float
    """Seconds."""
    command: tuple
    """(vx m/s, vy m/s, wz rad/s)."""


DEMO = (
    Segment('stand', 4.0, (0.0, 0.0, 0.0)),
    Segment('forward', 8.0, (0.6, 0.0, 0.0)),
    Segment('turn', 6.0, (0.0, 0.0, 0.6)),
    Segment('sideways', 6.0, (0.0, 0.4, 0.0)),
    Segment('stop', 4.0, (0.0, 0.0, 0.0)),
)
"""The demo's schedule: stand, walk forward, turn, sideways, stop (28 s)."""


def parse(text):
    """Parse 'name:seconds:vx,vy,wz;...' into Segments; raise ValueError naming the bad part."""
    segments = []
    for part in filter(None, (p.strip() for p in text.split(';'))):
        try:
            name, seconds, values = part.split(':')
            command = tuple(float(v) for v in values.split(','))
            duration = float(seconds)
        except ValueError:
            raise ValueError(f'schedule segment {part!r} is not name:seconds:vx,vy,wz') from None
        if len(command) != 3 or not np.all(np.isfinite(command)) or not duration > 0:
            raise ValueError(f'schedule segment {part!r} needs 3 finite numbers and seconds > 0')
        segments.append(Segment(name, duration, command))
    return tuple(segments)


def format_schedule(segments):
    """Return the text form of segments."""
    return ';'.join(
        f'{s.name}:{s.duration:g}:{",".join(f"{v:g}" for v in s.command)}' for s in segments
    )


def total(segments):
    """Total duration (s) of a schedule."""
    return float(sum(s.duration for s in segments))


def at(segments, t):
    """Return (segment, (3,) command) in force t seconds after the start (None past the end)."""
    for segment in segments:
        if t < segment.duration:
            return segment, np.asarray(segment.command, dtype=np.float64)
        t -= segment.duration
    return None, np.zeros(3)
