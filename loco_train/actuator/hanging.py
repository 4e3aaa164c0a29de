"""Whether a recording is of a hanging robot: the fixed-base model must explain the efforts.

On the hoist a joint's effort is what its leg's own dynamics need, M(q) qdd + c(q, qd) + g(q),
plus the drive's armature, damping and friction (near zero mean over an excitation around the
default pose). A robot standing on its feet carries its weight through the hip and knee drives
as well: tens of N m that the fixed-base model cannot explain, and a fit would turn them into
wrong gains and friction. The check computes, per joint, the mean over the recording of the
measured effort minus the fixed-base inverse dynamics (measured q, qd; qdd from qd's time
derivative: its noise averages out) and refuses the recording when one exceeds STANCE_TORQUE.
"""

import numpy as np

from loco_policy import spec

STANCE_TORQUE = 3.0
"""Largest mean effort (N m) a joint may carry beyond the hanging model's: standing, ANYmal's
hip flexion and knee drives carry 7 to 16 N m of it (abduction 4 to 7); hanging, what is left
is the drive's friction and the noise, a tenth of a N m."""


def unexplained_torque(segments):
    """(12,) mean (N m) over the segments of the effort the fixed-base model does not explain."""
    import mujoco

    from loco_train.actuator import mjcf
    from loco_train.actuator.model import ActuatorParams

    bare = ActuatorParams(friction=0.0, damping=0.0, armature=0.0)
    model = mjcf.build_spec(bare, fixed_base=True).compile()
    data = mujoco.MjData(model)
    dofs = mjcf.Drives(model).dofs
    total, count = np.zeros(spec.NUM_JOINTS), 0
    for segment in segments:
        if len(segment.t) < 3:
            continue
        qdd = np.gradient(segment.qd, segment.t, axis=0)
        for q, qd, a, tau in zip(segment.q, segment.qd, qdd, segment.tau):
            data.qpos[:], data.qvel[:], data.qacc[:] = q, qd, a
            mujoco.mj_inverse(model, data)
            total += tau - data.qfrc_inverse[dofs]
            count += 1
    return total / max(count, 1)


def check(segments):
    """Raise FitError when the segments' efforts carry a load the hanging model cannot explain."""
    from loco_train.actuator.fit import FitError

    load = unexplained_torque(segments)
    heavy = {n: round(float(v), 1) for n, v in zip(spec.JOINT_NAMES, load)
             if abs(v) > STANCE_TORQUE}  # fmt: skip
    if heavy:
        raise FitError(
            f'not a hanging robot: the joint efforts carry a mean load the fixed-base model '
            f'cannot explain (N m, beyond {STANCE_TORQUE}: {heavy}), as when the robot stands on '
            'its feet; fit-actuator identifies the drives of a robot hanging in the air (on its '
            'hoist, or sim_robot fixed_base:=true): record the excitation there'
        )
