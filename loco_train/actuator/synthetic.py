"""A synthetic identification run, written as a rosbag2 MCAP like the recorder's (ROS-free).

The MuJoCo backend with known actuator parameters, hanging (or, fixed_base False, standing on
the floor: a recording the fit must refuse), driven by the excitation schedule:
/joint_command at the excitation rate and /joint_states after every physics step, stamped with
the simulated time (s) plus ``origin``; the backend uses the latest command at each step's start.
"""

import numpy as np

from loco_policy import spec
from loco_policy.control import joint_command
from loco_policy.sim.backends import make_backend
from loco_policy.tools.bag_writer import SplitBagWriter

STATE_TYPE = 'sensor_msgs/msg/JointState'


def _joint_state(typestore, stamp, names, position, velocity, effort, frame=''):
    """A serialised sensor_msgs/JointState (CDR bytes)."""
    msg_type = typestore.types[STATE_TYPE]
    header_type = typestore.types['std_msgs/msg/Header']
    time_type = typestore.types['builtin_interfaces/msg/Time']
    sec = int(np.floor(stamp))
    header = header_type(stamp=time_type(sec=sec, nanosec=int(round((stamp - sec) * 1e9))),
                         frame_id=frame)  # fmt: skip
    msg = msg_type(
        header=header, name=list(names), position=np.asarray(position, float),
        velocity=np.asarray(velocity, float), effort=np.asarray(effort, float),
    )  # fmt: skip
    return typestore.serialize_cdr(msg, STATE_TYPE)


def record(path, schedule, truth, rate=400.0, origin=100.0, noise=None, seed=0, lead_in=0.1,
           fixed_base=True):  # fmt: skip
    """Simulate schedule (an Excitation) on the hanging robot with truth (ActuatorParams).

    The recording starts lead_in s before the schedule (its commands hold the default pose: the
    delay history of the fit's first segment is then known).
    noise: optional (q rad, qd rad/s, tau N m) standard deviations of white noise added to the
    recorded joint positions, velocities and efforts (the simulation itself runs noise-free).
    fixed_base False: the robot stands on the floor instead.
    Returns the bag directory (one split).
    """
    backend = make_backend('mujoco', actuator=truth, fixed_base=fixed_base)
    writer = SplitBagWriter(path, split_size=0, split_duration=0, flush_period=0, fsync=False)
    writer.add_topic('/joint_states', STATE_TYPE)
    writer.add_topic('/joint_command', STATE_TYPE)
    typestore = writer.typestore
    rng = np.random.default_rng(seed)
    period = 1.0 / rate
    first = -int(round(lead_in / backend.dt))
    steps = int(round(schedule.config.duration / backend.dt))
    next_command, command = first * backend.dt, None
    for k in range(first, steps):
        t = k * backend.dt
        while next_command <= t + 1e-12:  # commands sent up to this step's start
            command = schedule.command(next_command)
            names, position, velocity, effort = joint_command.pack(command)
            stamp = origin + next_command
            writer.write('/joint_command', int(round(stamp * 1e9)),
                         _joint_state(typestore, stamp, names, position, velocity, effort,
                                      command.mode))  # fmt: skip
            next_command += period
        backend.step(command)
        state = backend.state()
        q, qd, tau = state.q, state.qd, state.tau
        if noise is not None:
            q = q + rng.normal(0.0, noise[0], q.shape)
            qd = qd + rng.normal(0.0, noise[1], qd.shape)
            tau = tau + rng.normal(0.0, noise[2], tau.shape)
        stamp = origin + (k + 1) * backend.dt
        payload = _joint_state(typestore, stamp, spec.JOINT_NAMES, q, qd, tau)
        writer.write('/joint_states', int(round(stamp * 1e9)), payload)
    writer.close()
    return writer.closed_splits[-1] if writer.closed_splits else writer.path
