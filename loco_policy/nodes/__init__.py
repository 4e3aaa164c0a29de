"""Thin rclpy nodes: parameters, topics, services and timers wired to ROS-free logic."""

import sys

from rcl_interfaces.msg import ParameterDescriptor
import rclpy
from rclpy._rclpy_pybind11 import RCLError
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException


def any_type():
    """A fresh descriptor for a parameter that takes '1', 1 or 1.0 alike.

    The command line and YAML type bare digits as integers ('0' for a float parameter would be
    refused). rclpy writes each parameter's name and type into its descriptor, so every
    declaration needs its own.
    """
    return ParameterDescriptor(dynamic_typing=True)


def steady_clock():
    """The monotonic clock for control timers: a system-clock step (NTP) must not move them."""
    return Clock(clock_type=ClockType.STEADY_TIME)


def run_node(name, factory, refused=(), on_exit=None, args=None, spin=None):
    """Init rclpy, build the node with factory(), spin until Ctrl-C/SIGTERM, shut down; exit code.

    An exception of a type in `refused` (or a parameter of the wrong type) raised while building
    is a refusal to start: its message is printed and the exit code is 2. on_exit(node) runs
    before the node is destroyed.
    spin(node), when given, replaces rclpy.spin(node).
    """
    rclpy.init(args=args)
    try:
        node = factory()
    except (*refused, ParameterException) as error:
        print(f'{name}: {error}', file=sys.stderr, flush=True)
        rclpy.try_shutdown()
        return 2
    try:
        (spin or rclpy.spin)(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except (RCLError, RuntimeError):
        # a publish or a message take racing the shutdown (Ctrl-C destroys the node's entities
        # from rclpy's signal handler) is fine; anything else is not
        if rclpy.ok():
            raise
    finally:
        if on_exit is not None:
            on_exit(node)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0
