"""Every console script of setup.py, and every `loco-train` subcommand, answers --help.

Run as the installed executables (the venv's bin/, next to sys.executable), each a subprocess:
exit status 0, a usage line, no traceback. The rclpy nodes print their parameters and exit
without initialising ROS (a node that started would spin until the timeout).
"""

import os
import re
import subprocess
import sys

import pytest

from loco_train.bench import BENCHES
from loco_train.cli import COMMANDS
from test.ros_env import isolated_ros_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
NODES = ('policy_node', 'sim_robot', 'recorder', 'command_source')


def console_scripts():
    """{script name: 'module:function'} declared in setup.py's console_scripts."""
    with open(os.path.join(ROOT, 'setup.py')) as handle:
        text = handle.read()
    block = text[text.index("'console_scripts'") :]
    block = block[: block.index(']')]
    return dict(re.findall(r"'([\w-]+)\s*=\s*([\w.]+:\w+)'", block))


SCRIPTS = console_scripts()
INVOCATIONS = (
    [[name, '--help'] for name in SCRIPTS]
    + [['loco-train'], ['loco-train', '-h']]
    + [['loco-train', name, '--help'] for name in COMMANDS]
    + [['loco-train', 'bench', name, '--help'] for name in BENCHES]
)


def test_setup_declares_the_documented_scripts():
    assert {'loco-train', 'loco-launch', *NODES} <= set(SCRIPTS), SCRIPTS
    for script in SCRIPTS:
        installed = os.access(os.path.join(BIN, script), os.X_OK)
        assert installed, f'{script} is not in {BIN}: reinstall the package (make test does)'


@pytest.mark.parametrize('argv', INVOCATIONS, ids=' '.join)
def test_help_prints_usage_without_a_traceback(argv):
    result = subprocess.run(
        [os.path.join(BIN, argv[0]), *argv[1:]],
        env=isolated_ros_env('console_help_' + '_'.join(argv)),
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert 'Traceback' not in output, output
    assert 'usage' in output.lower(), output
    # no subcommand: the overview, and status 2 as argparse gives for a missing argument
    assert result.returncode == (2 if argv == ['loco-train'] else 0), output
    if argv[0] == 'loco-train' and len(argv) <= 2:
        assert all(name in output for name in COMMANDS), output


@pytest.mark.parametrize('node', NODES)
def test_a_node_help_names_its_parameters_file_and_the_parameters(node):
    result = subprocess.run(
        [os.path.join(BIN, node), '--help'],
        env=isolated_ros_env('console_help_params_' + node),
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    config = os.path.join('config', f'{node}.yaml')
    assert config in result.stdout and '--params-file' in result.stdout
    with open(os.path.join(ROOT, config)) as handle:
        names = re.findall(r'^\s{4}(\w+):', handle.read(), flags=re.M)
    assert names and all(f'{name}:' in result.stdout for name in names), result.stdout
