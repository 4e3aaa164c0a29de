"""The ros2_control output (ROS-free): PD position targets as one array in a configured order.

ros2_control's `forward_command_controller` and `joint_group_position_controller` take a
std_msgs/Float64MultiArray of positions, one per joint of their `joints` list, in that order. A
position array cannot carry gains, so the robot must apply the policy's own PD law in its
hardware interface or position controller: tau = kp (q* - q) - kd qd with kp and kd from the
policy file (the spec's 80 N m/rad and 2 N m s/rad), clipped at its torque limit (80 N m). An
array is produced only while the command holds position (STAND, WALK: every kp > 0); PASSIVE
and DAMP (kp = 0) produce none, and the robot must then damp on its own (a controller or
hardware command timeout), since a position stream cannot ask for damping.
"""

import numpy as np

from loco_policy import spec


def group_order(joint_names):
    """Indices (n,) into the spec's joint order of a controller's joint list; ValueError if wrong.

    The list must name each of the spec's joints exactly once, in any order.
    """
    names = list(joint_names)
    index = {name: i for i, name in enumerate(spec.JOINT_NAMES)}
    unknown = [n for n in names if n not in index]
    missing = [n for n in spec.JOINT_NAMES if n not in names]
    if unknown or missing or len(set(names)) != len(names):
        raise ValueError(
            f'position group joints must name each of the {spec.NUM_JOINTS} robot joints once: '
            f'unknown {unknown}, missing {missing}, {len(names) - len(set(names))} duplicated'
        )
    return np.array([index[n] for n in names])


def group_positions(command, order):
    """q* (rad) of a JointCommand in the group's order as a list, or None when it holds no pose.

    None for damping commands (any kp == 0) and for non-finite targets.
    """
    if np.any(command.kp <= 0.0) or not np.all(np.isfinite(command.position)):
        return None
    return command.position[order].tolist()
