"""Figures of a demo run (ROS-free): tracking error per segment, falls, loop health, the table."""

import numpy as np

FALL_HEIGHT = 0.3
"""A base below this height (m) after standing up counts as a fall."""

MIN_RATE = 0.95
"""The loop misses its rate when it runs below this fraction of the nominal rate."""

SETTLE = 1.0
"""Seconds at the start of each segment left out of its tracking error (transient)."""


def segment_errors(samples, segments):
    """Tracking error per segment from samples [(t, segment name, cmd (3,), measured (3,))].

    Returns [{segment, seconds, command, mean_measured, rms_error_xy, rms_error_wz}]; errors in
    m/s and rad/s over the segment after its first SETTLE seconds.
    """
    rows = []
    for name in segments:
        chosen = [s for s in samples if s[1] == name]
        if not chosen:
            continue
        start = chosen[0][0]
        settled = [s for s in chosen if s[0] - start >= SETTLE] or chosen
        cmd = np.array([s[2] for s in settled])
        meas = np.array([s[3] for s in settled])
        err = cmd - meas  # (N, 3) m/s, m/s, rad/s
        rows.append(
            {
                'segment': name,
                'seconds': round(chosen[-1][0] - start, 2),
                'command': [round(v, 2) for v in cmd[0].tolist()],
                'mean_measured': [round(v, 3) for v in meas.mean(axis=0).tolist()],
                'rms_error_xy': round(float(np.sqrt(np.mean(np.sum(err[:, :2] ** 2, 1)))), 4),
                'rms_error_wz': round(float(np.sqrt(np.mean(err[:, 2] ** 2))), 4),
            }
        )
    return rows


def falls(heights, mode_history):
    """Count falls: DAMP entries for base tilt, or (if none) the base under FALL_HEIGHT once."""
    count = sum(1 for h in mode_history if h['to'] == 'DAMP' and 'tilt' in h['reason'])
    if count == 0 and len(heights) and min(heights) < FALL_HEIGHT:
        count = 1
    return count


def faults(mode_history, since=float('-inf')):
    """Reasons of the DAMP entries at or after monotonic time `since` (s), estops excluded."""
    return [
        h['reason']
        for h in mode_history
        if h['to'] == 'DAMP' and h['t'] >= since and h['reason'] != 'estop requested'
    ]


def tracks(errors, fraction=0.5):
    """True when every commanded velocity component is met to `fraction` on segment average.

    Only segments with a non-zero command count; None when there is none (nothing was asked).
    """
    moving = [row for row in errors if any(abs(v) > 1e-6 for v in row['command'])]
    if not moving:
        return None
    return all(
        (m * np.sign(c)) >= fraction * abs(c)
        for row in moving
        for c, m in zip(row['command'], row['mean_measured'])
        if abs(c) > 1e-6
    )


def loop_ok(stats, nominal_hz):
    """True when the control loop ran at no less than MIN_RATE of its nominal rate."""
    return stats.get('loop_rate_hz', 0.0) >= MIN_RATE * nominal_hz


def table(rows, headers):
    """Format a list of dicts as a plain fixed-width text table."""
    cells = [[str(row.get(h, '')) for h in headers] for row in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, h in enumerate(headers)]  # fmt: skip
    line = '  '.join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, '  '.join('-' * w for w in widths)]
    out += ['  '.join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    return '\n'.join(out)
