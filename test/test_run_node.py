"""run_node's reading of a Ctrl-C: inside a C++ call, and while the node is being built."""

import os
import signal
import subprocess
import sys

import pytest

from loco_policy.nodes import interrupted


def raised_inside_conversion():
    """What pybind11 does when Ctrl-C lands in a Python callback it called: a TypeError."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as inner:
            raise TypeError('Unable to convert function return value') from inner
    except TypeError as error:
        return error


def test_a_ctrl_c_converted_by_a_binding_counts_as_an_interrupt():
    assert interrupted(raised_inside_conversion())
    assert interrupted(KeyboardInterrupt())


def test_a_plain_error_is_not_an_interrupt():
    try:
        try:
            raise ValueError('bad frame')
        except ValueError:
            raise TypeError('while handling') from None  # no interrupt in the chain
    except TypeError as error:
        assert not interrupted(error)
    assert not interrupted(RuntimeError('x'))


SLOW_NODE = """
import signal, sys, time
import rclpy
from loco_policy.nodes import run_node

# as a node the launcher starts (a shell's background job would inherit SIGINT ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)

def build():
    print('building', flush=True)
    time.sleep(3)  # a slow import or file load; the stop signal lands here
    return rclpy.create_node('slow_node')

sys.exit(run_node('slow_node', build, args=[]))
"""


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_while_the_node_is_built_is_a_clean_stop(sig):
    from test.helpers.deploy_fixtures import ros_env

    proc = subprocess.Popen(
        [sys.executable, '-c', SLOW_NODE], env=ros_env('slow_node'), cwd=os.getcwd(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == 'building'
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert 'Traceback' not in err
