"""The demo's velocity figure: a real PNG drawn by matplotlib from a synthetic run."""

import struct

import numpy as np
import pytest

from loco_policy.tools import command_schedule, plots


def _run(seed=0):
    """Synthetic 20 Hz samples of the demo schedule: t (N,) s, cmd and a noisy lagging meas."""
    t = np.arange(0.0, command_schedule.total(command_schedule.DEMO), 0.05)
    cmd = np.array([command_schedule.at(command_schedule.DEMO, x)[1] for x in t])
    lagged = np.vstack([cmd[:5], cmd[:-5]])  # 0.25 s behind the command
    meas = lagged + 0.03 * np.random.default_rng(seed).standard_normal(cmd.shape)
    starts = np.cumsum([0.0] + [s.duration for s in command_schedule.DEMO[:-1]])
    return t, cmd, meas, [(s.name, start) for s, start in zip(command_schedule.DEMO, starts)]


def _pixels_near(image, colour, tolerance=0.08):
    """Count the pixels of an (H, W, >=3) float image within tolerance of a '#rrggbb' colour."""
    rgb = np.array([int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return int(np.sum(np.all(np.abs(image[..., :3] - rgb) < tolerance, axis=-1)))


def test_velocity_figure_writes_a_png_with_both_traces(tmp_path):
    from matplotlib.image import imread

    t, cmd, meas, segments = _run()
    path = tmp_path / 'velocity.png'
    assert plots.velocity_figure(path, t, cmd, meas, segments, 'synthetic', dpi=100) == path
    blob = path.read_bytes()
    assert blob[:8] == b'\x89PNG\r\n\x1a\n' and blob[12:16] == b'IHDR'
    width, height = struct.unpack('>II', blob[16:24])
    assert (width, height) == (1000, 750)  # figsize (10, 7.5) in at 100 dpi
    image = imread(path)
    assert image.shape[:2] == (750, 1000)
    # both series are drawn, over a good part of the figure, and not only in one colour
    assert _pixels_near(image, plots.COMMAND_COLOUR) > 1000
    assert _pixels_near(image, plots.MEASURED_COLOUR) > 5000
    assert len(np.unique(image[..., :3].reshape(-1, 3), axis=0)) > 50
    white = np.all(image[..., :3] > 0.98, axis=-1).mean()
    assert 0.5 < white < 0.97  # a white background, with axes, text and lines on it


def test_the_drawing_follows_the_data(tmp_path):
    from matplotlib.image import imread

    t, cmd, meas, segments = _run()
    plots.velocity_figure(tmp_path / 'a.png', t, cmd, meas, segments)
    plots.velocity_figure(tmp_path / 'b.png', t, cmd, -meas, segments)
    a, b = imread(tmp_path / 'a.png'), imread(tmp_path / 'b.png')
    assert a.shape == b.shape
    assert np.mean(np.any(a != b, axis=-1)) > 0.01  # other data, another picture


def test_bad_shapes_are_refused(tmp_path):
    t, cmd, meas, segments = _run()
    with pytest.raises(ValueError, match='meas has shape'):
        plots.velocity_figure(tmp_path / 'x.png', t, cmd, meas[:, :2], segments)
    with pytest.raises(ValueError, match='at least 2 sample times'):
        plots.velocity_figure(tmp_path / 'x.png', t[:1], cmd[:1], meas[:1], segments)
    assert not (tmp_path / 'x.png').exists()
