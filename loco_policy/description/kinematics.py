"""Forward kinematics of a URDF in numpy: link poses and the TF frames of a joint configuration.

What robot_state_publisher computes from /joint_states, without ROS: each joint's transform
parent link -> child link (origin, then the joint's motion about or along its axis), the fixed
joints' transforms once, and every link's pose from a base pose. Rotations are 3x3 matrices and
quaternions w-x-y-z (MuJoCo's order; ROS messages take x-y-z-w). Units: m, rad.
"""

from dataclasses import dataclass
import xml.etree.ElementTree as ET

import numpy as np

MOVABLE = ('revolute', 'continuous', 'prismatic')
"""URDF joint types driven by a joint position; 'fixed' joints are static frames."""


def matrix_from_quat(quat):
    """Rotation matrix (3, 3) of a quaternion w-x-y-z (normalised here)."""
    w, x, y, z = np.asarray(quat, dtype=np.float64) / np.linalg.norm(quat)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def quat_from_matrix(rot):
    """Quaternion w-x-y-z (w >= 0) of a rotation matrix (3, 3)."""
    r = np.asarray(rot, dtype=np.float64)
    trace = np.trace(r)
    if trace > 0.0:
        s = 2.0 * np.sqrt(1.0 + trace)
        quat = [
            0.25 * s,
            (r[2, 1] - r[1, 2]) / s,
            (r[0, 2] - r[2, 0]) / s,
            (r[1, 0] - r[0, 1]) / s,
        ]
    else:  # largest diagonal entry picks the stable branch
        i = int(np.argmax(np.diag(r)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(max(1.0 + r[i, i] - r[j, j] - r[k, k], 0.0))
        quat = np.zeros(4)
        quat[0] = (r[k, j] - r[j, k]) / s
        quat[1 + i] = 0.25 * s
        quat[1 + j] = (r[j, i] + r[i, j]) / s
        quat[1 + k] = (r[k, i] + r[i, k]) / s
    quat = np.asarray(quat) / np.linalg.norm(quat)
    return -quat if quat[0] < 0 else quat


def quat_multiply(a, b):
    """Hamilton products a * b of quaternions w-x-y-z, (..., 4) each."""
    aw, av, bw, bv = a[..., :1], a[..., 1:], b[..., :1], b[..., 1:]
    w = aw * bw - np.sum(av * bv, axis=-1, keepdims=True)
    ax, ay, az, bx, by, bz = av[..., 0], av[..., 1], av[..., 2], bv[..., 0], bv[..., 1], bv[..., 2]
    cross = np.stack([ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx], axis=-1)
    return np.concatenate([w, aw * bv + bw * av + cross], axis=-1)


def matrix_from_rpy(rpy):
    """Rotation matrix (3, 3) of URDF roll-pitch-yaw (rad): R = Rz(yaw) Ry(pitch) Rx(roll)."""
    roll, pitch, yaw = rpy
    cr, sr, cp, sp, cy, sy = (f(a) for a in (roll, pitch, yaw) for f in (np.cos, np.sin))
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def rpy_from_matrix(rot):
    """URDF roll-pitch-yaw (3,) in rad of a rotation matrix; roll = 0 at pitch = +-pi/2."""
    r = np.asarray(rot, dtype=np.float64)
    pitch = np.arctan2(-r[2, 0], np.hypot(r[0, 0], r[1, 0]))
    if np.hypot(r[0, 0], r[1, 0]) < 1e-9:  # gimbal lock: only roll - yaw (or + yaw) is defined
        return np.array([0.0, pitch, np.arctan2(-r[0, 1], r[1, 1])])
    return np.array([np.arctan2(r[2, 1], r[2, 2]), pitch, np.arctan2(r[1, 0], r[0, 0])])


def axis_angle_matrix(axis, angle):
    """Rotation matrix (3, 3) of angle (rad) about a unit axis (3,) (Rodrigues)."""
    x, y, z = axis
    k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)


def transform(rot=None, pos=None):
    """Homogeneous transform (4, 4) from a rotation (3, 3) and a translation (3,)."""
    out = np.eye(4)
    if rot is not None:
        out[:3, :3] = rot
    if pos is not None:
        out[:3, 3] = pos
    return out


@dataclass(frozen=True)
class Joint:
    """One URDF joint: the pose of the child link in the parent at position 0, and its axis."""

    name: str
    """Joint name (a /joint_states name for movable joints)."""
    type: str
    """URDF type: revolute, continuous, prismatic or fixed."""
    parent: str
    """Parent link name (the TF parent frame)."""
    child: str
    """Child link name (the TF child frame)."""
    origin: np.ndarray
    """(4, 4) pose of the child link in the parent link at joint position 0."""
    axis: np.ndarray
    """(3,) unit axis in the child (joint) frame."""

    def motion(self, position):
        """(4, 4) transform parent -> child at a joint position (rad or m)."""
        if self.type == 'fixed':
            return self.origin
        if self.type == 'prismatic':
            return self.origin @ transform(pos=self.axis * position)
        return self.origin @ transform(axis_angle_matrix(self.axis, position))


@dataclass(frozen=True)
class Frame:
    """One TF transform: the pose of `child` in `parent`."""

    parent: str
    """Parent frame id."""
    child: str
    """Child frame id."""
    translation: np.ndarray
    """(3,) m."""
    rotation: np.ndarray
    """(4,) unit quaternion w-x-y-z."""


def frame(parent, child, matrix):
    """The Frame of a (4, 4) transform."""
    return Frame(parent, child, matrix[:3, 3].copy(), quat_from_matrix(matrix[:3, :3]))


def _floats(text, default, what):
    """Parse 'a b c' into a (3,) array; raise ValueError naming what on a bad value."""
    if text is None:
        return np.array(default, dtype=np.float64)
    try:
        values = np.array([float(v) for v in text.split()])
    except ValueError:
        raise ValueError(f'robot description: {what} {text!r} is not three numbers') from None
    if values.shape != (3,) or not np.all(np.isfinite(values)):
        raise ValueError(f'robot description: {what} {text!r} is not three finite numbers')
    return values


class Kinematics:
    """The joint tree of a URDF: TF frames and link poses of joint positions."""

    def __init__(self, joints):
        """Build from Joints; raise ValueError unless they form one tree (single root link)."""
        children = [j.child for j in joints]
        if len(set(children)) != len(children):
            raise ValueError('robot description: a link is the child of two joints')
        roots = {j.parent for j in joints} - set(children)
        if len(roots) != 1:
            raise ValueError(f'robot description: expected one root link, found {sorted(roots)}')
        self.root = roots.pop()
        """Name of the root link (the floating base)."""
        by_parent = {}
        for joint in joints:
            by_parent.setdefault(joint.parent, []).append(joint)
        order = []

        def visit(link):  # depth first: a parent's joint before its children's, file order
            for joint in by_parent.get(link, []):
                order.append(joint)
                visit(joint.child)

        visit(self.root)
        if len(order) != len(joints):
            raise ValueError('robot description: the joints form a loop')
        self.joints = tuple(order)
        """Joints, every parent's joint before its children's."""
        self.movable = tuple(j.name for j in joints if j.type in MOVABLE)
        """Names of the joints driven by a position, in file order."""
        self.links = (self.root, *(j.child for j in self.joints))
        """Link names, root first."""
        moving = [j for j in self.joints if j.type in MOVABLE]
        self._index = {j.name: i for i, j in enumerate(moving)}
        self._moving = moving
        # per movable joint, for joint_frames in one batch: rotation at q = 0 (n, 4) w-x-y-z,
        # translation at q = 0 (n, 3) m, axis (n, 3) in the child frame, prismatic flag (n,)
        self._quat0 = np.array([quat_from_matrix(j.origin[:3, :3]) for j in moving]).reshape(-1, 4)
        self._pos0 = np.array([j.origin[:3, 3] for j in moving]).reshape(-1, 3)
        self._axis = np.array([j.axis for j in moving]).reshape(-1, 3)
        self._slide = np.array([j.type == 'prismatic' for j in moving], dtype=bool)

    @classmethod
    def from_urdf(cls, text):
        """Parse URDF text; raise ValueError on malformed XML or an unsupported joint."""
        try:
            root = ET.fromstring(text)
        except ET.ParseError as error:
            raise ValueError(f'robot description: not valid XML ({error})') from None
        if root.tag != 'robot':
            raise ValueError(f'robot description: root element is <{root.tag}>, not <robot>')
        links = {link.get('name') for link in root.findall('link')}
        joints = []
        for element in root.findall('joint'):
            name, kind = element.get('name'), element.get('type')
            if kind not in MOVABLE + ('fixed',):
                raise ValueError(f'robot description: joint {name!r} has type {kind!r}')
            parent, child = element.find('parent'), element.find('child')
            if parent is None or child is None:
                raise ValueError(f'robot description: joint {name!r} lacks parent or child')
            parent, child = parent.get('link'), child.get('link')
            if not {parent, child} <= links:
                raise ValueError(f'robot description: joint {name!r} names an undefined link')
            origin = element.find('origin')
            xyz = _floats(None if origin is None else origin.get('xyz'), (0, 0, 0), 'xyz')
            rpy = _floats(None if origin is None else origin.get('rpy'), (0, 0, 0), 'rpy')
            axis = element.find('axis')
            axis = _floats(None if axis is None else axis.get('xyz'), (1, 0, 0), 'axis')
            if kind != 'fixed' and np.linalg.norm(axis) < 1e-12:
                raise ValueError(f'robot description: joint {name!r} has a zero axis')
            axis = axis / max(np.linalg.norm(axis), 1e-12)
            origin = transform(matrix_from_rpy(rpy), xyz)
            joints.append(Joint(name, kind, parent, child, origin, axis))
        if not joints:
            raise ValueError('robot description: no joints')
        return cls(joints)

    def joint_frames(self, positions):
        """TF Frames parent -> child of the movable joints named in positions {name: q}.

        One batch over the joints (q0 * exp(axis q / 2) per revolute joint), tree order; the
        same transforms as Joint.motion.
        """
        index = sorted(self._index[name] for name in positions if name in self._index)
        if not index:
            return []
        q = np.array([float(positions[self._moving[i].name]) for i in index])  # (n,) rad or m
        axis, slide = self._axis[index], self._slide[index]
        angle = np.where(slide, 0.0, q)
        turn = np.concatenate([np.cos(angle / 2)[:, None], np.sin(angle / 2)[:, None] * axis], 1)
        quat = quat_multiply(self._quat0[index], turn)  # (n, 4)
        pos = self._pos0[index].copy()  # (n, 3); a prismatic joint moves along its rotated axis
        if slide.any():
            moved = np.array(
                [self._moving[i].origin[:3, :3] @ self._moving[i].axis for i in index]
            )
            pos += np.where(slide, q, 0.0)[:, None] * moved
        return [
            Frame(self._moving[i].parent, self._moving[i].child, pos[k], quat[k])
            for k, i in enumerate(index)
        ]

    def static_frames(self):
        """TF Frames parent -> child of the fixed joints (what /tf_static carries)."""
        return [frame(j.parent, j.child, j.origin) for j in self.joints if j.type == 'fixed']

    def link_poses(self, positions, base=None):
        """{link: (4, 4) pose in the frame of `base` (4, 4), default identity = the root link}.

        positions maps every movable joint name to its position; raise ValueError on a gap.
        """
        missing = [name for name in self.movable if name not in positions]
        if missing:
            raise ValueError(f'joint positions missing for {missing}')
        poses = {self.root: np.eye(4) if base is None else np.asarray(base, dtype=np.float64)}
        for j in self.joints:
            q = float(positions[j.name]) if j.type in MOVABLE else 0.0
            poses[j.child] = poses[j.parent] @ j.motion(q)
        return poses
