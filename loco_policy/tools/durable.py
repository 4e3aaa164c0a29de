"""Writes that either complete or raise: the primitive of the crash-safe files (bags, stores)."""

import os


def write_all(fd, data, offset):
    """Write every byte of data at offset with pwrite (short writes continue; errors raise)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
