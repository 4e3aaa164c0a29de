"""The robot's state messages read straight from their serialized (CDR) bytes, ROS-free.

policy_node takes /joint_states, /imu and /odom raw (rclpy's `raw=True`) and reads only the
newest of each, only at a tick, and only the fields the controller uses: no Python message
objects are built (rclpy's deserialisation builds one object per nested message, ~20–60 us per
message here). Layout: the 4-byte encapsulation header, then the fields in declaration order,
each aligned to its size relative to the byte after the header (XCDR1; XCDR2 aligns at most to
4); little- or big-endian as the header says. Strings: uint32 length counting the NUL, bytes.
Sequences: uint32 count, elements.
"""

import struct

import numpy as np

ENCAPSULATIONS = {
    0x0000: ('>', 8),  # CDR_BE (XCDR1)
    0x0001: ('<', 8),  # CDR_LE (XCDR1, what rmw_fastrtps writes)
    0x0006: ('>', 4),  # PLAIN_CDR2_BE
    0x0007: ('<', 4),  # PLAIN_CDR2_LE
}
"""Encapsulation id -> (byte order, largest alignment)."""


class CdrError(ValueError):
    """A serialized message that cannot be read (truncated, unknown encapsulation)."""


class _Reader:
    """A cursor over one serialized message."""

    def __init__(self, data):
        """Read the encapsulation header of data (bytes-like)."""
        self.data = memoryview(data)
        if len(self.data) < 4:
            raise CdrError(f'{len(self.data)} bytes: shorter than the CDR header')
        kind = int.from_bytes(self.data[:2], 'big')
        if kind not in ENCAPSULATIONS:
            raise CdrError(f'unknown CDR encapsulation 0x{kind:04x}')
        self.order, self.max_align = ENCAPSULATIONS[kind]
        self.pos = 0  # relative to the byte after the header

    def _take(self, size, align):
        """Advance past `size` bytes aligned to `align`; the absolute start offset."""
        self.pos += -self.pos % min(align, self.max_align)
        start = 4 + self.pos
        if start + size > len(self.data):
            raise CdrError(f'truncated message: {len(self.data)} bytes, needs {start + size}')
        self.pos += size
        return start

    def uint32(self):
        """One uint32."""
        return struct.unpack_from(self.order + 'I', self.data, self._take(4, 4))[0]

    def doubles(self, n):
        """N float64 as an array (n,)."""
        if n == 0:
            return np.zeros(0)
        start = self._take(8 * n, 8)
        return np.frombuffer(self.data, self.order + 'f8', n, start).astype(np.float64)

    def string(self):
        """One string (UTF-8)."""
        n = self.uint32()
        start = self._take(n, 1)
        return bytes(self.data[start : start + max(n - 1, 0)]).decode('utf-8', 'replace')

    def skip_header(self):
        """Skip a std_msgs/Header: stamp (int32, uint32), frame_id."""
        self._take(8, 4)
        self.string()

    def double_sequence(self):
        """A float64 sequence as an array."""
        return self.doubles(self.uint32())


def stamp(data):
    """The std_msgs/Header stamp that leads data (s; 0.0 for an unstamped message)."""
    r = _Reader(data)
    sec = struct.unpack_from(r.order + 'i', r.data, r._take(4, 4))[0]
    nanosec = r.uint32()
    return sec + nanosec * 1e-9


_NAMES = {}
"""Name-section bytes -> names of recent /joint_states (a robot sends the same list each time)."""


def joint_state(data):
    """sensor_msgs/JointState bytes -> (names list, position, velocity, effort arrays)."""
    r = _Reader(data)
    r.skip_header()
    count = r.uint32()
    start, pos, unpack = 4 + r.pos, r.pos, struct.Struct(r.order + 'I').unpack_from
    for _ in range(count):  # walk the strings; decode them only when the list changed
        pos += -pos % 4
        if 4 + pos + 4 > len(r.data):
            raise CdrError(f'truncated message: {len(r.data)} bytes in the joint names')
        pos += 4 + unpack(r.data, 4 + pos)[0]
    if 4 + pos > len(r.data):
        raise CdrError(f'truncated message: {len(r.data)} bytes in the joint names')
    section = bytes(r.data[start : 4 + pos])
    names = _NAMES.get(section)
    if names is None:
        names = [r.string() for _ in range(count)]
        if len(_NAMES) >= 8:
            _NAMES.clear()
        _NAMES[section] = names
    r.pos = pos
    return list(names), r.double_sequence(), r.double_sequence(), r.double_sequence()


def imu(data):
    """sensor_msgs/Imu bytes -> (orientation x, y, z, w; angular velocity (3,) rad/s)."""
    r = _Reader(data)
    r.skip_header()
    quat_xyzw = r.doubles(4)
    r.doubles(9)  # orientation covariance
    return quat_xyzw, r.doubles(3)


def odometry_linear_velocity(data):
    """nav_msgs/Odometry bytes -> twist.twist.linear (3,) m/s (the child frame: the base)."""
    r = _Reader(data)
    r.skip_header()
    r.string()  # child_frame_id
    r.doubles(7 + 36)  # pose: position, orientation; covariance
    return r.doubles(3)


class _Writer:
    """Little-endian XCDR1 (what rmw_fastrtps writes and reads), built up in one bytearray."""

    def __init__(self):
        """Start with the CDR_LE encapsulation header."""
        self.out = bytearray(b'\x00\x01\x00\x00')

    def _align(self, align):
        """Zero padding up to a multiple of align after the header."""
        self.out += bytes(-(len(self.out) - 4) % align)

    def uint32(self, value):
        """One uint32."""
        self._align(4)
        self.out += struct.pack('<I', value)

    def string(self, text):
        """One string: length with the NUL, UTF-8 bytes, NUL."""
        data = text.encode('utf-8')
        self.uint32(len(data) + 1)
        self.out += data + b'\x00'

    def header(self, sec, nanosec, frame_id):
        """A std_msgs/Header."""
        self._align(4)
        self.out += struct.pack('<iI', sec, nanosec)
        self.string(frame_id)

    def sequence(self, values, dtype, align):
        """A numeric sequence: uint32 count, elements (values: array-like of dtype)."""
        values = np.ascontiguousarray(values, dtype=dtype)
        self.uint32(values.size)
        if values.size:
            self._align(align)
            self.out += values.tobytes()


_NAME_BYTES = {}
"""Joint names (tuple) -> their serialized sequence (the same for every command)."""


def joint_state_bytes(sec, nanosec, frame_id, names, position, velocity, effort):
    """sensor_msgs/JointState as the bytes rclpy's publish takes (position etc. (n,) float64)."""
    w = _Writer()
    w.header(sec, nanosec, frame_id)
    names = tuple(names)
    section = _NAME_BYTES.get(names)
    if section is None:
        names_only = _Writer()  # starts 4-aligned, as the sequence does in the message
        names_only.uint32(len(names))
        for name in names:
            names_only.string(name)
        section = bytes(names_only.out[4:])
        if len(_NAME_BYTES) >= 8:
            _NAME_BYTES.clear()
        _NAME_BYTES[names] = section
    w._align(4)
    w.out += section
    for values in (position, velocity, effort):
        w.sequence(values, '<f8', 8)
    return bytes(w.out)


def float32_multiarray_bytes(dims, data):
    """std_msgs/Float32MultiArray bytes: dims [(label, size, stride)], data_offset 0, data.

    data must already be float32 (a silent cast could turn a large float64 into inf).
    """
    if np.asarray(data).dtype != np.float32:
        raise ValueError(f'Float32MultiArray data must be float32, not {np.asarray(data).dtype}')
    w = _Writer()
    w.uint32(len(dims))
    for label, size, stride in dims:
        w.string(label)
        w.uint32(size)
        w.uint32(stride)
    w.uint32(0)  # data_offset
    w.sequence(data, '<f4', 4)
    return bytes(w.out)
