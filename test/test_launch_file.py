"""launch/anymal.launch.py: loaded with launch_ros where it is installed, compiled everywhere."""

import importlib.util
import os

import pytest

from loco_policy.bringup import launch_graph

LAUNCH_FILE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'launch', 'anymal.launch.py'
)


def test_launch_file_compiles_and_declares_the_graph_arguments():
    source = open(LAUNCH_FILE).read()
    compile(source, LAUNCH_FILE, 'exec')
    assert 'launch_graph.node_graph' in source and 'DeclareLaunchArgument' in source
    assert {'use_sim', 'backend', 'policy', 'record'} <= set(launch_graph.ARGUMENTS)


@pytest.mark.skipif(
    importlib.util.find_spec('launch_ros') is None,
    reason='launch_ros is not installable from the package registries (ROS 2 install only)',
)
def test_launch_description_loads_with_launch_ros():
    from launch.actions import DeclareLaunchArgument, OpaqueFunction

    from launch import LaunchContext

    spec = importlib.util.spec_from_file_location('anymal_launch', LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    declared = [e.name for e in description.entities if isinstance(e, DeclareLaunchArgument)]
    assert declared == list(launch_graph.ARGUMENTS)
    context = LaunchContext()
    for name, (default, _) in launch_graph.ARGUMENTS.items():
        context.launch_configurations[name] = default
    context.launch_configurations['record'] = 'true'
    opaque = [e for e in description.entities if isinstance(e, OpaqueFunction)][0]
    nodes = opaque.execute(context)
    assert [n.node_executable for n in nodes] == ['sim_robot', 'policy_node', 'recorder']
