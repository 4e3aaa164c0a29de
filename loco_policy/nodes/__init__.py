"""Thin rclpy nodes: parameters, topics, services and timers wired to ROS-free logic."""

import os
import signal
import sys
import textwrap

from rcl_interfaces.msg import ParameterDescriptor
import rclpy
from rclpy._rclpy_pybind11 import RCLError
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException
from rclpy.signals import SignalHandlerOptions

from loco_policy.tools import missing_dependency


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


def wants_help(argv):
    """True when -h or --help comes before --ros-args in argv (sys.argv form, program first)."""
    user = list(argv[1:])
    user = user[: user.index('--ros-args')] if '--ros-args' in user else user
    return '-h' in user or '--help' in user


def node_help(name, doc):
    """The --help text of a node: usage, its docstring, its parameters from config/<name>.yaml."""
    from loco_policy.bringup.launch_graph import config_dir

    usage = (
        f'usage: {name} [-h] [--ros-args [--params-file FILE] [-p NAME:=VALUE ...] '
        '[-r FROM:=TO ...]]'
    )
    lines = [usage, '', (doc or '').strip(), '']
    try:
        path = os.path.join(config_dir(), f'{name}.yaml')
        with open(path) as handle:
            text = handle.read().splitlines()
    except OSError as error:
        return '\n'.join(lines + [f'parameters: config/{name}.yaml not found ({error})'])
    lines.append(f'parameters and their defaults ({path}; loco-launch passes this file):')
    first = next((i + 1 for i, line in enumerate(text) if 'ros__parameters:' in line), 0)
    table = textwrap.dedent('\n'.join(text[first:])).strip('\n')  # keeps the comments' columns
    return '\n'.join(lines + [textwrap.indent(table, '  ')])


def interrupted(error):
    """True when a KeyboardInterrupt is in error's chain of causes (raise ... from, or during)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def _raise_interrupt(signum, frame):
    """SIGTERM handler: stop like Ctrl-C, in the main thread, with the ROS context still up."""
    raise KeyboardInterrupt(f'signal {signum}')


def run_node(name, factory, refused=(), on_exit=None, args=None, spin=None, own_signals=False):
    """Init rclpy, build the node with factory(), spin until Ctrl-C/SIGTERM, shut down; exit code.

    -h or --help (before --ros-args) prints node_help and returns 0 without starting ROS. An
    exception of a type in `refused` (or a parameter of the wrong type) raised while building
    is a refusal to start: its message is printed and the exit code is 2; so is a missing module
    of a requirement group (one line naming the group). A stop signal while building returns 0.
    on_exit(node) runs before the node is destroyed.
    spin(node), when given, replaces rclpy.spin(node).
    own_signals: SIGINT and SIGTERM raise KeyboardInterrupt in the main thread instead of going
    to rclpy's handler, which shuts the ROS context down at once; so on_exit can still publish
    (policy_node's last command: damping). The spin must wake up now and then (bounded waits)
    for Python to run the handler.
    """
    if wants_help(sys.argv if args is None else args):
        print(node_help(name, sys.modules[factory.__module__].__doc__))
        return 0
    if own_signals:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _raise_interrupt)
    else:
        rclpy.init(args=args)
    try:
        node = factory()
    except BaseException as error:
        # Ctrl-C while the node is being built (a slow import such as onnxruntime's re-raises
        # it as ImportError), or SIGTERM (rclpy's handler shuts the context down, and the next
        # rclpy call fails), is a stop request, not a failure
        stopping = interrupted(error) or not rclpy.ok()
        rclpy.try_shutdown()
        if stopping:
            return 0
        if isinstance(error, ModuleNotFoundError):
            line = missing_dependency.from_error(error, name, prefer=('deploy', 'sim', 'tools'))
            if line is None:
                raise
            print(line, file=sys.stderr, flush=True)
            return 2
        if isinstance(error, (*refused, ParameterException)):
            print(f'{name}: {error}', file=sys.stderr, flush=True)
            return 2
        raise
    try:
        (spin or rclpy.spin)(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as error:
        # a publish or a message take racing the shutdown (Ctrl-C destroys the node's entities
        # from rclpy's signal handler), or Ctrl-C landing inside a C++ call that re-raised it
        # as another type (pybind11 turns it into TypeError), is fine; anything else is not
        racing = isinstance(error, (RCLError, RuntimeError)) and not rclpy.ok()
        # Ctrl-C during a take's argument conversion: pybind11 re-raises it as this RuntimeError
        # while the context may still be up (seen in sim_robot at the launcher's SIGINT)
        racing = racing or 'Unable to convert call argument' in str(error)
        if not (racing or interrupted(error)):
            raise
    finally:
        if on_exit is not None:
            on_exit(node)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0
