"""Coulomb friction: a sled pushed below mu m g sticks, above it slides at F/m - mu g."""

import mujoco
import numpy as np
import pytest

from loco_train.sim import Simulator

SLED = """<mujoco><worldbody><geom name="floor" type="plane" size="0 0 1"/>
<body name="sled" pos="0 0 0.05"><freejoint/>
  <inertial mass="10" pos="0 0 0" diaginertia="0.05 0.1 0.1"/>
  <geom type="box" size="0.2 0.12 0.02" contype="0" conaffinity="0" mass="0"/>
  <geom type="sphere" size="0.02" pos="0.15 0.1 -0.03" mass="0"/>
  <geom type="sphere" size="0.02" pos="0.15 -0.1 -0.03" mass="0"/>
  <geom type="sphere" size="0.02" pos="-0.15 0.1 -0.03" mass="0"/>
  <geom type="sphere" size="0.02" pos="-0.15 -0.1 -0.03" mass="0"/>
</body></worldbody></mujoco>"""
MU, MASS, G = 0.5, 10.0, 9.81


def _push(contact, force, seconds=1.0):
    sim = Simulator(mujoco.MjModel.from_xml_string(SLED), 1, dtype='float64', contact=contact)
    sim.set_params(mu=MU)
    applied = np.zeros(6)
    applied[0] = force  # world x force on the free joint (at the body origin, its centre of mass)
    for _ in range(int(round(seconds / sim.config.control_dt))):
        sim.step(None, applied=applied)
    return sim.get_state()


@pytest.mark.parametrize('contact', ['hard', 'smooth'])
def test_push_below_friction_limit_sticks(contact):
    qpos, qvel = _push(contact, 0.5 * MU * MASS * G)
    assert abs(qpos[0, 0]) < 1e-3 and abs(qvel[0, 0]) < 1e-3, (qpos[0, 0], qvel[0, 0])


@pytest.mark.parametrize('contact', ['hard', 'smooth', 'soft'])
def test_push_above_friction_limit_slides_at_analytic_acceleration(contact):
    force = 2.0 * MU * MASS * G
    _, qvel = _push(contact, force)
    expected = force / MASS - MU * G  # m/s after 1 s
    assert abs(qvel[0, 0] - expected) < 0.02 * expected, (qvel[0, 0], expected)
