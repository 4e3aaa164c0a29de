"""Contacts: standing against MuJoCo, penetration, feet kinematics, shape clearance."""

import mujoco
import numpy as np
import pytest

from loco_policy import spec
from loco_policy.description import default_qpos
from loco_train.sim import Simulator
from loco_train.sim.reference import mujoco_stand, random_states, robot, stiff_contacts


def _start():
    """Default pose lowered until the feet touch the ground."""
    qpos = default_qpos()
    qpos[2] -= FOOT_CLEARANCE
    return qpos


FOOT_CLEARANCE = 0.0792 - 0.03  # foot-sphere bottom above the ground at default_qpos (m)


def _stand(contact, seconds=2.0):
    sim = Simulator(robot(), 1, contact=contact)  # float32, dt 5 ms: the training defaults
    sim.set_params(kp=spec.KP, kd=spec.KD, tau_max=spec.TORQUE_LIMIT)
    sim.set_state(_start(), np.zeros(18))
    trace = []
    for _ in range(int(round(seconds / sim.config.control_dt))):
        sim.step(spec.DEFAULT_JOINT_POS)
        trace.append(sim.get_state()[0][0].copy())
    return sim, np.array(trace)


@pytest.fixture(scope='module')
def mujoco_height():
    return mujoco_stand(stiff_contacts(robot()), qpos=_start())[2]


@pytest.mark.parametrize('contact', ['hard', 'smooth'])
def test_standing_settles_at_mujoco_height(contact, mujoco_height):
    sim, trace = _stand(contact)
    last = trace[-50:]  # the last second
    assert abs(trace[-1, 2] - mujoco_height) < 0.01, (trace[-1, 2], mujoco_height)
    assert np.abs(last[:, :2] - last[0, :2]).max() < 1e-3  # no drift of the base
    assert np.abs(last[:, 2] - last[0, 2]).max() < 1e-3
    assert np.abs(sim.get_state()[1]).max() < 0.05
    forces = sim.contact_forces()[0]
    assert abs(forces[:, 2].sum() - 9.81 * robot().body_mass.sum()) < 5.0  # feet carry weight
    penetration = -(sim.foot_positions()[0, :, 2] - 0.03).min()
    if contact == 'hard':
        assert penetration < 1e-3


def test_soft_contact_stands_with_visible_penetration():
    sim, trace = _stand('soft')
    penetration = -(sim.foot_positions()[0, :, 2] - 0.03).min()
    assert 1e-3 < penetration < 1e-2  # weight / stiffness = 110 N / 2e4 N/m = 5.5 mm
    assert np.abs(trace[-50:, :2] - trace[-50, :2]).max() < 1e-3


def test_feet_kinematics_match_mujoco():
    model = robot()
    qpos, qvel = random_states(model, 5, np.random.default_rng(4))
    sim = Simulator(model, 5, dtype='float64', contact='hard')
    sim.set_state(qpos, qvel)
    pos, vel = sim.foot_positions(), sim.foot_velocities()
    data = mujoco.MjData(model)
    jac = np.zeros((3, model.nv))
    for e in range(5):
        data.qpos[:], data.qvel[:] = qpos[e], qvel[e]
        mujoco.mj_forward(model, data)
        for c, name in enumerate(spec.FOOT_NAMES):
            g = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name)
            mujoco.mj_jacGeom(model, data, jac, None, g)
            np.testing.assert_allclose(pos[e, c], data.geom_xpos[g], atol=1e-9)
            np.testing.assert_allclose(vel[e, c], jac @ qvel[e], atol=1e-9)


def test_shape_clearance_detects_a_fall():
    model = robot()
    sim = Simulator(model, 2, dtype='float64', contact='hard')
    lying = default_qpos()
    lying[2] = 0.05  # base centre 5 cm above the ground: the trunk (9 cm half height) is in it
    sim.set_state(np.stack([default_qpos(), lying]), np.zeros((2, 18)))
    clearance = sim.shape_clearance()
    trunk = sim.shape_names.index('base_trunk')
    assert clearance[0].min() > 0.05
    np.testing.assert_allclose(clearance[1, trunk], 0.05 - 0.09, atol=1e-9)


@pytest.mark.parametrize('contact', ['smooth', 'hard', 'soft'])
def test_a_contact_sphere_on_a_fixed_body_is_inert(contact):
    # a sphere welded to the world touches the ground: no dof moves it, so it gets no impulse
    # (its Delassus block is 0) instead of a 1/0; the ball next to it still lands
    xml = """<mujoco><worldbody><geom type="plane" size="0 0 1"/>
      <body name="post" pos="0.5 0 0.02"><geom type="sphere" size="0.02"/></body>
      <body pos="0 0 0.3"><freejoint/><inertial mass="1" pos="0 0 0" diaginertia="0.01 0.01 0.01"/>
        <geom type="sphere" size="0.05"/></body></worldbody></mujoco>"""
    sim = Simulator(mujoco.MjModel.from_xml_string(xml), 1, dtype='float64', contact=contact)
    for _ in range(50):
        sim.step()
    qpos, qvel = sim.get_state()
    assert np.all(np.isfinite(qpos)) and np.all(np.isfinite(qvel)) and not sim.invalid.any()
    assert abs(qpos[0, 2] - 0.05) < 2e-3  # resting on the ground (soft: sunk a little)
    assert np.all(np.isfinite(sim.contact_forces()))
