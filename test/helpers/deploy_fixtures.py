"""Test helpers for the deployment side: ONNX policy files and isolated ROS 2 environments."""

import json
import os

import numpy as np

from loco_policy import spec
from loco_policy.tools.node_process import start_node, stop_process  # noqa: F401 (re-exported)
from loco_policy.tools.random_policy import write_random_policy
from test.ros_env import isolated_ros_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def contract_metadata(**overrides):
    """Return the spec's policy metadata as JSON-ready values (digest filled later), overridden."""
    provenance = {
        'algorithm': 'test-random-mlp',
        'iterations': 0,
        'return': 0.0,
        'code_revision': 'test',
        'created': '2026-11-30T00:00:00Z',
        'weights_sha256': None,
    }
    meta = spec.contract_metadata(provenance)
    meta.update(overrides)
    return meta


def make_policy_file(path, **kwargs):
    """Write a random-weight ONNX policy file with the full contract; return the path."""
    return write_random_policy(path, **kwargs)


def ros_env(name):
    """Environment for an isolated ROS 2 process (own domain id, localhost) importing the repo."""
    env = isolated_ros_env(name)
    env['PYTHONUNBUFFERED'] = '1'
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [REPO, env.get('PYTHONPATH')]))
    return env


class Probe:
    """An rclpy node in the test process, on the test's own domain: status, commands, services."""

    def __init__(self, name):
        """Join the isolated domain of test `name` and subscribe to the policy node's outputs."""
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float32MultiArray, String

        env = isolated_ros_env(name)
        os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = env['ROS_AUTOMATIC_DISCOVERY_RANGE']
        self.rclpy = rclpy
        self.context = Context()
        rclpy.init(context=self.context, domain_id=int(env['ROS_DOMAIN_ID']))
        self.node = rclpy.create_node('probe', context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.status, self.statuses, self.commands, self.batches = {}, [], [], []
        self.clients = {}  # service name -> client, reused
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(String, '/policy/status', self._on_status, latched)
        self.node.create_subscription(JointState, '/joint_command', self._on_command, 50)
        self.node.create_subscription(
            Float32MultiArray, '/replay/transitions', self.batches.append, reliable
        )

    def _on_status(self, msg):
        self.status = json.loads(msg.data)
        self.statuses.append(self.status)

    def _on_command(self, msg):
        import time

        self.commands.append(
            (msg.header.frame_id, list(msg.name), list(msg.position), list(msg.velocity),
             list(msg.effort), time.monotonic())
        )  # fmt: skip

    def spin(self, seconds):
        """Process callbacks for `seconds`."""
        import time

        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.01)

    def spin_until(self, predicate, timeout):
        """Spin until predicate() is true or timeout (s); return whether it became true."""
        import time

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return True
            self.executor.spin_once(timeout_sec=0.01)
        return bool(predicate())

    def call(self, service, timeout=10.0):
        """Call a std_srvs/Trigger service; return (success, message)."""
        from std_srvs.srv import Trigger

        if service not in self.clients:
            self.clients[service] = self.node.create_client(Trigger, service)
        client = self.clients[service]
        # wait while spinning: the fake robot's sensor timers live on this executor, and a
        # blocking wait_for_service would starve them and trip the node's watchdog
        if not self.spin_until(client.service_is_ready, timeout):
            return False, f'{service} unavailable'
        future = client.call_async(Trigger.Request())
        self.executor.spin_until_future_complete(future, timeout_sec=timeout)
        result = future.result()
        return (result.success, result.message) if result else (False, 'no response')

    def set_bool(self, node, name, value, timeout=10.0):
        """Set a boolean parameter of another node; return whether it was accepted."""
        from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
        from rcl_interfaces.srv import SetParameters

        service = f'/{node}/set_parameters'
        if service not in self.clients:
            self.clients[service] = self.node.create_client(SetParameters, service)
        client = self.clients[service]
        if not self.spin_until(client.service_is_ready, timeout):  # keep the fake robot alive
            return False
        value = ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=value)
        future = client.call_async(
            SetParameters.Request(parameters=[Parameter(name=name, value=value)])
        )
        self.executor.spin_until_future_complete(future, timeout_sec=timeout)
        return bool(future.result() and future.result().results[0].successful)

    def inputs_fresh(self):
        """True when the policy node reports every input younger than 60 ms."""
        ages = self.status.get('input_age_ms') or {}
        return bool(ages) and all(a is not None and a < 60 for a in ages.values())

    def close(self):
        """Destroy the node and shut this context down."""
        self.executor.shutdown()
        self.node.destroy_node()
        self.rclpy.try_shutdown(context=self.context)


def all_finite(commands):
    """True when every number of every recorded /joint_command is finite."""
    return all(np.all(np.isfinite(np.r_[c[2], c[3], c[4]])) for c in commands)


def publish_damping(probe, publisher, seconds):
    """Publish a damping-only /joint_command (kp 0, kd 2) every 20 ms for `seconds`."""
    import time

    from sensor_msgs.msg import JointState

    from loco_policy import spec
    from loco_policy.control import joint_command

    names, pos, vel, eff = joint_command.pack(joint_command.damping(spec.DEFAULT_JOINT_POS, 2.0))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        publisher.publish(JointState(name=names, position=pos, velocity=vel, effort=eff))
        probe.spin(0.02)
