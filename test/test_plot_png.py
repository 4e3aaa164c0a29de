import struct
import zlib

import numpy as np

from loco_policy.tools import plot_png


def test_writes_a_valid_png_with_the_series_drawn(tmp_path):
    t = np.linspace(0, 10, 200)
    path = tmp_path / 'plot.png'
    plot_png.line_panels(path, [('VX', [('CMD', t, np.sin(t), 'orange')])], 'TITLE', width=300)
    blob = path.read_bytes()
    assert blob[:8] == b'\x89PNG\r\n\x1a\n'
    width, height = struct.unpack('>II', blob[16:24])
    assert width == 300 and height > 100
    size = struct.unpack('>I', blob[33:37])[0]
    raw = zlib.decompress(blob[41 : 41 + size])
    pixels = np.frombuffer(raw, dtype=np.uint8).reshape(height, 1 + 3 * width)[:, 1:]
    orange = np.all(pixels.reshape(height, width, 3) == (255, 127, 14), axis=-1)
    assert orange.sum() > 300
