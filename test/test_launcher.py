"""loco-launch as a real process group: Ctrl-C and SIGTERM leave no node process alive."""

import io
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from loco_policy.bringup.launch_graph import node_graph, NodeSpec, parse_args
from loco_policy.bringup.launcher import command_line, Launcher
from loco_policy.tools.bag_writer import list_splits
from test.helpers.deploy_fixtures import ros_env

pytestmark = pytest.mark.ros


def launch(name, tmp_path, *args):
    log = open(tmp_path / 'launch.log', 'w+b')
    proc = subprocess.Popen(
        [sys.executable, '-m', 'loco_policy.bringup.launcher', *args],
        env=ros_env(name), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    return proc, tmp_path / 'launch.log'


def wait_for(path, pattern, count, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = re.findall(pattern, path.read_text())
        if len(found) >= count:
            return found
        time.sleep(0.1)
    raise AssertionError(f'{pattern!r} x{count} not in:\n{path.read_text()}')


def alive(pid):
    try:
        os.killpg(pid, 0)  # any process left in the node's own process group?
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_stops_every_node_and_closes_the_bag(request, tmp_path):
    bag = tmp_path / 'bag'
    proc, log = launch(request.node.name, tmp_path, 'record:=true', f'bag:={bag}', "policy:=''")
    try:
        pids = [int(p) for p in wait_for(log, r'started \w+ \(pid (\d+)\)', 3)]
        wait_for(log, r'\[recorder\] .*recording', 1)
        wait_for(log, r'\[sim_robot\] .*publishing at', 1)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends to the foreground group
        assert proc.wait(20) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not any(alive(pid) for pid in pids)
    text = log.read_text()
    assert '[policy_node] [WARN]' in text and '[sim_robot] [INFO]' in text  # prefixed output
    assert "exit codes {'sim_robot': 0, 'policy_node': 0, 'recorder': 0}" in text
    assert len(list_splits(str(bag))) == 1  # the recorder closed its split on SIGINT


def test_sigterm_stops_every_node(request, tmp_path):
    proc, log = launch(request.node.name, tmp_path, 'use_sim:=false', 'command:=demo')
    try:
        pids = [int(p) for p in wait_for(log, r'started \w+ \(pid (\d+)\)', 2)]
        wait_for(log, r'\[command_source\] .*segment stand', 1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not any(alive(pid) for pid in pids)


def test_a_failing_node_stops_the_graph_with_its_exit_code(request, tmp_path):
    env = ros_env(request.node.name)
    env['ROS_DOMAIN_ID'] = '300'  # beyond Fast DDS's port range: every node fails at start
    log = open(tmp_path / 'launch.log', 'w+b')
    proc = subprocess.Popen(
        [sys.executable, '-m', 'loco_policy.bringup.launcher', 'use_sim:=false', 'command:=demo'],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = (tmp_path / 'launch.log').read_text()
    assert code != 0 and re.search(r'\[loco-launch\] \w+ exited with code', text), text
    assert 'stopped: exit codes' in text
    pids = [int(p) for p in re.findall(r'started \w+ \(pid (\d+)\)', text)]
    assert len(pids) == 3 and not any(alive(pid) for pid in pids)  # + robot_description


def test_command_lines_use_the_config_and_quote_parameters():
    nodes = node_graph(parse_args(["policy:=''", 'record:=true']))
    argv = command_line(nodes[1])
    assert argv[1:3] == ['-m', 'loco_policy.nodes.policy_node']
    assert argv[argv.index('--params-file') + 1].endswith('config/policy_node.yaml')
    assert argv[-2:] == ['-p', 'policy:=""']
    assert (
        subprocess.run(
            [sys.executable, '-m', 'loco_policy.bringup.launcher', 'speed:=3'], capture_output=True
        ).returncode
        == 2
    )


def test_nodes_end_when_the_launcher_is_killed(request, tmp_path):
    proc, log = launch(request.node.name, tmp_path, 'use_sim:=false', "policy:=''")
    try:
        pids = [int(p) for p in wait_for(log, r'started \w+ \(pid (\d+)\)', 1)]
        wait_for(log, r'\[policy_node\] .*policy:', 1)
        proc.kill()  # SIGKILL: no chance to forward anything; PR_SET_PDEATHSIG does it
        proc.wait(5)
        end = time.monotonic() + 20.0  # s; generous on a loaded machine
        while any(alive(pid) for pid in pids) and time.monotonic() < end:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in pids)
    finally:
        for pid in re.findall(r'started \w+ \(pid (\d+)\)', log.read_text()):
            if alive(int(pid)):
                os.killpg(int(pid), signal.SIGKILL)


class _AffinityProbe(NodeSpec):
    """A 'node' that prints the CPUs it started on and exits."""

    @property
    def module(self):
        return 'test.helpers.print_affinity'


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason='needs two CPUs to tell them apart')
def test_a_node_starts_pinned_to_its_cpu_affinity(tmp_path, monkeypatch):
    # Pinned from exec, not after its imports: torch's import alone is seconds of CPU.
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    every = sorted(os.sched_getaffinity(0))
    cpu = every[-1]
    params = tmp_path / 'probe.yaml'
    params.write_text(f"probe:\n  ros__parameters:\n    cpu_affinity: '{cpu}'\n")
    nodes = [
        _AffinityProbe('from_file', str(params)),
        _AffinityProbe('override', str(params), {'cpu_affinity': ''}),
        _AffinityProbe('malformed', str(params), {'cpu_affinity': 'x'}),
        _AffinityProbe('no_file', str(tmp_path / 'missing.yaml')),
    ]
    out = io.StringIO()
    launcher = Launcher(nodes, out=out)
    launcher.start()
    deadline = time.monotonic() + 30.0
    while out.getvalue().count(' cpus ') < len(nodes) and time.monotonic() < deadline:
        time.sleep(0.05)
    for proc in launcher.procs.values():
        assert proc.wait(timeout=10) == 0
    lines = dict(re.findall(r'\[(\w+)\] cpus ([\d ]+)', out.getvalue()))
    free = ' '.join(map(str, every))
    assert lines == {'from_file': str(cpu), 'override': free, 'malformed': free, 'no_file': free}
    assert f'CPUs {cpu})' in out.getvalue()  # the launcher says where it started it
