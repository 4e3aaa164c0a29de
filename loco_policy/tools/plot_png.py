"""A minimal line-plot PNG writer (numpy + zlib), so the demo needs no plotting library.

``line_panels(path, panels)`` draws stacked panels, each with a title and several (t, y, colour)
series, into an RGB PNG. Text uses a built-in 3x5 pixel font (upper case, digits, a few signs).
"""

import struct
import zlib

import numpy as np

_FONT = {  # 3x5 glyphs, rows top to bottom, 3 bits each (MSB = left column)
    'A': (2, 5, 7, 5, 5), 'B': (6, 5, 6, 5, 6), 'C': (3, 4, 4, 4, 3), 'D': (6, 5, 5, 5, 6),
    'E': (7, 4, 6, 4, 7), 'F': (7, 4, 6, 4, 4), 'G': (3, 4, 5, 5, 3), 'H': (5, 5, 7, 5, 5),
    'I': (7, 2, 2, 2, 7), 'J': (1, 1, 1, 5, 2), 'K': (5, 5, 6, 5, 5), 'L': (4, 4, 4, 4, 7),
    'M': (5, 7, 7, 5, 5), 'N': (6, 5, 5, 5, 5), 'O': (2, 5, 5, 5, 2), 'P': (6, 5, 6, 4, 4),
    'Q': (2, 5, 5, 6, 3), 'R': (6, 5, 6, 5, 5), 'S': (3, 4, 2, 1, 6), 'T': (7, 2, 2, 2, 2),
    'U': (5, 5, 5, 5, 7), 'V': (5, 5, 5, 5, 2), 'W': (5, 5, 7, 7, 5), 'X': (5, 5, 2, 5, 5),
    'Y': (5, 5, 2, 2, 2), 'Z': (7, 1, 2, 4, 7), '0': (7, 5, 5, 5, 7), '1': (2, 6, 2, 2, 7),
    '2': (6, 1, 2, 4, 7), '3': (6, 1, 2, 1, 6), '4': (5, 5, 7, 1, 1), '5': (7, 4, 6, 1, 6),
    '6': (3, 4, 7, 5, 7), '7': (7, 1, 1, 2, 2), '8': (7, 5, 7, 5, 7), '9': (7, 5, 7, 1, 6),
    '.': (0, 0, 0, 0, 2), '-': (0, 0, 7, 0, 0), '/': (1, 1, 2, 4, 4), ':': (0, 2, 0, 2, 0),
    '(': (1, 2, 2, 2, 1), ')': (4, 2, 2, 2, 4), ' ': (0, 0, 0, 0, 0), '=': (0, 7, 0, 7, 0),
}  # fmt: skip

COLOURS = {'black': (0, 0, 0), 'grey': (200, 200, 200), 'blue': (31, 119, 180),
           'orange': (255, 127, 14), 'red': (214, 39, 40), 'green': (44, 160, 44)}  # fmt: skip


def write_png(path, image):
    """Write an (H, W, 3) uint8 RGB array as a PNG file."""
    height, width, _ = image.shape
    raw = b''.join(b'\x00' + image[row].tobytes() for row in range(height))

    def chunk(kind, data):
        body = kind + data
        return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body))

    header = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)
    with open(path, 'wb') as handle:
        handle.write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', header))
        handle.write(chunk(b'IDAT', zlib.compress(raw, 6)) + chunk(b'IEND', b''))


def text(image, x, y, string, colour=(0, 0, 0), scale=2):
    """Draw upper-cased text with its top-left corner at pixel (x, y)."""
    for char in string.upper():
        glyph = _FONT.get(char, _FONT[' '])
        for row, bits in enumerate(glyph):
            for col in range(3):
                if bits >> (2 - col) & 1:
                    y0, x0 = y + row * scale, x + col * scale
                    image[y0 : y0 + scale, x0 : x0 + scale] = colour
        x += 4 * scale


def polyline(image, xs, ys, colour, thickness=2):
    """Draw a polyline through pixel coordinates (xs, ys), densely sampled."""
    xs, ys = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    if xs.size < 2:
        return
    steps = np.maximum(1, np.ceil(np.hypot(np.diff(xs), np.diff(ys)))).astype(int)
    px = np.concatenate(
        [np.linspace(a, b, n, endpoint=False) for a, b, n in zip(xs, xs[1:], steps)]
    )
    py = np.concatenate(
        [np.linspace(a, b, n, endpoint=False) for a, b, n in zip(ys, ys[1:], steps)]
    )
    h, w, _ = image.shape
    for dx in range(thickness):
        for dy in range(thickness):
            cx = np.clip(np.round(px).astype(int) + dx, 0, w - 1)
            cy = np.clip(np.round(py).astype(int) + dy, 0, h - 1)
            image[cy, cx] = colour


def line_panels(path, panels, title='', width=900, panel_height=220):
    """Write stacked panels: [(name, [(label, t (N,), y (N,), colour name), ...]), ...]."""
    margin, top = 60, 40
    height = top + len(panels) * (panel_height + 30)
    image = np.full((height, width, 3), 255, dtype=np.uint8)
    text(image, margin, 10, title)
    t_all = np.concatenate([np.asarray(s[1]) for _, series in panels for s in series] + [[0, 1]])
    t0, t1 = float(np.min(t_all)), float(np.max(t_all))
    for i, (name, series) in enumerate(panels):
        y_top = top + i * (panel_height + 30)
        values = np.concatenate([np.asarray(s[2]) for s in series] + [[-0.1, 0.1]])
        lo, hi = float(np.min(values)), float(np.max(values))
        pad = 0.1 * (hi - lo)
        lo, hi = lo - pad, hi + pad
        box = (margin, y_top + 20, width - 20, y_top + 20 + panel_height - 20)
        image[box[1] : box[3], [box[0], box[2]]] = COLOURS['black']
        image[[box[1], box[3]], box[0] : box[2]] = COLOURS['black']
        zero = box[3] - (0 - lo) / (hi - lo) * (box[3] - box[1])
        if box[1] < zero < box[3]:
            image[int(zero), box[0] + 1 : box[2]] = COLOURS['grey']
        text(image, box[0], y_top + 4, f'{name}   ({lo:.2f} TO {hi:.2f})')
        legend_x = width - 20
        for label, t, y, colour in series:
            xs = box[0] + (np.asarray(t) - t0) / max(t1 - t0, 1e-9) * (box[2] - box[0])
            ys = box[3] - (np.asarray(y) - lo) / (hi - lo) * (box[3] - box[1])
            polyline(image, xs, ys, COLOURS[colour])
            legend_x -= 8 * len(label) + 20
            text(image, legend_x, y_top + 4, label, COLOURS[colour])
    text(image, margin, height - 14, f'TIME {t0:.0f} TO {t1:.0f} S')
    write_png(path, image)
