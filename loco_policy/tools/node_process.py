"""A node as a child process: start `python -m loco_policy.nodes.<name>`, stop it by SIGINT."""

import signal
import subprocess
import sys


def start_node(module, args, env, log_path):
    """Start `python -m loco_policy.nodes.<module> --ros-args *args` in its own session.

    Its output goes to log_path; env is the whole environment (ROS domain, discovery range).
    """
    log = open(log_path, 'wb')
    return subprocess.Popen(
        [sys.executable, '-m', f'loco_policy.nodes.{module}', '--ros-args', *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_process(proc, timeout=5.0):
    """SIGINT a process, then SIGKILL if it has not ended within timeout s; its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return proc.returncode
