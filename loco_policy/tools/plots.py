"""Figures of the deployment tools, drawn with matplotlib's Agg canvas (no display needed).

matplotlib is imported inside each function: it is in the tools and train requirement groups,
never on the robot's deploy path.
"""

import numpy as np

COMMAND_COLOUR = '#ff7f0e'
"""Line colour of the commanded velocity (matplotlib's tab:orange)."""

MEASURED_COLOUR = '#1f77b4'
"""Line colour of the measured velocity (matplotlib's tab:blue)."""

PANELS = (('vx', 'm/s'), ('vy', 'm/s'), ('wz', 'rad/s'))
"""(name, unit) of each panel, top to bottom: body-frame base velocity components."""


def velocity_figure(path, t, cmd, meas, segments=(), title='', dpi=110):
    """Write commanded vs measured vx, vy, wz against time as a PNG; return path.

    t: (N,) s; cmd, meas: (N, 3) vx, vy (m/s), wz (rad/s); segments: (name, start s) pairs of the
    command schedule, drawn as labelled vertical lines. Raises ValueError on mismatched shapes.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    t = np.asarray(t, dtype=np.float64)
    cmd, meas = np.asarray(cmd, dtype=np.float64), np.asarray(meas, dtype=np.float64)
    if t.ndim != 1 or t.size < 2:
        raise ValueError(f'velocity_figure needs at least 2 sample times, got shape {t.shape}')
    for name, array in (('cmd', cmd), ('meas', meas)):
        if array.shape != (t.size, 3):
            raise ValueError(f'velocity_figure: {name} has shape {array.shape}, not ({t.size}, 3)')
    figure = Figure(figsize=(10, 7.5), layout='constrained')
    FigureCanvasAgg(figure)
    axes = figure.subplots(3, 1, sharex=True)
    begin, end = min([float(t[0])] + [float(s) for _, s in segments]), float(t[-1])
    for axis, (name, unit), column in zip(axes, PANELS, range(3)):
        axis.plot(
            t, cmd[:, column], color=COMMAND_COLOUR, lw=2.0, ds='steps-post', label='commanded'
        )
        axis.plot(t, meas[:, column], color=MEASURED_COLOUR, lw=1.2, label='measured')
        axis.set_ylabel(f'{name} ({unit})')
        axis.grid(alpha=0.3)
        for _, start in segments:
            if begin < start < end:
                axis.axvline(start, color='0.4', ls=':', lw=1.0)
    starts = [float(s) for _, s in segments] + [end]
    for (label, start), stop in zip(segments, starts[1:]):
        if start < end:  # the segment's name, centred over its span, above the top panel
            middle = (start + min(stop, end)) / 2
            axes[0].text(
                middle, 1.02, label, transform=axes[0].get_xaxis_transform(),
                ha='center', va='bottom', fontsize=9, color='0.25',
            )  # fmt: skip
    axes[-1].set_xlabel('time (s)')
    axes[-1].set_xlim(begin, end)
    axes[0].legend(loc='upper left', bbox_to_anchor=(1.0, 1.0), frameon=False)
    if title:
        figure.suptitle(title)
    figure.savefig(path, dpi=dpi)
    return path
