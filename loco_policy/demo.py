"""Interim `make demo`: the robot contract and a MuJoCo PD stand, until the ROS 2 stack exists."""

import json
import sys

import numpy as np

from loco_policy import description, spec


def stand(seconds=2.0):
    """Hold the default pose under the spec's PD gains in MuJoCo; return base heights (m)."""
    import mujoco

    model = description.load_model()
    data = mujoco.MjData(model)
    data.qpos[:] = description.default_qpos()
    heights = []
    for _ in range(int(round(seconds / model.opt.timestep))):
        q, qd = data.qpos[7:], data.qvel[6:]
        tau = spec.KP * (spec.DEFAULT_JOINT_POS - q) - spec.KD * qd
        data.ctrl[:] = np.clip(tau, -spec.TORQUE_LIMIT, spec.TORQUE_LIMIT)
        mujoco.mj_step(model, data)
        heights.append(float(data.qpos[2]))
    return np.asarray(heights)


def main():
    """Print what exists so far and run it; the last line is one JSON object."""
    print(
        'loco_policy demo (interim): the ROS 2 deployment stack is not built yet, so this runs '
        'only the robot description and spec: ANYmal C standing under PD in MuJoCo for 2 s.'
    )
    print(f'joints: {", ".join(spec.JOINT_NAMES)}')
    print(
        f'kp {spec.KP[0]} N m/rad, kd {spec.KD[0]} N m s/rad, torque limit '
        f'{spec.TORQUE_LIMIT[0]} N m, control dt {spec.CONTROL_DT} s, obs dim {spec.OBS_DIM}'
    )
    heights = stand()
    result = {
        'demo': 'mujoco_pd_stand',
        'seconds': 2.0,
        'final_base_height_m': heights[-1],
        'min_base_height_m': float(heights.min()),
        'ros_stack': 'not built yet',
    }
    print(json.dumps(result))
    return 0


if __name__ == '__main__':
    sys.exit(main())
