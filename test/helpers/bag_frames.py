"""Reading a bag's robot description and TF back, checked against MuJoCo's kinematics."""

import mujoco
import numpy as np
from rosbags.rosbag2 import Reader
from rosbags.typesys import get_typestore

from loco_policy import description, spec
from loco_policy.tools.bag_writer import TYPESTORE


def read(split):
    """[(topic, message)] of one bag split in log-time order, deserialised by rosbags."""
    typestore = get_typestore(TYPESTORE)
    with Reader(split) as reader:
        return [
            (c.topic, typestore.deserialize_cdr(raw, c.msgtype)) for c, _, raw in reader.messages()
        ]


def stamp(msg):
    """(sec, nanosec) of a message header."""
    return msg.header.stamp.sec, msg.header.stamp.nanosec


def matrix(transform):
    """(4, 4) of a geometry_msgs/Transform."""
    t, r = transform.translation, transform.rotation
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, np.array([r.w, r.x, r.y, r.z]))
    out = np.eye(4)
    out[:3, :3], out[:3, 3] = rot.reshape(3, 3), [t.x, t.y, t.z]
    return out


def world_poses(transforms, root='odom'):
    """{frame: (4, 4) pose in root} by chaining {child: (parent, (4, 4))}."""
    poses = {root: np.eye(4)}

    def pose(frame):
        if frame not in poses:
            parent, local = transforms[frame]
            poses[frame] = pose(parent) @ local
        return poses[frame]

    for frame in transforms:
        pose(frame)
    return poses


def check_tf(split, model=None, limit=None):
    """Check a split's /tf + /tf_static against MuJoCo FK of its /joint_states and /odom.

    For every /joint_states message with an /odom and a /tf at its stamp: every body's position
    from the chained TF (odom -> base -> ... -> link, feet from /tf_static) equals MuJoCo's xpos
    (and feet its foot sites) for the qpos of those messages. Return (stamps checked, max error
    in m, base positions (n, 3)).
    """
    model = model or description.load_model()
    data = mujoco.MjData(model)
    messages = read(split)
    static = {}
    joints, odom, tf = {}, {}, {}
    for topic, msg in messages:
        if topic == '/tf_static':
            for t in msg.transforms:
                static[t.child_frame_id] = (t.header.frame_id, matrix(t.transform))
        elif topic == '/tf':
            for t in msg.transforms:
                tf.setdefault(stamp(t), {})[t.child_frame_id] = (
                    t.header.frame_id,
                    matrix(t.transform),
                )
        elif topic == '/joint_states':
            joints[stamp(msg)] = msg
        elif topic == '/odom':
            odom[stamp(msg)] = msg
    assert set(static) == set(spec.FOOT_NAMES), sorted(static)
    checked, worst, bases = 0, 0.0, []
    for key in sorted(set(joints) & set(odom) & set(tf))[:limit]:
        msg, base = joints[key], odom[key].pose.pose
        qpos = np.zeros(model.nq)
        qpos[:3] = base.position.x, base.position.y, base.position.z
        o = base.orientation
        qpos[3:7] = o.w, o.x, o.y, o.z
        by_name = dict(zip(msg.name, msg.position))
        qpos[7:] = [by_name[n] for n in spec.JOINT_NAMES]
        data.qpos[:] = qpos
        mujoco.mj_kinematics(model, data)
        poses = world_poses({**static, **tf[key]})
        for body in range(1, model.nbody):
            error = np.abs(poses[model.body(body).name][:3, 3] - data.xpos[body]).max()
            worst = max(worst, float(error))
        for foot in spec.FOOT_NAMES:
            error = np.abs(poses[foot][:3, 3] - data.site(foot).xpos).max()
            worst = max(worst, float(error))
        bases.append(qpos[:3].copy())
        checked += 1
    return checked, worst, np.array(bases)
