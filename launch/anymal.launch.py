"""ROS 2 launch file of the deployment graph: sim_robot, policy_node, recorder, command_source.

    ros2 launch loco_policy anymal.launch.py use_sim:=true backend:=mujoco record:=true

The node list comes from loco_policy.bringup.launch_graph, which `loco-launch` uses too, so
both start the same graph from the same config/*.yaml and arguments. One difference: on a ROS 2
install the description publisher (use_sim:=false, or description:=true) is the standard
robot_state_publisher with the package's URDF as its robot_description parameter, in place of
loco_policy's thin robot_description node.
"""

from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription
from loco_policy import description
from loco_policy.bringup import launch_graph


def _node(node):
    if node.name == 'robot_description':
        return Node(
            package='robot_state_publisher',
            executable='robot_state_publisher',
            name='robot_state_publisher',
            parameters=[{'robot_description': description.load_urdf()}],
            output='screen',
        )
    return Node(
        package=launch_graph.PACKAGE,
        executable=node.name,
        name=node.name,
        parameters=[node.params_file, node.overrides],
        output='screen',
        emulate_tty=True,
    )


def _nodes(context):
    args = {name: LaunchConfiguration(name).perform(context) for name in launch_graph.ARGUMENTS}
    return [_node(node) for node in launch_graph.node_graph(args)]


def generate_launch_description():
    arguments = [
        DeclareLaunchArgument(name, default_value=default, description=text)
        for name, (default, text) in launch_graph.ARGUMENTS.items()
    ]
    return LaunchDescription([*arguments, OpaqueFunction(function=_nodes)])
