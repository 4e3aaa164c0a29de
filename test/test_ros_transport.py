import json
import os
from pathlib import Path
import subprocess
import sys

import pytest

from test.helpers.joint_state_pubsub import expected_message
from test.ros_env import isolated_ros_env

ROOT = Path(__file__).resolve().parents[1]
COUNT = 40


@pytest.mark.ros
def test_joint_states_cross_fast_dds_intact_between_two_processes():
    env = isolated_ros_env('test_ros_transport')
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(ROOT), env.get('PYTHONPATH')]))
    command = [sys.executable, '-m', 'test.helpers.joint_state_pubsub']
    subscriber = subprocess.Popen(
        command + ['subscribe', str(COUNT)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    publisher = subprocess.Popen(
        command + ['publish', str(COUNT)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pub_out, pub_err = publisher.communicate(timeout=60)
        sub_out, sub_err = subscriber.communicate(timeout=60)
    finally:
        for process in (publisher, subscriber):
            if process.poll() is None:
                process.kill()
    assert publisher.returncode == 0, pub_err
    assert subscriber.returncode == 0, sub_err
    received = [json.loads(line) for line in sub_out.splitlines() if line.startswith('{')]
    assert len(received) == COUNT
    for index, message in enumerate(received):
        expected = expected_message(index)
        assert message['frame_id'] == expected['frame_id']
        assert message['stamp'] == expected['stamp']
        assert message['name'] == expected['name']
        for field in ('position', 'velocity', 'effort'):
            assert message[field] == pytest.approx(expected[field], abs=0, rel=0)


@pytest.mark.ros
def test_processes_in_other_domains_do_not_hear_each_other():
    env_a = isolated_ros_env('domain_a')
    env_b = isolated_ros_env('domain_b_x')
    assert env_a['ROS_DOMAIN_ID'] != env_b['ROS_DOMAIN_ID']
    for env in (env_a, env_b):
        env['PYTHONPATH'] = str(ROOT)
    command = [sys.executable, '-m', 'test.helpers.joint_state_pubsub']
    subscriber = subprocess.Popen(
        command + ['subscribe', '1'], cwd=ROOT, env=env_a, stdout=subprocess.PIPE, text=True
    )
    publisher = subprocess.Popen(
        command + ['publish', '1', '4'],
        cwd=ROOT,
        env=env_b,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        publisher.wait(timeout=40)
        subscriber.kill()
        sub_out, _ = subscriber.communicate(timeout=10)
    finally:
        for process in (publisher, subscriber):
            if process.poll() is None:
                process.kill()
    assert publisher.returncode == 1  # never matched a subscriber in its own domain
    assert sub_out.strip() == ''
