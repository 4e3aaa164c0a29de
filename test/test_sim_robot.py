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
