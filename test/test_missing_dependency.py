"""A missing optional module: one line naming its requirement group, never a traceback.

The entry points run as real subprocesses with modules hidden (`sys.modules[name] = None` makes
`import name` raise ModuleNotFoundError, as on an install without that group).
"""

import os
import subprocess
import sys

import pytest

from loco_policy.tools import missing_dependency
from test.ros_env import isolated_ros_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_hidden(hidden, entry, argv, name):
    """Run `from module import function; function(argv)` with `hidden` modules unimportable."""
    module, function = entry.split(':')
    code = (
        'import sys\n'
        f'for name in {list(hidden)!r}:\n'
        '    sys.modules[name] = None\n'
        f'sys.argv = {argv!r}\n'
        f'from {module} import {function}\n'
        f'sys.exit({function}({argv[1:]!r}))\n'
    )
    return subprocess.run(
        [sys.executable, '-c', code], env=isolated_ros_env(name), cwd=ROOT,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def assert_one_line(result, module, group):
    """Exit status 2, and stderr is one line naming the module, its group and the command."""
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert 'Traceback' not in output, output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert f"'{module}' is missing" in lines[0] and f'the {group} requirements' in lines[0]
    assert f'pip install -r requirements/{group}.txt' in lines[0], lines[0]


@pytest.mark.parametrize(
    'module, prefer, group, requirement',
    [
        ('torch', (), 'train', 'torch==2.13.0'),
        ('warp', (), 'train', 'warp-lang==1.19.0'),
        ('rsl_rl.env', (), 'train', 'rsl-rl-lib==5.5.1'),
        ('imageio', ('train',), 'train', 'gymnasium[mujoco]==1.4.0'),  # an extra's dependency
        ('rosbags', (), 'tools', 'rosbags==0.11.9'),
        ('matplotlib', ('tools',), 'tools', 'matplotlib==3.11.2'),
        ('matplotlib', ('train',), 'train', 'matplotlib==3.11.2'),
        ('rclpy', (), 'deploy', 'ros-kilted-rclpy==9.1.2'),
        ('yaml', (), 'deploy', 'pyyaml==6.0.4'),
    ],
)
def test_a_module_maps_to_the_group_whose_requirement_brings_it(
    module, prefer, group, requirement
):
    assert missing_dependency.find_group(module, prefer) == (group, requirement)


def test_a_module_of_no_group_is_not_explained_away():
    assert missing_dependency.find_group('no_such_module_anywhere') is None
    assert missing_dependency.message('no_such_module_anywhere', 'x') is None


def test_loco_train_overview_needs_no_training_dependency():
    result = run_hidden(
        ('torch', 'warp', 'rsl_rl', 'gymnasium', 'onnx'), 'loco_train.cli:main',
        ['loco-train', '--help'], 'missing_overview',
    )  # fmt: skip
    assert result.returncode == 0 and 'usage: loco-train' in result.stdout, result.stderr
    assert 'Traceback' not in result.stdout + result.stderr


@pytest.mark.parametrize('command', ['shac', 'sac', 'export'])
def test_loco_train_without_torch_says_install_train(command):
    result = run_hidden(('torch',), 'loco_train.cli:main', ['loco-train', command], command)
    assert_one_line(result, 'torch', 'train')
    assert result.stderr.startswith(f'loco-train {command}:')


def test_a_gymnasium_mujoco_task_without_imageio_names_the_extra():
    result = run_hidden(
        ('imageio',), 'loco_train.cli:main',
        ['loco-train', 'sac', '--env', 'gymnasium:Hopper-v5', '--total-steps', '100'],
        'missing_imageio',
    )  # fmt: skip
    assert_one_line(result, 'imageio', 'train')
    assert 'gymnasium[mujoco]==1.4.0' in result.stderr


def test_the_demo_without_matplotlib_says_install_tools_before_starting(tmp_path):
    result = run_hidden(
        ('matplotlib',), 'loco_policy.tools.demo:main',
        ['demo', '--out', str(tmp_path / 'demo')], 'missing_matplotlib',
    )  # fmt: skip
    assert_one_line(result, 'matplotlib', 'tools')
    assert not (tmp_path / 'demo').exists()  # refused before the stack was started


def test_a_node_without_its_simulator_says_install_sim():
    # sim_robot imports MuJoCo when it builds its backend: run_node turns that into one line
    result = run_hidden(
        ('mujoco',), 'loco_policy.nodes.sim_robot:main', ['sim_robot'], 'missing_mujoco'
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2 and 'Traceback' not in output, output
    lines = [line for line in result.stderr.splitlines() if 'is missing' in line]
    assert lines == [result.stderr.strip().splitlines()[-1]], output  # one line, the last
    assert lines[0].startswith("sim_robot: the Python module 'mujoco' is missing")
    assert 'pip install -r requirements/sim.txt' in lines[0]


def test_the_recorder_without_rosbags_says_install_tools():
    # the recorder imports its bag modules before it creates the node: nothing starts
    result = run_hidden(('rosbags',), 'loco_policy.nodes.recorder:main', ['recorder'], 'rosbags')
    assert_one_line(result, 'rosbags', 'tools')
    assert result.stderr.startswith('recorder:')
