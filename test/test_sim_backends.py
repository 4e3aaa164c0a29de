import mujoco
import numpy as np
import pytest

from loco_policy import spec
from loco_policy.control import joint_command
from loco_policy.sim import backends as sim_backends
from loco_policy.sim.backends import (
    make_backend,
    MujocoBackend,
    Perturbation,
    SimBackendError,
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


def test_unknown_backend_and_missing_warp_module_fail_naming_what_is_missing(monkeypatch):
    with pytest.raises(SimBackendError, match='unknown backend'):
        make_backend('gazebo')
    monkeypatch.setattr(sim_backends, 'WARP_MODULE', 'loco_train.sim_not_written_yet')
    with pytest.raises(SimBackendError) as info:
        make_backend('warp')
    assert 'loco_train.sim_not_written_yet' in str(info.value)
    assert 'backend:=mujoco' in str(info.value)


@pytest.mark.slow
def test_warp_backend_steps_the_description_in_real_units():
    backend = make_backend('warp', Perturbation(payload=1.0))
    assert backend.dt == pytest.approx(MujocoBackend().dt)
    state = run(backend, 0.5)
    # the adapter's contract; how well the simulator stands is test_sim_contact's concern
    assert all(np.all(np.isfinite(v)) for v in vars(state).values())
    assert state.q.shape == (spec.NUM_JOINTS,) and state.base_pos[2] > 0.2
    assert state.time == pytest.approx(0.5)
    backend.reset()
    assert backend.state().base_pos[2] == pytest.approx(spec.DEFAULT_BASE_HEIGHT, abs=1e-5)


@pytest.mark.slow
def test_the_warp_backend_grounds_the_feet_with_the_descriptions_friction():
    nominal = make_backend('warp')
    mu = float(nominal.sim.params['mu'].numpy()[0])
    assert mu == pytest.approx(0.8)  # the description's feet, as in MuJoCo; not the simulator's 1
    model = MujocoBackend().model  # the feet's priority 1 makes MuJoCo use their friction
    feet = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name) for name in spec.FOOT_NAMES]
    assert np.all(model.geom_priority[feet] > 0)
    assert np.allclose(model.geom_friction[feet, 0], mu)
    slippery = make_backend('warp', Perturbation(friction=0.4))
    assert float(slippery.sim.params['mu'].numpy()[0]) == pytest.approx(0.4)


def test_stiff_feet_stand_on_the_ground_where_the_descriptions_sink():
    heights, depths = {}, {}
    for stiff in (False, True):
        backend = MujocoBackend(Perturbation(stiff_feet=stiff))
        heights[stiff] = run(backend, 1.0).base_pos[2]  # held in the default pose
        depths[stiff] = -min(c.dist for c in backend.data.contact[: backend.data.ncon])
    assert depths[False] > 0.010  # the description's feet: ~17 mm into the ground
    assert depths[True] < 0.003
    assert heights[True] - heights[False] > 0.008
    model = MujocoBackend().model  # the flag changes a copy only
    foot = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, spec.FOOT_NAMES[0])
    assert model.geom_solimp[foot][2] == pytest.approx(0.031)
