"""Moreau stepping: free flight against MuJoCo, energy conservation without damping."""

import mujoco
import numpy as np
import pytest

from loco_train.sim import Simulator
from loco_train.sim.reference import random_states, robot


def _mujoco_flight(model, qpos, qvel, seconds, dt=0.0005):
    """Reference trajectory end: RK4 at 0.5 ms, contacts and joint limits disabled."""
    model.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    model.opt.timestep = dt
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_LIMIT
    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = qpos, qvel
    for _ in range(int(round(seconds / dt))):
        mujoco.mj_step(model, data)
    return data.qpos.copy()


@pytest.mark.slow
def test_one_second_free_flight_matches_mujoco():
    model = robot(damping=False)
    qpos, qvel = random_states(model, 3, np.random.default_rng(1), speed=0.5)
    sim = Simulator(model, 3, dtype='float64', contact='none', substeps=40)  # dt = 0.5 ms
    sim.set_state(qpos, qvel)
    for _ in range(50):
        sim.step()  # zero gains: zero torque
    end, _ = sim.get_state()
    for e in range(3):
        ref = _mujoco_flight(robot(damping=False), qpos[e], qvel[e], 1.0)
        err = np.abs(ref - end[e])
        assert err.max() < 1e-3, (e, err.max())
        assert abs(ref[2] - qpos[e, 2]) > 1.0  # it did fall under gravity


def test_energy_drift_below_one_percent_over_two_seconds():
    model = robot(damping=False)
    model.opt.gravity[:] = 0.0  # no potential: the kinetic energy must stay constant
    qpos, qvel = random_states(model, 4, np.random.default_rng(2), speed=0.5)
    sim = Simulator(model, 4, dtype='float64', contact='none')  # default dt = 5 ms
    sim.set_state(qpos, qvel)

    def kinetic():
        q, v = sim.get_state()
        H = sim.mass_matrix(q)
        return 0.5 * np.einsum('ni,nij,nj->n', v, H, v)

    start = kinetic()
    drift = np.zeros(4)
    for _ in range(100):  # 2 s
        sim.step()
        drift = np.maximum(drift, np.abs(kinetic() - start) / start)
    assert drift.max() < 0.01, drift
    assert np.abs(sim.get_state()[1] - qvel).max() > 0.05  # the motion was not trivial
