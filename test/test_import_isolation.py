"""The robot-side nodes import neither torch nor warp, measured in the running processes.

Each node runs in its own fresh process through its real `main` (run_node, the node's executor,
its parameters), all on one isolated domain as a working graph: sim_robot on MuJoCo feeds
policy_node, which walks the shipped policy and takes a signed /policy/update, command_source
publishes /cmd_vel, the recorder writes a bag, and sac_finetune learns from /replay/transitions.
On SIGINT each driver prints the names in its sys.modules under torch or warp. sac_finetune,
which imports torch, is the control showing that the check can fail.
"""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from loco_policy.control.hot_swap import sign
from loco_policy.nodes.policy_node import SHIPPED_POLICY
from test.helpers.deploy_fixtures import Probe, REPO, ros_env

pytestmark = pytest.mark.ros

NAME = 'test_import_isolation'
KEY = b'import-isolation-update-key-0123456789'
FORBIDDEN = ('torch', 'warp')

DRIVER = (
    'import importlib, json, sys\n'
    'code = importlib.import_module(sys.argv[1]).main(sys.argv[1:])\n'
    'found = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "warp"))\n'
    'loaded = sorted(m for m in ("rclpy", "onnxruntime", "mujoco") if m in sys.modules)\n'
    'print(json.dumps({"exit": code, "modules": found, "loaded": loaded}), flush=True)\n'
)
"""Runs a node module's main until SIGINT, then prints one JSON line (argv: module, ros args)."""

ROBOT_NODES = {
    # name: module; the parameters are set in the graph fixture
    'sim_robot': 'loco_policy.nodes.sim_robot',
    'policy_node': 'loco_policy.nodes.policy_node',
    'command_source': 'loco_policy.nodes.command_source',
    'recorder': 'loco_policy.nodes.recorder',
}


def start_driver(module, params, tmp, name):
    """Start the driver on one node module in its own session; stdout and stderr to files."""
    args = [a for p in params for a in ('-p', p)]
    with open(tmp / f'{name}.out', 'wb') as out, open(tmp / f'{name}.log', 'wb') as log:
        return subprocess.Popen(
            [sys.executable, '-c', DRIVER, module, '--ros-args', *args],
            env=ros_env(NAME), cwd=REPO, stdout=out, stderr=log, start_new_session=True,
        )  # fmt: skip


def wait_log(path, pattern, timeout):
    """Wait until a regular expression matches the file's text; return whether it did."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if re.search(pattern, path.read_text(errors='replace')):
            return True
        time.sleep(0.1)
    return False


def wait_or_kill(proc, timeout):
    """Wait for a process to end; SIGKILL it after timeout (s); return its exit code."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout)


def diagnostics_value(arrays, status_name, key):
    """The newest value of KeyValue `key` in DiagnosticStatus `status_name`, or None."""
    for array in reversed(arrays):
        for status in array.status:
            if status.name == status_name:
                values = {kv.key: kv.value for kv in status.values}
                if key in values:
                    return values[key]
    return None


@pytest.fixture(scope='module')
def graph(tmp_path_factory):
    """Run the graph once; return {node: its driver's JSON, plus 'stdout'} and what it did."""
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import Twist
    from std_msgs.msg import String

    tmp = tmp_path_factory.mktemp('isolation')
    key_file = tmp / 'update.key'
    key_file.write_bytes(KEY)
    candidate = shutil.copy(SHIPPED_POLICY, tmp / 'candidate.onnx')
    params = {
        'sim_robot': ['backend:=mujoco'],
        'policy_node': [f'update_key_file:={key_file}', 'stand_duration:=1.0',
                        'stale_periods:=50.0'],
        'command_source': ['vx:=0.3', 'rate:=20.0'],
        'recorder': [f'output:={tmp / "bag"}'],
        'sac_finetune': [f'store:={tmp / "store"}', f'policy_dir:={tmp / "policies"}',
                         f'update_key_file:={key_file}', 'learning_starts:=100000'],
    }  # fmt: skip
    modules = {**ROBOT_NODES, 'sac_finetune': 'loco_train.nodes.sac_finetune'}
    probe = Probe(NAME)
    arrays, commands = [], []
    probe.node.create_subscription(DiagnosticArray, '/diagnostics', arrays.append, 50)
    probe.node.create_subscription(Twist, '/cmd_vel', commands.append, 10)
    updates = probe.node.create_publisher(String, '/policy/update', 10)
    procs = {n: start_driver(m, params[n], tmp, n) for n, m in modules.items()}
    facts = {}
    try:
        facts['inputs_fresh'] = probe.spin_until(probe.inputs_fresh, 40.0)
        facts['stood'] = probe.call('/policy_node/start')[0] and probe.spin_until(
            lambda: probe.status.get('stand_progress') == 1.0, 10.0
        )
        facts['walked'] = probe.call('/policy_node/start')[0] and probe.spin_until(
            lambda: probe.status.get('mode') == 'WALK', 5.0
        )
        probe.spin(1.0)  # WALK observations for the candidate's checks
        blob = open(candidate, 'rb').read()
        update = {'path': str(candidate), 'sha256': hashlib.sha256(blob).hexdigest(),
                  'version': 1, 'parent_version': 0, 'signature': sign(blob, KEY)}  # fmt: skip
        updates.publish(String(data=json.dumps(update)))
        facts['swapped'] = probe.spin_until(
            lambda: probe.status.get('updates', {}).get('accepted') == 1, 15.0
        )
        facts['commands_heard'] = probe.spin_until(lambda: len(commands) > 0, 10.0)
        heard = lambda: diagnostics_value(arrays, 'sac_finetune', 'transitions_received')  # noqa: E731
        facts['learner_heard_rows'] = probe.spin_until(lambda: int(heard() or 0) > 0, 40.0)
        facts['recording'] = wait_log(tmp / 'recorder.log', r'recording \[', 10.0)
        probe.spin(0.5)
    finally:
        for proc in procs.values():  # one SIGINT each (a second one interrupts the clean-up)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        codes = {n: wait_or_kill(p, 15.0) for n, p in procs.items()}
        probe.close()
    results = {}
    for name in modules:
        lines = (tmp / f'{name}.out').read_text().strip().splitlines()
        log = (tmp / f'{name}.log').read_text(errors='replace')[-3000:]
        try:
            results[name] = json.loads(lines[-1])
        except (IndexError, ValueError):
            results[name] = {'exit': codes[name], 'modules': None, 'log': log}
        results[name]['stdout'] = lines
        results[name]['log'] = log
    return results, facts


@pytest.mark.parametrize('name', list(ROBOT_NODES))
def test_a_robot_node_runs_without_torch_or_warp(graph, name):
    results, facts = graph
    result = results[name]
    assert result['exit'] == 0 and result['modules'] is not None, result['log']
    assert result['modules'] == [], f'{name} imported {result["modules"]}'
    assert 'rclpy' in result['loaded']
    # the node did its work, so its run-time imports (not only its module's) are in the list
    if name == 'sim_robot':
        assert 'mujoco' in result['loaded'] and facts['inputs_fresh'], result['log']
    if name == 'policy_node':
        assert 'onnxruntime' in result['loaded'], result['log']
        assert facts['walked'] and facts['swapped'], (facts, result['log'])
    if name == 'command_source':
        assert facts['commands_heard'], result['log']
    if name == 'recorder':
        assert facts['recording'], result['log']
        assert any('/joint_states' in line for line in result['stdout']), result['stdout']


def test_the_check_sees_torch_in_the_fine_tuning_node(graph):
    results, facts = graph
    result = results['sac_finetune']
    assert result['exit'] == 0 and result['modules'] is not None, result['log']
    assert facts['learner_heard_rows'], result['log']
    assert 'torch' in result['modules']
    assert 'warp' not in result['modules']  # the learner needs no simulator


def test_the_node_modules_are_the_graph_the_launcher_starts():
    from loco_policy.bringup.launch_graph import node_graph, parse_args

    args = parse_args(['record:=true', 'command:=demo'])
    launched = {n.name: n.module for n in node_graph(args)}
    assert launched == ROBOT_NODES
    assert os.path.isfile(SHIPPED_POLICY)
