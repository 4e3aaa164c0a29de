"""The actuator model: parameters and YAML, and sim_robot's MuJoCo backend running it."""

import mujoco
import numpy as np
import pytest
from ruamel.yaml import YAML

from loco_policy import description, spec
from loco_policy.control import joint_command
from loco_policy.sim.backends import hold_command, make_backend, SimBackendError
from loco_train.actuator import model as actuator_model
from loco_train.actuator.model import ActuatorParams


def sine_command(t, amplitude=0.3, frequency=2.0):
    """The hold command with a sine (rad, Hz) on every joint's target, its velocity as qd*."""
    command = hold_command()
    w = 2 * np.pi * frequency
    command.position = spec.DEFAULT_JOINT_POS + amplitude * np.sin(w * t)
    command.velocity = np.full(spec.NUM_JOINTS, amplitude * w * np.cos(w * t))
    return command


def trajectory(backend, seconds, command_at):
    """(steps, 12) joint positions under command_at(t)."""
    out = []
    for k in range(int(round(seconds / backend.dt))):
        backend.step(command_at(k * backend.dt))
        out.append(backend.state().q)
    return np.array(out)


def test_default_backend_reproduces_the_python_pd_on_torque_motors_exactly():
    backend = make_backend('mujoco')
    model = description.load_model()  # the recipe without an actuator model
    data = mujoco.MjData(model)
    data.qpos[:] = description.default_qpos()
    mujoco.mj_forward(model, data)
    expected = []
    for k in range(300):
        command = sine_command(k * model.opt.timestep)
        data.ctrl[:] = joint_command.pd_torque(command, data.qpos[7:], data.qvel[6:])
        mujoco.mj_step(model, data)
        expected.append(data.qpos.copy())
    got = []
    for k in range(300):
        backend.step(sine_command(k * backend.dt))
        got.append(backend.data.qpos.copy())
    assert np.abs(np.array(got) - np.array(expected)).max() <= 1e-12


def test_native_drives_apply_the_pd_law_with_realised_gains_and_the_limit():
    params = ActuatorParams(kp_scale=np.linspace(0.8, 1.2, 12), kd_scale=1.1)
    backend = make_backend('mujoco', actuator=params, fixed_base=True)
    for k in range(200):
        command = sine_command(k * backend.dt, amplitude=0.6, frequency=3.0)
        command.effort = np.full(12, 1.5)
        command.torque_limit = np.full(12, 30.0)  # below the spec's: the command's limit binds
        before = backend.state()
        backend.step(command)
        kp, kd = params.kp_scale * command.kp, params.kd_scale * command.kd
        law = kp * (command.position - before.q) + kd * (command.velocity - before.qd) + 1.5
        np.testing.assert_allclose(backend.state().tau, np.clip(law, -30.0, 30.0), atol=1e-9)
    assert np.abs(backend.state().tau).max() == pytest.approx(30.0)  # the limit was reached


def test_fixed_base_hangs_the_robot_in_the_air():
    backend = make_backend('mujoco', fixed_base=True)
    assert backend.model.nq == spec.NUM_JOINTS
    state = trajectory(backend, 0.5, lambda t: None)
    assert np.abs(state[-1] - spec.DEFAULT_JOINT_POS).max() < 0.1
    final = backend.state()
    assert final.base_pos[2] > 0.9 and np.all(final.base_lin_vel == 0.0)
    assert final.base_lin_acc[2] == pytest.approx(9.81)


def test_friction_holds_a_joint_against_a_torque_below_it():
    def push(t):
        command = joint_command.damping(spec.DEFAULT_JOINT_POS, 0.0)
        command.effort[2] = 10.0  # N m on LF_KFE
        return command

    held = make_backend('mujoco', actuator=ActuatorParams(friction=30.0), fixed_base=True)
    free = make_backend('mujoco', actuator=ActuatorParams(friction=0.1), fixed_base=True)
    q_held, q_free = trajectory(held, 0.5, push), trajectory(free, 0.5, push)
    assert abs(q_held[-1, 2] - spec.DEFAULT_JOINT_POS[2]) < 5e-3
    assert abs(q_free[-1, 2] - spec.DEFAULT_JOINT_POS[2]) > 0.3


def test_delay_shifts_the_response_by_the_delay_even_between_physics_steps():
    delay = 0.0113  # s: 2.26 physics steps
    seconds = 1.0
    plain = trajectory(
        make_backend('mujoco', actuator=ActuatorParams(), fixed_base=True), seconds, sine_command
    )
    late = trajectory(
        make_backend('mujoco', actuator=ActuatorParams(delay=delay), fixed_base=True),
        seconds,
        sine_command,
    )
    dt = 0.005
    t = (np.arange(len(plain)) + 1) * dt
    window = t > 0.3  # past the start transient

    def error(shift):
        shifted = np.stack(
            [np.interp(t[window] - shift, t, plain[:, j]) for j in range(12)], axis=1
        )
        return np.abs(late[window] - shifted).max()

    shifts = np.arange(0.0, 0.025, 0.0001)
    errors = np.array([error(s) for s in shifts])
    best = shifts[np.argmin(errors)]
    assert best == pytest.approx(delay, abs=5e-4)
    assert errors.min() < 0.1 * error(0.0)


def test_yaml_round_trip_and_bad_files(tmp_path):
    params = ActuatorParams(
        kp_scale=np.linspace(0.9, 1.1, 12), kd_scale=1.2, armature=0.02, friction=0.3,
        damping=0.7, delay=0.0113,
    )  # fmt: skip
    document = actuator_model.to_document(params, spec.KP, spec.KD)
    path = tmp_path / 'actuator.yaml'
    with open(path, 'w') as stream:
        YAML().dump(document, stream)
    back = actuator_model.read(str(path))
    for name in ('kp_scale', 'kd_scale', 'armature', 'friction', 'damping'):
        np.testing.assert_allclose(getattr(back, name), getattr(params, name), rtol=1e-12)
    assert back.delay == pytest.approx(0.0113)
    del document['joints']['RH_KFE']
    with open(path, 'w') as stream:
        YAML().dump(document, stream)
    with pytest.raises(ValueError, match='RH_KFE'):
        actuator_model.read(str(path))
    with pytest.raises(ValueError, match='delay'):
        ActuatorParams(delay=0.5)
    with pytest.raises(ValueError, match='does not exist'):
        actuator_model.read(str(tmp_path / 'none.yaml'))


def test_warp_backend_refuses_the_actuator_model():
    with pytest.raises(SimBackendError, match='actuator model'):
        make_backend('warp', actuator=ActuatorParams())


def test_sim_robot_reads_the_actuator_file_and_overrides_its_delay(tmp_path):
    from loco_policy.nodes.sim_robot import _actuator_params

    document = actuator_model.to_document(
        ActuatorParams(friction=0.4, delay=0.01), spec.KP, spec.KD
    )
    path = tmp_path / 'actuator.yaml'
    with open(path, 'w') as stream:
        YAML().dump(document, stream)
    assert _actuator_params('', -1.0) is None
    read = _actuator_params(str(path), -1.0)
    assert read.delay == pytest.approx(0.01) and np.all(read.friction == 0.4)
    assert _actuator_params(str(path), 0.0123).delay == pytest.approx(0.0123)
    with pytest.raises(ValueError, match='actuator_file'):
        _actuator_params('', 0.01)
