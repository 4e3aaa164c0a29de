import os

import pytest
import yaml

from loco_policy.bringup import launch_graph


def names(nodes):
    return [n.name for n in nodes]


def test_default_graph_is_sim_robot_and_policy_node_with_config_files():
    nodes = launch_graph.node_graph(launch_graph.parse_args([]))
    assert names(nodes) == ['sim_robot', 'policy_node']
    for node in nodes:
        with open(node.params_file) as handle:
            assert 'ros__parameters' in yaml.safe_load(handle)[node.name]
    assert nodes[0].overrides == {'backend': 'mujoco'} and nodes[1].overrides == {}


def test_arguments_select_nodes_and_parameters():
    args = launch_graph.parse_args(
        ['use_sim:=false', 'policy:=', 'record:=true', 'bag:=/tmp/b', 'command:=demo']
    )
    nodes = launch_graph.node_graph(args)
    assert names(nodes) == ['robot_description', 'policy_node', 'recorder', 'command_source']
    assert nodes[1].overrides == {'policy': ''} and nodes[2].overrides == {'output': '/tmp/b'}
    assert nodes[3].overrides['schedule'].startswith('stand:4:0,0,0;forward:8:0.6,0,0')


def test_perturbed_drives_reach_sim_robot(tmp_path):
    truth = tmp_path / 'truth.yaml'
    truth.write_text('delay: 0.01\n')
    args = ['payload:=5', 'gain_scale:=0.8', 'latency:=0.03', f'actuator:={truth}']
    sim = launch_graph.node_graph(launch_graph.parse_args(args))[0]
    assert sim.overrides == {
        'backend': 'mujoco', 'payload': 5.0, 'gain_scale': 0.8, 'latency': 0.03,
        'actuator_file': str(truth),
    }  # fmt: skip
    with pytest.raises(ValueError, match='latency:=soon must be a number'):
        launch_graph.node_graph(launch_graph.parse_args(['latency:=soon']))
    with pytest.raises(ValueError, match='needs backend:=mujoco'):
        launch_graph.node_graph(launch_graph.parse_args([*args, 'backend:=warp']))
    with pytest.raises(FileNotFoundError, match='actuator:='):
        launch_graph.node_graph(launch_graph.parse_args([f'actuator:={tmp_path}/none.yaml']))
    # the commands the drives took in, for fit-actuator and stack_eval's delay
    sim = launch_graph.node_graph(launch_graph.parse_args(['applied:=true']))[0]
    assert sim.overrides == {'backend': 'mujoco', 'publish_applied': True}
    plain = launch_graph.node_graph(launch_graph.parse_args([]))[0]
    assert 'publish_applied' not in plain.overrides
    with pytest.raises(ValueError, match='applied:=maybe must be true or false'):
        launch_graph.node_graph(launch_graph.parse_args(['applied:=maybe']))


def test_one_description_publisher_in_every_graph():
    def graph(*argv):
        nodes = launch_graph.node_graph(launch_graph.parse_args(list(argv)))
        return {n.name: n.overrides for n in nodes}

    assert 'robot_description' not in graph()  # sim_robot publishes it
    assert 'robot_description' in graph('use_sim:=false')  # the robot PC
    assert 'robot_description' not in graph('use_sim:=false', 'description:=false')
    both = graph('description:=true')
    assert both['sim_robot'] == {'backend': 'mujoco', 'publish_description': False}
    assert both['robot_description'] == {}
    with pytest.raises(ValueError, match='auto, true or false'):
        graph('description:=maybe')


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown argument 'speed'"):
        launch_graph.parse_args(['speed:=3'])
    with pytest.raises(ValueError, match='not name:=value'):
        launch_graph.parse_args(['record=true'])
    with pytest.raises(ValueError, match='true or false'):
        launch_graph.node_graph(launch_graph.parse_args(['record:=maybe']))
    with pytest.raises(ValueError, match='mujoco or warp'):
        launch_graph.node_graph(launch_graph.parse_args(['backend:=gazebo']))
    with pytest.raises(ValueError, match='schedule segment'):
        launch_graph.node_graph(launch_graph.parse_args(['command:=fast']))


def test_every_config_file_is_in_node_form():
    folder = launch_graph.config_dir()
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as handle:
            content = yaml.safe_load(handle)
        assert list(content) == [name[: -len('.yaml')]] and 'ros__parameters' in content[name[:-5]]
