"""sim_robot over real DDS: malformed commands rejected, sensors stay finite, reset service."""

import time

import numpy as np
import pytest

from loco_policy import spec
from loco_policy.control import joint_command
from test.helpers.deploy_fixtures import (
    Probe,
    publish_damping,
    ros_env,
    start_node,
    stop_process,
)

pytestmark = pytest.mark.ros


def test_rejects_malformed_commands_and_resets(request, tmp_path):
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import JointState

    probe = Probe(request.node.name)
    states, odom = [], []
    probe.node.create_subscription(JointState, '/joint_states', states.append, 10)
    probe.node.create_subscription(Odometry, '/odom', odom.append, 10)
    pub = probe.node.create_publisher(JointState, '/joint_command', 10)
    sim = start_node('sim_robot', [], ros_env(request.node.name), tmp_path / 'sim.log')
    try:
        assert probe.spin_until(lambda: len(states) > 20, 20.0)
        names, pos, vel, eff = joint_command.pack(
            joint_command.damping(spec.DEFAULT_JOINT_POS, 2.0)
        )
        pos[3] = float('nan')
        bad = [
            JointState(name=names, position=pos, velocity=vel, effort=eff),
            JointState(name=names[:5], position=pos[:5], velocity=vel[:5], effort=eff[:5]),
        ]
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            for msg in bad:
                pub.publish(msg)
            probe.spin(0.05)
        # held at the default pose: the malformed commands were not applied
        assert odom[-1].pose.pose.position.z > 0.4
        assert all(np.all(np.isfinite(s.position)) for s in states)
        publish_damping(probe, pub, 1.5)
        assert odom[-1].pose.pose.position.z < 0.3  # damping only: it sank
        assert probe.call('/sim_robot/reset') == (True, 'robot reset to the default pose')
        probe.spin(0.2)
        assert odom[-1].pose.pose.position.z > 0.4  # back on its feet, holding the pose
        assert sim.poll() is None
    finally:
        stop_process(sim)
        probe.close()
    log = (tmp_path / 'sim.log').read_text()
    assert '/joint_command rejected: non-finite numbers' in log or 'names rejected' in log


def _seconds(msg):
    """Header stamp of msg (s)."""
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


def test_stamps_on_the_physics_clock_and_reports_the_applied_command(request, tmp_path):
    """States carry their physics step's time (a 5 ms grid, never repeated); each tick repeats
    the command the drives took in on /joint_command/applied, stamped at the start of the
    physics step it first acted on."""
    from sensor_msgs.msg import JointState

    probe = Probe(request.node.name)
    states, applied = [], []
    probe.node.create_subscription(JointState, '/joint_states', states.append, 100)
    probe.node.create_subscription(JointState, '/joint_command/applied', applied.append, 100)
    pub = probe.node.create_publisher(JointState, '/joint_command', 10)
    params = ['-p', 'publish_applied:=true']
    sim = start_node('sim_robot', params, ros_env(request.node.name), tmp_path / 'sim.log')
    try:
        assert probe.spin_until(lambda: len(states) > 20, 20.0)
        assert not applied  # no command received yet: nothing taken in
        publish_damping(probe, pub, 1.0)
        assert sim.poll() is None
    finally:
        stop_process(sim)
        probe.close()
    t = np.array([_seconds(m) for m in states])
    steps = np.diff(t) / 0.005  # physics steps between samples
    assert np.all(steps > 0.5)  # unique, increasing
    assert np.abs(steps - np.round(steps)).max() < 1e-3  # on the physics grid (float64 at 1e9 s)
    assert len(applied) > 100
    command = joint_command.unpack(
        applied[-1].name, applied[-1].position, applied[-1].velocity, applied[-1].effort
    )
    assert np.allclose(command.kd, 2.0) and np.allclose(command.kp, 0.0)
    offsets = (np.array([_seconds(m) for m in applied]) - t[0]) / 0.005
    assert np.abs(offsets - np.round(offsets)).max() < 1e-3  # on the same grid as the states
