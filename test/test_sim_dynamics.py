"""Mass matrix (CRBA) and bias forces (RNEA) against MuJoCo's mj_fullM and qfrc_bias."""

import mujoco
import numpy as np
import pytest

from loco_train.sim import Simulator
from loco_train.sim.reference import random_states, robot


def _mujoco_terms(model, qpos, qvel):
    data = mujoco.MjData(model)
    H, h = [], []
    for q, v in zip(qpos, qvel):
        data.qpos[:], data.qvel[:] = q, v
        mujoco.mj_forward(model, data)
        full = np.zeros((model.nv, model.nv))
        mujoco.mj_fullM(model, data, full)
        H.append(full)
        h.append(data.qfrc_bias.copy())
    return np.array(H), np.array(h)


@pytest.mark.parametrize('dtype', ['float64', 'float32'])
def test_mass_matrix_and_bias_match_mujoco(dtype):
    model = robot()
    model.dof_armature[6:] = 0.01  # armature on the diagonal, as MuJoCo adds it
    qpos, qvel = random_states(model, 50, np.random.default_rng(3), speed=2.0)
    sim = Simulator(model, 50, dtype=dtype, contact='none')
    H, h = sim.mass_matrix(qpos), sim.bias_forces(qpos, qvel)
    H_ref, h_ref = _mujoco_terms(model, qpos, qvel)
    rel_H = np.abs(H - H_ref).max(axis=(1, 2)) / np.abs(H_ref).max(axis=(1, 2))
    rel_h = np.abs(h - h_ref).max(axis=1) / np.abs(h_ref).max(axis=1)
    assert rel_H.max() < 1e-4 and rel_h.max() < 1e-4, (rel_H.max(), rel_h.max())


def test_armature_parameter_is_per_env():
    model = robot()
    sim = Simulator(model, 2, dtype='float64', contact='none')
    qpos, _ = random_states(model, 2, np.random.default_rng(0))
    qpos[1] = qpos[0]
    sim.set_params(armature=np.stack([np.zeros(12), np.full(12, 0.05)]))
    H = sim.mass_matrix(qpos)
    np.testing.assert_allclose(np.diag(H[1] - H[0]), [0] * 6 + [0.05] * 12, atol=1e-12)
