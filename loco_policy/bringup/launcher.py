"""`loco-launch`: start the deployment node graph as separate processes, without ROS 2 launch.

    loco-launch [name:=value ...]   (arguments of loco_policy.bringup.launch_graph, as ros2 launch)

Starts the same nodes with the same config/*.yaml as launch/anymal.launch.py, prefixes each
output line with ``[node]``, and on Ctrl-C or SIGTERM stops them all: SIGINT to each node's
process group, then SIGTERM, then SIGKILL after a grace period, so no process outlives it. A node
that exits with an error stops the whole graph and sets the exit code.
"""

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time

from loco_policy.bringup import launch_graph

GRACE = 5.0
"""Seconds a node has to exit after SIGINT (and again after SIGTERM)."""

PR_SET_PDEATHSIG = 1


def die_with_parent():
    """In the child: get SIGTERM if the launcher dies (even by SIGKILL); Linux only."""
    try:
        ctypes.CDLL('libc.so.6', use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def start_cpus(node):
    """CPUs a node's process starts pinned to: its cpu_affinity (override, else its file); [].

    Pinned from exec, a node's imports and set-up (torch's take seconds of CPU) already stay off
    the cores it must leave to others. A value the node would refuse (malformed, or CPUs this
    launcher may not use) starts it free, and the node then says why it refuses it.
    """
    from loco_policy.control.realtime import parse_cpus

    value = node.overrides.get('cpu_affinity')
    if value is None:
        import yaml

        try:
            with open(node.params_file) as handle:
                document = yaml.safe_load(handle) or {}
            params = next(iter(document.values()))['ros__parameters']
            value = params.get('cpu_affinity', '')
        except (OSError, yaml.YAMLError, StopIteration, KeyError, TypeError, AttributeError):
            return []
    try:
        cpus = parse_cpus(value)
    except ValueError:
        return []
    return cpus if set(cpus) <= os.sched_getaffinity(0) else []


def command_line(node):
    """The argv that starts one NodeSpec with its parameter file and overrides."""
    argv = [sys.executable, '-m', node.module, '--ros-args', '--params-file', node.params_file]
    for key, value in node.overrides.items():
        argv += ['-p', f'{key}:={json.dumps(value)}']  # JSON strings are YAML strings
    return argv


class Launcher:
    """Owns the node processes: start, prefix their output, stop them all."""

    def __init__(self, nodes, out=sys.stdout):
        """Remember the NodeSpecs to start and where to print."""
        self.nodes = nodes
        self.out = out
        self.procs = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def say(self, name, line):
        """Print one prefixed line."""
        with self.lock:
            self.out.write(f'[{name}] {line}\n')
            self.out.flush()

    def start(self):
        """Start every node in its own process group, then the output pumps."""
        env = dict(os.environ, PYTHONUNBUFFERED='1')
        for node in self.nodes:
            cpus = start_cpus(node)

            def prepare(cpus=cpus):
                """In the child before exec: die with the launcher, start on the node's CPUs."""
                die_with_parent()
                if cpus:
                    os.sched_setaffinity(0, cpus)

            self.procs[node.name] = subprocess.Popen(
                command_line(node),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                process_group=0,
                preexec_fn=prepare,
            )
            pid = self.procs[node.name].pid
            pinned = f', CPUs {",".join(map(str, cpus))}' if cpus else ''
            self.say('loco-launch', f'started {node.name} (pid {pid}{pinned})')
        for name, proc in self.procs.items():
            threading.Thread(target=self._pump, args=(name, proc), daemon=True).start()

    def _pump(self, name, proc):
        """Copy a node's output lines, prefixed with its name."""
        for raw in proc.stdout:
            self.say(name, raw.decode(errors='replace').rstrip())

    def wait(self, duration=None):
        """Run until stop is requested, a node fails, or duration (s) passes; return exit code."""
        deadline = None if duration is None else time.monotonic() + duration
        while not self.stopping.is_set():
            for name, proc in self.procs.items():
                if proc.poll() is not None and proc.returncode != 0:
                    self.say('loco-launch', f'{name} exited with code {proc.returncode}')
                    return proc.returncode
            if deadline is not None and time.monotonic() > deadline:
                break
            self.stopping.wait(0.1)
        return 0

    def _signal_all(self, sig):
        """Send sig to the process group of every node still running."""
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass

    def stop(self):
        """SIGINT every node, then SIGTERM, then SIGKILL, each after GRACE seconds; exit codes.

        Says how long each node took to exit and which signal it needed, so that a node that
        hangs or crashes on the way out is named in the log.
        """
        started = time.monotonic()
        took = {n: 0.0 for n, p in self.procs.items() if p.poll() is not None}  # s after stop
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            self._signal_all(sig)
            deadline = time.monotonic() + GRACE
            while self._note_exits(took, started) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not self._note_exits(took, started):
                break
            left = sorted(set(self.procs) - set(took))
            self.say('loco-launch', f'still running after {sig.name}: {left}; escalating')
        for proc in self.procs.values():
            proc.wait()
        self.say(
            'loco-launch',
            'exit times (s after the stop): '
            + ', '.join(f'{n} {took.get(n, time.monotonic() - started):.2f}' for n in self.procs),
        )
        # the nodes' groups may hold stragglers (children of nodes): end them too
        self._signal_groups(signal.SIGKILL)
        codes = {name: p.returncode for name, p in self.procs.items()}
        self.say('loco-launch', f'stopped: exit codes {codes}')
        return codes

    def _note_exits(self, took, started):
        """Add the nodes that have exited to took (name: s since started); True while any runs."""
        for name, proc in self.procs.items():
            if name not in took and proc.poll() is not None:
                took[name] = time.monotonic() - started
        return len(took) < len(self.procs)

    def _signal_groups(self, sig):
        """Send sig to every node's process group regardless of the leader's state."""
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def main(argv=None):
    """Parse name:=value arguments, start the graph, stop it on Ctrl-C or SIGTERM."""
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ('-h', '--help') for a in argv):
        print('usage: loco-launch [-h] [--duration=SECONDS] [name:=value ...]\n')
        print(__doc__)
        for name, (default, text) in launch_graph.ARGUMENTS.items():
            print(f'  {f"{name}:={default!r}":24} {text}')
        return 0
    duration = None
    if argv and argv[0].startswith('--duration='):
        duration, argv = float(argv[0].split('=', 1)[1]), argv[1:]
    try:
        nodes = launch_graph.node_graph(launch_graph.parse_args(argv))
    except (ValueError, FileNotFoundError) as error:
        print(f'loco-launch: {error}', file=sys.stderr)
        return 2
    launcher = Launcher(nodes)

    def request_stop(signum, frame):
        launcher.stopping.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    launcher.start()
    code = launcher.wait(duration)
    # 0, or ended by the SIGINT it was sent (still starting up, before rclpy handles SIGINT);
    # anything else is a crash or a hang on the way out, and a failure (negative: the signal)
    unclean = {n: c for n, c in launcher.stop().items() if c not in (0, -signal.SIGINT)}
    if unclean:
        launcher.say('loco-launch', f'nodes that did not stop cleanly: {unclean}')
    return code or (1 if unclean else 0)


if __name__ == '__main__':
    sys.exit(main())
