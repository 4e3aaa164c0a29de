import importlib.util

import numpy as np
import pytest

from loco_policy import joint_command, spec
from loco_policy.sim_backends import (
    make_backend,
    MujocoBackend,
    Perturbation,
    SimBackendError,
    WARP_MODULE,
)


def run(backend, seconds, command=None):
    for _ in range(int(round(seconds / backend.dt))):
        backend.step(command)
    return backend.state()


def test_mujoco_holds_the_default_pose_and_reports_body_frame_state():
    backend = make_backend('mujoco')
    assert backend.dt == pytest.approx(0.005)
    state = run(backend, 1.0)
    assert 0.4 < state.base_pos[2] < 0.65
    assert np.abs(state.q - spec.DEFAULT_JOINT_POS).max() < 0.25  # PD sag under load
    assert np.abs(state.base_lin_vel).max() < 0.05
    assert state.base_lin_acc[2] == pytest.approx(9.81, abs=0.5)  # accelerometer at rest
    assert np.all(np.abs(state.tau) <= spec.TORQUE_LIMIT)


def test_damping_only_lets_the_robot_sink_and_reset_restores_it():
    backend = MujocoBackend()
    state = run(backend, 1.0, joint_command.damping(spec.DEFAULT_JOINT_POS, 2.0))
    assert state.base_pos[2] < 0.3
    backend.reset()
    assert backend.state().base_pos[2] == pytest.approx(spec.DEFAULT_BASE_HEIGHT)


def test_perturbations_change_the_model():
    nominal = MujocoBackend()
    heavy = MujocoBackend(Perturbation(payload=10.0, friction=0.3, gain_scale=0.5))
    assert heavy.model.body_mass.sum() == pytest.approx(nominal.model.body_mass.sum() + 10.0)
    assert np.all(heavy.model.geom_friction[:, 0] == 0.3)
    assert run(heavy, 1.0).base_pos[2] < run(nominal, 1.0).base_pos[2]


def test_unknown_backend_and_missing_warp_backend_fail_naming_what_is_missing():
    with pytest.raises(SimBackendError, match='unknown backend'):
        make_backend('gazebo')
    try:
        backend = make_backend('warp')
    except SimBackendError as error:
        assert WARP_MODULE in str(error) and 'backend:=mujoco' in str(error)
        return
    assert importlib.util.find_spec(WARP_MODULE) is not None
    assert hasattr(backend, 'dt') and callable(backend.step) and callable(backend.state)
