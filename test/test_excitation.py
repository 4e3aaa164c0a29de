"""Excitation: the schedule stays inside the limits; the node refuses without identification mode
and, with sim_robot hanging, its commands and the joint states are recorded to a bag."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from loco_policy import spec
from loco_train.actuator import bag_reader
from loco_train.actuator.excitation import Excitation, ExcitationConfig, KINDS
from test.helpers.deploy_fixtures import ros_env, start_node, stop_process


@pytest.mark.parametrize('kind', KINDS)
def test_schedule_stays_inside_joint_margins_and_torque_limits(kind):
    config = ExcitationConfig(duration=20.0, kind=kind, amplitude=0.5)  # asks for too much
    schedule = Excitation(config)
    t = np.arange(-0.5, 21.0, 0.001)
    q, qd = schedule.targets(t)
    low = spec.JOINT_POS_LIMITS[:, 0] + config.margin
    high = spec.JOINT_POS_LIMITS[:, 1] - config.margin
    assert np.all(q >= low - 1e-12) and np.all(q <= high + 1e-12)
    w = {'chirp': 2 * np.pi * config.f_end, 'mixed': 2 * np.pi * config.f_end, 'steps': 0.0,
         'ramps': 4.0 / config.ramp_period}[kind]  # fmt: skip
    worst = spec.KP * 2 * schedule.amplitude + spec.KD * 2 * schedule.amplitude * w
    assert np.all(worst <= config.torque_fraction * spec.TORQUE_LIMIT + 1e-9)
    assert np.all(schedule.amplitude > 0.01)  # still moves every joint
    moving = (t >= 0) & (t < config.duration)
    assert np.all(q[moving].std(axis=0) > 0.2 * schedule.amplitude)
    rest = (t < 0) | (t >= config.duration)
    np.testing.assert_allclose(q[rest], np.broadcast_to(spec.DEFAULT_JOINT_POS, q[rest].shape))
    assert np.all(qd[rest] == 0)
    if kind != 'steps':  # qd* is the derivative of q* (steps: zero between the jumps)
        inside = moving[1:] & moving[:-1]
        numeric = np.diff(q, axis=0) / 0.001
        near = np.minimum(np.abs(numeric - qd[1:]), np.abs(numeric - qd[:-1]))
        jumps = near.max(axis=1) > 0.05 * np.abs(qd).max()  # segment edges, chirp's fastest
        assert np.median(near[inside], axis=0).max() < 1e-3 * np.abs(qd).max()
        assert jumps.sum() < 0.01 * inside.sum()


def test_schedule_refuses_bad_settings():
    with pytest.raises(ValueError, match='kind'):
        Excitation(ExcitationConfig(kind='noise'))
    with pytest.raises(ValueError, match='f_end'):
        Excitation(ExcitationConfig(f_start=5.0, f_end=1.0))


@pytest.mark.ros
def test_node_refuses_without_identification_mode(request, tmp_path):
    env = ros_env(request.node.name)
    result = subprocess.run(
        [sys.executable, '-m', 'loco_policy.nodes.excitation', '--ros-args',
         '-p', 'duration:=1.0'],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert 'identification_mode' in result.stderr and 'refusing' in result.stderr


@pytest.mark.ros
def test_hanging_sim_robot_excited_and_recorded(request, tmp_path):
    env = ros_env(request.node.name)
    sim = start_node('sim_robot', ['-p', 'fixed_base:=true', '-p', 'publish_description:=false'],
                     env, tmp_path / 'sim.log')  # fmt: skip
    bag = tmp_path / 'bag'
    recorder = start_node(
        'recorder',
        ['-p', f'output:={bag}', '-p', "topics:=['/joint_command', '/joint_states']",
         '-p', 'flush_period:=0.2'],
        env, tmp_path / 'recorder.log',
    )  # fmt: skip
    excitation = start_node(
        'excitation',
        ['-p', 'identification_mode:=true', '-p', 'duration:=2.0', '-p', 'hold_after:=0.3',
         '-p', 'wait_for_subscribers:=2'],
        env, tmp_path / 'excitation.log',
    )  # fmt: skip
    try:
        code = excitation.wait(30)
        time.sleep(0.5)
    finally:
        stop_process(excitation)
        stop_process(recorder)
        stop_process(sim)
    log = (tmp_path / 'excitation.log').read_text()
    assert code == 0, log
    assert 'excitation finished' in log
    splits = [os.path.join(bag, n) for n in sorted(os.listdir(bag))]
    assert splits, (tmp_path / 'recorder.log').read_text()
    segments = bag_reader.read(str(bag))
    longest = max(segments, key=lambda s: s.duration)
    assert longest.duration > 1.5
    np.testing.assert_allclose(longest.kp, spec.KP)
    motion = longest.q.max(axis=0) - longest.q.min(axis=0)
    assert np.all(motion > 0.02), motion  # every joint followed the schedule
    assert np.abs(longest.cmd_qd).max() > 0.1  # velocity targets carried
