"""Non-finite targets, parameters and states are caught, never propagated silently."""

import numpy as np
import pytest
import torch

from loco_policy import spec
from loco_policy.description import default_qpos
from loco_train.sim import SimConfig, Simulator
from loco_train.sim.reference import robot
from loco_train.sim.torch_bridge import TorchSim


@pytest.fixture(scope='module')
def sim():
    return Simulator(robot(), 3, contact='smooth')


def test_nan_targets_raise(sim):
    targets = np.tile(spec.DEFAULT_JOINT_POS, (3, 1))
    targets[1, 4] = np.nan
    with pytest.raises(ValueError, match=r'not finite in environments \[1\]'):
        sim.step(targets)
    with pytest.raises(ValueError, match='not finite'):
        TorchSim(sim).step_from(
            torch.tensor(np.tile(default_qpos(), (3, 1))), torch.zeros(3, 18), targets
        )


@pytest.mark.parametrize('name', ['mass_offset', 'kp', 'mu'])
def test_nan_parameters_raise(sim, name):
    value = np.zeros(3) if name != 'kp' else np.zeros((3, 12))
    value[2] = np.inf
    with pytest.raises(ValueError, match=name):
        sim.set_params(**{name: value})


def test_negative_total_mass_raises(sim):
    with pytest.raises(ValueError, match='non-positive'):
        sim.set_params(mass_offset=[0.0, -100.0, 0.0])


def test_nan_state_raises(sim):
    qpos = np.tile(default_qpos(), (3, 1))
    qpos[0, 3] = np.nan
    with pytest.raises(ValueError, match='NaN'):
        sim.set_state(qpos, np.zeros((3, 18)))


def test_broken_state_sets_invalid_flag_for_that_env_only(sim):
    qvel = np.zeros((3, 18))
    qvel[1, 10] = 1e30  # finite, but its Coriolis forces overflow float32 within a step
    sim.set_state(np.tile(default_qpos(), (3, 1)), qvel)
    sim.step(np.tile(spec.DEFAULT_JOINT_POS, (3, 1)))
    np.testing.assert_array_equal(sim.invalid, [False, True, False])
    qpos_after, _ = sim.get_state()
    assert np.all(np.isfinite(qpos_after[[0, 2]]))


def test_config_is_validated():
    with pytest.raises(ValueError, match='contact model'):
        SimConfig(contact='rubber').validate()
