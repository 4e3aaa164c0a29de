"""sac_finetune as a real process over real DDS: stream faults, signed exports, SIGKILL, bad disk.

The test process publishes /replay/transitions batches packed by loco_policy.transition (what
policy_node sends) and listens to /diagnostics and /policy/update; the node runs with small
learner settings so that it learns and exports within seconds.
"""

import hashlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import loco_policy
from loco_policy import spec, transition
from loco_policy.control import hot_swap
from loco_policy.policy_file import OnnxPolicy
from loco_train.finetune.store import TransitionStore
from test.helpers.deploy_fixtures import REPO, ros_env

pytestmark = pytest.mark.ros

SHIPPED_POLICY = os.path.join(
    os.path.dirname(loco_policy.__file__), 'policies', 'anymal_c_walk.onnx'
)
KEY = b'finetune-update-key-for-the-tests-0123'
BATCH = 10  # rows per /replay/transitions message, as policy_node sends them
WINDOW = 20  # the node's reorder_window (config/sac_finetune.yaml), rows
SMALL = (
    'learning_starts:=64', 'warmup_updates:=20', 'export_every:=50', 'batch_size:=32',
    'checkpoint_every_s:=1.0', 'diagnostics_period:=0.5',
    'guard_rows:=0',  # the rows here are random: no command is ever seen twice
)  # fmt: skip
NO_EXPORTS = 'export_every:=1000000'  # for the tests that need no candidate (an export takes s)
ONE_EXPORT = 140  # rows sent at once: 119 transitions, 68 updates, so exactly one export at 50


def row(seq, episode=1):
    """A WALK row of one episode with finite, seq-seeded obs (48,), action (12,), terms (7,)."""
    rng = np.random.default_rng(seq)
    return transition.TransitionRow(
        seq=seq,
        episode=episode,
        policy_version=0,
        mode='WALK',
        obs=rng.normal(0.0, 0.3, spec.OBS_DIM).astype(np.float32),
        action=rng.uniform(-0.5, 0.5, spec.ACTION_DIM).astype(np.float32),
        reward_terms=rng.uniform(0.0, 1.0, len(transition.REWARD_TERMS)).astype(np.float32),
        terminated=False,
        truncated=False,
    )


class Node:
    """One `python -m loco_train.nodes.sac_finetune` process with its own log file."""

    def __init__(self, env, log_path, store, policy_dir, key_file=None, *params):
        """Start the node on store and policy_dir (announcing with key_file when given)."""
        args = [f'store:={store}', f'policy_dir:={policy_dir}', *SMALL, *params]
        if key_file is not None:
            args.append(f'update_key_file:={key_file}')
        self.log_path = log_path
        config = os.path.join(REPO, 'config', 'sac_finetune.yaml')
        command = [sys.executable, '-m', 'loco_train.nodes.sac_finetune', '--ros-args']
        command += ['--params-file', config, *[a for p in args for a in ('-p', p)]]
        with open(log_path, 'ab') as log:
            self.proc = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def log(self):
        """The node's output so far."""
        return self.log_path.read_text()

    def stopped_cleanly(self):
        """Ctrl-C it; True when it exits 0 with no exception (in any thread) in its output."""
        return self.stop() == 0 and 'Traceback' not in self.log()

    def stop(self, timeout=20.0):
        """SIGINT (Ctrl-C), then SIGKILL after timeout s; return the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        return self.proc.returncode


class Link:
    """The test's rclpy node: publishes rows, hears /diagnostics and /policy/update."""

    def __init__(self, name):
        """Join the isolated domain of test `name`."""
        from diagnostic_msgs.msg import DiagnosticArray
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import Float32MultiArray, String

        self.env = ros_env(name)
        self.env['OMP_NUM_THREADS'] = '1'
        os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = self.env['ROS_AUTOMATIC_DISCOVERY_RANGE']
        self.rclpy, self.Float32MultiArray = rclpy, Float32MultiArray
        self.context = Context()
        rclpy.init(context=self.context, domain_id=int(self.env['ROS_DOMAIN_ID']))
        self.node = rclpy.create_node('finetune_probe', context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        reliable = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.pub = self.node.create_publisher(Float32MultiArray, '/replay/transitions', reliable)
        latched = QoSProfile(depth=50, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.updates = []  # parsed /policy/update JSON, in arrival order
        self.node.create_subscription(
            String, '/policy/update', lambda m: self.updates.append(json.loads(m.data)), latched
        )
        self.diag, self.diag_level, self.diag_count = {}, None, 0
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 10)
        self.sent = 0  # rows published

    def _on_diag(self, msg):
        for status in msg.status:
            if status.name == 'sac_finetune':
                self.diag = {kv.key: kv.value for kv in status.values}
                self.diag_level, self.diag_count = status.level, self.diag_count + 1

    def value(self, key, default=-1):
        """An integer /diagnostics value (default before the first message)."""
        return int(self.diag.get(key, default))

    def last_export(self):
        """The node's last_export dict ({} before the first)."""
        return json.loads(self.diag.get('last_export', '{}'))

    def spin(self, seconds):
        """Process callbacks for seconds."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.01)

    def spin_until(self, predicate, timeout):
        """Spin until predicate() or timeout (s); return whether it became true."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return True
            self.executor.spin_once(timeout_sec=0.01)
        return bool(predicate())

    def wait_ready(self, node, timeout=40.0):
        """Wait for the node's /diagnostics and its /replay/transitions subscription."""
        count = self.diag_count
        ready = self.spin_until(
            lambda: (
                (self.diag_count > count and self.pub.get_subscription_count() > 0)
                or node.proc.poll() is not None
            ),
            timeout,
        )
        assert ready and node.proc.poll() is None, node.log()
        self.spin(0.3)  # let the node's reader match our writer too (reliable, volatile)

    def publish(self, dims, data):
        """Publish one Float32MultiArray of (label, size, stride) dims and data."""
        from std_msgs.msg import MultiArrayDimension

        msg = self.Float32MultiArray()
        msg.layout.dim = [MultiArrayDimension(label=a, size=b, stride=c) for a, b, c in dims]
        msg.data = np.asarray(data, dtype=np.float32).tolist()
        self.pub.publish(msg)

    def send(self, seqs):
        """Publish rows of these sequence numbers, BATCH to a message, in order."""
        seqs = list(seqs)
        for i in range(0, len(seqs), BATCH):
            self.publish(*transition.pack_rows([row(s) for s in seqs[i : i + BATCH]]))
            self.sent += len(seqs[i : i + BATCH])
            self.executor.spin_once(timeout_sec=0.0)

    def stream(self, first, rate, until, timeout):
        """Publish rows first, first+1, ... at rate rows/s until until() or timeout; next seq."""
        start, seq = time.monotonic(), first
        end = start + timeout
        while time.monotonic() < end and not until():
            due = first + int((time.monotonic() - start) * rate)
            if seq + BATCH <= due:
                self.send(range(seq, seq + BATCH))
                seq += BATCH
            self.executor.spin_once(timeout_sec=0.005)
        return seq

    def close(self):
        """Destroy the node and shut the context down."""
        self.executor.shutdown()
        self.node.destroy_node()
        self.rclpy.try_shutdown(context=self.context)


@pytest.fixture
def link(request):
    probe = Link(request.node.name)
    yield probe
    probe.close()


@pytest.fixture
def run(link, tmp_path):
    """Start sac_finetune nodes in tmp_path; every one still running is stopped at the end."""
    nodes = []

    def start(store, policy_dir, key_file=None, *params, ready=True):
        log = tmp_path / f'node{len(nodes)}.log'
        node = Node(link.env, log, store, policy_dir, key_file, *params)
        nodes.append(node)
        if ready:  # else the caller calls link.wait_ready(node) itself
            link.wait_ready(node)
        return node

    yield start
    for node in nodes:
        node.stop()


def write_key(tmp_path):
    """The HMAC key file shared with policy_node."""
    path = tmp_path / 'update.key'
    path.write_bytes(KEY)
    return path


def test_stream_faults_are_counted_nothing_pairs_across_a_gap_keyless_candidates_stay_quiet(
    link, run, tmp_path
):
    store = tmp_path / 'store'
    # no update_key_file; one export at 200 updates (the 267 transitions paired before the
    # stop owe 1.25 * (267 - 64) = 253 updates)
    node = run(store, tmp_path / 'policies', None, 'export_every:=200')
    link.send(range(0, 200))
    link.send(range(210, 300))  # 200..209 never sent: a gap of 10
    link.send(range(250, 260))  # sent twice: 10 duplicates
    counted = lambda: link.value('transitions_received') == 300  # noqa: E731
    assert link.spin_until(counted, 15.0), (link.diag, node.log())
    assert link.value('sequence_gaps') == 10 and link.value('duplicates') == 10, link.diag
    assert link.value('malformed') == 0 and link.value('late') == 0, link.diag

    dims, data = transition.pack_rows([row(s) for s in range(300, 310)])
    dims[1] = ('loco_transition_v0', dims[1][1], dims[1][2])  # a layout this node does not read
    link.publish(dims, data)
    assert link.spin_until(lambda: link.value('malformed') == 1, 5.0), link.diag
    assert 'loco_transition_v0' in link.diag['last_malformed'], link.diag
    dims, data = transition.pack_rows([row(s) for s in range(300, 310)])
    data[3 * transition.ROW_WIDTH + transition.SLICES['obs'].start] = np.nan
    link.publish(dims, data)
    assert link.spin_until(lambda: link.value('malformed') == 2, 5.0), link.diag
    assert 'non-finite' in link.diag['last_malformed'], link.diag
    assert link.value('transitions_received') == 300  # malformed messages count no rows

    # without a key the candidate is written, checked loadable, and never announced
    assert link.spin_until(lambda: link.last_export().get('version', 0) >= 1, 30.0), link.diag
    export = link.last_export()
    assert export['announced'] is False and export['updates'] >= 200, export
    OnnxPolicy(export['path'], warmup=1)
    link.spin(0.5)
    assert link.updates == [], link.updates
    assert 'candidates are written but not announced' in node.log()
    assert node.stopped_cleanly(), node.log()

    stored, _ = TransitionStore(store).load()
    seq = stored['seq'].astype(np.int64)
    # row k pairs with row k + 1: 0..198 and 210..298 (199's successor and 299's never came)
    expected = np.r_[np.arange(0, 199), np.arange(210, 299)]
    assert np.array_equal(seq, expected), seq
    at = {int(s): i for i, s in enumerate(seq)}
    assert stored['segment_end'][at[198]] and not stored['segment_end'][at[197]]
    assert stored['segment'][at[198]] != stored['segment'][at[210]]  # no segment spans the gap
    assert len(set(stored['segment'][: at[198] + 1])) == 1
    first = row(0)  # stored fields are the rows' own: obs of row k, next_obs of row k + 1
    assert np.array_equal(stored['obs'][0], first.obs)
    assert np.array_equal(stored['next_obs'][0], row(1).obs)
    assert np.all(np.isfinite(stored['reward']))


def test_a_candidate_is_announced_signed_and_passes_the_robots_checks(link, run, tmp_path):
    key = write_key(tmp_path)
    policies = tmp_path / 'policies'
    node = run(tmp_path / 'store', policies, key)
    link.send(range(0, ONE_EXPORT))
    assert link.spin_until(lambda: link.updates, 30.0), (link.diag, node.log())
    update = link.updates[0]
    assert update['version'] == 1 and update['parent_version'] == 0, update
    blob = open(update['path'], 'rb').read()
    assert os.path.dirname(update['path']) == str(policies)
    assert update['sha256'] == hashlib.sha256(blob).hexdigest()
    assert update['signature'] == hot_swap.sign(blob, KEY)
    candidate = OnnxPolicy(update['path'], warmup=1)
    assert candidate.contract.file_sha256 == update['sha256']
    # what policy_node's validator does with it: signature, contract, actions beside the active
    observations = np.array([row(s).obs for s in range(50)])
    limits = hot_swap.SwapLimits(inference_budget=0.05)  # loaded CI cores, not a robot
    active = OnnxPolicy(SHIPPED_POLICY, warmup=1)
    _, _, figures = hot_swap.validate(json.dumps(update), str(key), active, observations, limits)
    assert figures['deviation_max'] < 0.1, figures  # 1-2 actor steps at actor_lr 1e-5
    assert link.spin_until(lambda: link.last_export().get('announced') is True, 5.0), link.diag
    assert node.stopped_cleanly(), node.log()


def test_sigkill_mid_write_loses_at_most_the_last_second_and_never_repeats_a_version(
    link, run, tmp_path
):
    key, store, policies = write_key(tmp_path), tmp_path / 'store', tmp_path / 'policies'
    rate = 200  # rows/s
    node = run(store, policies, key)
    seq = link.stream(0, rate, lambda: link.updates, timeout=30.0)
    assert link.updates, (link.diag, node.log())
    delay = random.uniform(0.0, 1.0)  # s after the first announcement: any moment of writing
    seq = link.stream(seq, rate, lambda: False, timeout=delay)
    heard_rows = link.value('store_rows')  # on disk at the last /diagnostics before the kill
    announced = max(u['version'] for u in link.updates)
    os.kill(node.proc.pid, signal.SIGKILL)
    assert node.proc.wait(10) == -signal.SIGKILL
    sent, heard = link.sent, len(link.updates)
    copy = tmp_path / 'store_after_kill'  # opened here; the node reopens the original
    shutil.copytree(store, copy)
    node = run(store, policies, key, ready=False)  # boots while the copy is checked

    stored, checkpoint = TransitionStore(copy).load()
    on_disk = len(stored['seq'])
    context = dict(delay=delay, on_disk=on_disk, heard_rows=heard_rows, sent=sent)
    assert np.array_equal(stored['seq'], np.arange(on_disk)), context  # no hole, no repeat
    assert on_disk >= heard_rows, context
    # flushed at least once a second; the newest WINDOW + 2 rows are not paired yet
    assert on_disk >= sent - (rate * 1.0 + WINDOW + 2 + BATCH), context
    import torch

    checkpointed = torch.load(io.BytesIO(checkpoint), weights_only=True)['version']
    # the checkpoint precedes the announcement: a kill between them leaves one export unheard
    assert checkpointed in (announced, announced + 1), (checkpointed, announced, context)

    link.wait_ready(node)
    assert f'version {checkpointed}' in node.log() and f'{on_disk} stored' in node.log()
    link.stream(seq, rate, lambda: len(link.updates) > heard, timeout=30.0)
    assert len(link.updates) > heard, (link.diag, node.log())
    after = link.updates[heard]
    assert after['version'] == checkpointed + 1 and after['version'] > announced, after
    assert after['parent_version'] == checkpointed and os.path.isfile(after['path'])
    # Ctrl-C now, while rows still stream: the learner is most likely in its next export
    assert node.stopped_cleanly(), node.log()


def test_a_damaged_checkpoint_is_kept_reported_and_never_reuses_a_version(link, run, tmp_path):
    from diagnostic_msgs.msg import DiagnosticStatus

    key, store, policies = write_key(tmp_path), tmp_path / 'store', tmp_path / 'policies'
    node = run(store, policies, key)
    link.send(range(0, ONE_EXPORT))
    assert link.spin_until(lambda: link.updates, 30.0), (link.diag, node.log())
    first = link.updates[0]
    assert node.stopped_cleanly(), node.log()
    checkpoint = store / 'checkpoint.bin'
    damaged = bytearray(checkpoint.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # a bit flipped on disk
    checkpoint.write_bytes(bytes(damaged))
    first_bytes = open(first['path'], 'rb').read()

    node = run(store, policies, key)
    assert link.spin_until(lambda: link.diag.get('checkpoint_error'), 10.0), link.diag
    assert 'crc32' in link.diag['checkpoint_error'], link.diag
    assert link.diag_level == DiagnosticStatus.WARN, link.diag
    assert (store / 'checkpoint.bin.corrupt').read_bytes() == bytes(damaged)
    assert 'damaged' in node.log() and 'learning starts afresh' in node.log()
    heard = len(link.updates)
    link.send(range(ONE_EXPORT, 2 * ONE_EXPORT))
    assert link.spin_until(lambda: len(link.updates) > heard, 30.0), (link.diag, node.log())
    after = link.updates[heard]
    # numbered above the file of the run before, from the warm start (version 0)
    assert after['version'] == first['version'] + 1 and after['parent_version'] == 0, after
    assert open(first['path'], 'rb').read() == first_bytes  # not overwritten
    assert node.stopped_cleanly(), node.log()


def test_a_store_that_cannot_be_written_leaves_learning_running_and_says_so(link, run, tmp_path):
    from diagnostic_msgs.msg import DiagnosticStatus

    store, moved = tmp_path / 'store', tmp_path / 'store_away'
    node = run(store, tmp_path / 'policies', None, NO_EXPORTS)
    # Tests run as root, and root writes into a chmod 0o500 directory (CAP_DAC_OVERRIDE). A
    # regular file where the store directory was makes every write into it fail for anyone:
    # open(store/chunk_000001.bin) is ENOTDIR. No chunk is open yet (none before the first row),
    # so the rows' writes fail, not only the index's and checkpoint's.
    store.rename(moved)
    store.write_bytes(b'not a directory')
    unhealthy = lambda: link.diag.get('store_healthy') == 'False'  # noqa: E731
    seq = link.stream(0, 200, unhealthy, timeout=15.0)
    assert unhealthy(), (link.diag, node.log())
    assert link.diag_level == DiagnosticStatus.WARN, link.diag
    assert 'NotADirectoryError' in link.diag['store_error'], link.diag
    assert link.value('store_rows') == 0 and link.value('store_pending') > 0, link.diag
    first = link.value('updates')
    learning = lambda: link.value('updates') > max(first, 0) + 100  # noqa: E731
    seq = link.stream(seq, 200, learning, timeout=20.0)
    assert learning() and unhealthy(), (link.diag, node.log())
    assert node.proc.poll() is None

    # the disk comes back: the rows kept in memory are written, the store is healthy again
    store.unlink()
    moved.rename(store)
    healthy = lambda: link.diag.get('store_healthy') == 'True'  # noqa: E731
    assert link.spin_until(healthy, 5.0), link.diag
    assert link.diag_level == DiagnosticStatus.OK and link.value('store_rows') > 0, link.diag
    assert node.stopped_cleanly(), node.log()
    stored, _ = TransitionStore(store).load()
    assert np.array_equal(stored['seq'], np.arange(seq - 1)), (stored['seq'], seq)


def test_a_policy_dir_that_cannot_be_written_is_reported_and_learning_goes_on(link, run, tmp_path):
    from diagnostic_msgs.msg import DiagnosticStatus

    policies = tmp_path / 'policies'
    node = run(tmp_path / 'store', policies, write_key(tmp_path))
    policies.rmdir()  # made empty at startup; a file in its place fails every write (as root too)
    policies.write_bytes(b'not a directory')
    link.send(range(0, ONE_EXPORT))
    failed = lambda: link.diag.get('export_error', '') != ''  # noqa: E731
    assert link.spin_until(failed, 30.0), (link.diag, node.log())
    assert link.diag_level == DiagnosticStatus.WARN and 'version 1' in link.diag['export_error']
    assert not link.updates  # nothing announced that was not written
    first = link.value('updates')
    link.send(range(ONE_EXPORT, ONE_EXPORT + 200))
    assert link.spin_until(lambda: link.value('updates') > first, 20.0), link.diag
    assert node.proc.poll() is None and node.stopped_cleanly(), node.log()


def test_a_refused_candidate_resets_the_actor_to_the_running_policy(link, run, tmp_path):
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from std_msgs.msg import String

    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    status = link.node.create_publisher(String, '/policy/status', latched)

    def robot(version, rejected):  # what policy_node publishes, the fields the learner reads
        updates = {'accepted': 1, 'rejected': rejected, 'rollbacks': 0, 'last_rejection': None}
        status.publish(String(data=json.dumps({'policy_version': version, 'updates': updates})))

    node = run(tmp_path / 'store', tmp_path / 'policies', write_key(tmp_path))
    link.send(range(0, ONE_EXPORT))
    assert link.spin_until(lambda: link.updates, 30.0), (link.diag, node.log())
    robot(1, 0)  # v1 running, nothing refused yet: the baseline, no reset
    link.spin(1.5)
    assert link.value('actor_follows') == 0, link.diag
    robot(1, 1)  # the robot rejected a later candidate and still runs v1
    assert link.spin_until(lambda: link.value('actor_follows') == 1, 10.0), link.diag
    assert link.diag['last_follow'] == 'actor reset to running version 1'
    robot(99, 2)  # a version this learner never exported: said, not reset
    assert link.spin_until(lambda: 'not found' in link.diag.get('last_follow', ''), 10.0)
    assert link.value('actor_follows') == 1
    # back on the file it was started with, which policy_node names by its sha256's first 8 hex
    digest = hashlib.sha256(open(SHIPPED_POLICY, 'rb').read()).hexdigest()
    robot(int(digest[:8], 16), 3)
    assert link.spin_until(lambda: link.value('actor_follows') == 2, 10.0), link.diag
    assert link.diag['last_follow'] == 'actor reset to running version 0'
    assert node.stopped_cleanly(), node.log()


def test_the_regression_guard_sends_the_actor_back_to_the_best_version(link, run, tmp_path):
    # margin -1: a candidate must beat the best by the whole reference error, so the first one
    # judged on the robot regresses and the actor goes back to the warm start (v0), the best
    command = spec.observation_slices()['command']

    def rows(seqs, version):  # one forward command throughout, so every row is comparable
        out = []
        for seq in seqs:
            r = row(seq)
            r.obs[command] = np.array([1.0, 0.0, 0.0]) * spec.observation_scale()[command]
            r.policy_version = version
            out.append(r)
        return transition.pack_rows(out)

    guard = ('guard_rows:=100', 'guard_margin:=-1.0')
    node = run(tmp_path / 'store', tmp_path / 'policies', write_key(tmp_path), *guard)
    for first in range(0, ONE_EXPORT, BATCH):  # the warm start's rows: the reference
        link.publish(*rows(range(first, first + BATCH), 0))
    assert link.spin_until(lambda: link.updates, 30.0), (link.diag, node.log())
    assert link.updates[0]['version'] == 1 and link.value('guard_resets') == 0, link.diag
    for first in range(ONE_EXPORT, ONE_EXPORT + 200, BATCH):  # v1 on the robot (20 held back)
        link.publish(*rows(range(first, first + BATCH), 1))
    assert link.spin_until(lambda: link.value('guard_resets') == 1, 20.0), (link.diag, node.log())
    assert 'version 1 regressed (tracking' in link.diag['last_guard'], link.diag
    assert json.loads(link.diag['guard_best'])['version'] == 0, link.diag
    assert link.spin_until(lambda: link.value('actor_follows') == 1, 10.0), link.diag
    assert link.diag['last_follow'] == 'actor reset to best version 0', link.diag
    # the best one goes out again at once: v2, with the warm start's actor (later exports of
    # the learning that goes on may arrive in the same spin)
    assert link.spin_until(lambda: len(link.updates) >= 2, 30.0), (link.diag, node.log())
    assert link.updates[1]['version'] == 2, link.updates
    a, b = (OnnxPolicy(u['path'], warmup=1) for u in link.updates[:2])
    start = OnnxPolicy(SHIPPED_POLICY, warmup=1)
    obs = np.array([row(s).obs for s in range(20)])
    assert max(np.abs(b.act(o) - start.act(o)).max() for o in obs) < 1e-4
    assert max(np.abs(a.act(o) - start.act(o)).max() for o in obs) > 1e-6  # v1 had moved
    assert node.stopped_cleanly(), node.log()


def test_the_nominal_gate_holds_back_a_candidate_and_resets_the_actor(link, run, tmp_path):
    # margin -1: a candidate must track better than 0 x the warm start's nominal error, so every
    # one is held back; with no /policy/status the actor goes back to the last candidate that
    # passed, here the warm start (v0), after the second refusal too (never to a refused v1)
    policies = tmp_path / 'policies'
    gate = ('gate_seeds:=1', 'gate_margin:=-1.0')
    node = run(tmp_path / 'store', policies, write_key(tmp_path), *gate)
    link.send(range(0, 3 * ONE_EXPORT))
    assert link.spin_until(lambda: link.value('gated') >= 1, 60.0), (link.diag, node.log())
    link.send(range(3 * ONE_EXPORT, 6 * ONE_EXPORT))  # updates for a candidate after the reset
    assert link.spin_until(lambda: link.value('gated') >= 2, 60.0), (link.diag, node.log())
    assert link.spin_until(lambda: link.value('actor_follows') >= 2, 10.0), link.diag
    assert link.diag['last_follow'] == 'actor reset to running version 0', link.diag
    assert 'nominal tracking error' in link.diag['last_gate'], link.diag
    assert link.diag['last_gate'].count('version') == 1, link.diag  # one reason, not nested
    # A later candidate may be written and still at its gate (last_export not yet decided).
    decided = lambda: link.last_export().get('path', '').endswith('.gated.onnx')  # noqa: E731
    assert link.spin_until(decided, 60.0), link.last_export()
    export = link.last_export()
    assert export['announced'] is False and export['path'].endswith('.gated.onnx'), export
    assert os.path.isfile(export['path'])
    assert not link.updates  # nothing reached /policy/update
    # after each reset the next candidate learned export_every updates: none is v0 again (one
    # due while the gate ran would have been, and would pass any gate at margin 0)
    start = OnnxPolicy(SHIPPED_POLICY, warmup=1)
    obs = np.array([row(s).obs for s in range(20)])
    gated = sorted(policies.glob('*.gated.onnx'))
    assert len(gated) >= 2, gated
    for path in gated:
        candidate = OnnxPolicy(str(path), warmup=1)
        assert max(np.abs(candidate.act(o) - start.act(o)).max() for o in obs) > 1e-6, path
    assert node.stopped_cleanly(), node.log()


def test_a_gate_that_cannot_open_holds_back_every_candidate(link, run, tmp_path):
    # a reference that is no policy file: the gate stays closed, learning and exports go on,
    # nothing is announced, and the exporter survives to hold back the next candidate too
    reference = tmp_path / 'not_a_policy.onnx'
    reference.write_bytes(b'not an onnx file')
    node = run(
        tmp_path / 'store', tmp_path / 'policies', write_key(tmp_path),
        'gate_seeds:=1', f'gate_reference:={reference}',
    )  # fmt: skip
    link.send(range(0, 3 * ONE_EXPORT))
    assert link.spin_until(lambda: link.value('gated') >= 1, 60.0), (link.diag, node.log())
    link.send(range(3 * ONE_EXPORT, 6 * ONE_EXPORT))  # updates for a candidate after the reset
    assert link.spin_until(lambda: link.value('gated') >= 2, 60.0), (link.diag, node.log())
    gate = link.diag['last_gate']
    assert gate.startswith('version ') and ': gate closed: ' in gate, gate
    assert gate.count('gate closed') == 1 and gate.count('version') == 1, gate
    assert link.value('updates') > 0 and not link.updates, link.diag
    assert node.stopped_cleanly(), node.log()


def test_a_gate_without_a_reference_is_refused_at_start(link, tmp_path):
    checkpoint = os.path.join(REPO, 'checkpoints', 'sac_anymal_paper', 'checkpoint.pt')
    node = Node(
        link.env, tmp_path / 'node.log', tmp_path / 'store', tmp_path / 'policies', None,
        f'warm_start:={checkpoint}', 'gate_seeds:=1',
    )  # fmt: skip
    assert node.proc.wait(60) == 2, node.log()
    assert 'needs gate_reference' in node.log()


def test_a_gate_phase_jitter_out_of_range_is_refused_at_start(link, tmp_path):
    node = Node(
        link.env, tmp_path / 'node.log', tmp_path / 'store', tmp_path / 'policies', None,
        'gate_seeds:=1', 'gate_sensor_noise:=false', 'gate_phase_jitter:=50.0',
    )  # fmt: skip
    assert node.proc.wait(60) == 2, node.log()
    assert 'gate_phase_jitter: phase_jitter must lie in' in node.log()


def test_a_co_training_exploration_out_of_range_is_refused_at_start(link, tmp_path):
    node = Node(
        link.env, tmp_path / 'node.log', tmp_path / 'store', tmp_path / 'policies', None,
        'sim_share:=0.5', 'sim_exploration:=0.5',
    )  # fmt: skip
    assert node.proc.wait(60) == 2, node.log()
    assert 'sim_exploration: ' in node.log() and 'exploration_std=0.5' in node.log()


def test_co_training_walks_the_unperturbed_robot_on_the_robots_commands(link, run, tmp_path):
    # sim_share 0.5: one MuJoCo tick per robot transition, on the policy that chose the rows;
    # policy_node names the file it started with by its sha256, the warm start here (v0); the
    # walker's transitions fill a replay of their own, half of every batch once there are
    # learning_starts of them
    node = run(
        tmp_path / 'store', tmp_path / 'policies', None, NO_EXPORTS,
        'sim_share:=0.5', 'sim_sensor_noise:=false',
    )  # fmt: skip
    with open(SHIPPED_POLICY, 'rb') as handle:
        start_id = int(hashlib.sha256(handle.read()).hexdigest()[:8], 16)
    rows = [row(s) for s in range(200)]
    for r in rows:
        r.policy_version = start_id
    for i in range(0, len(rows), BATCH):
        link.publish(*transition.pack_rows(rows[i : i + BATCH]))
        link.executor.spin_once(timeout_sec=0.0)
    assert link.spin_until(lambda: link.value('sim_rows') >= 150, 60.0), (link.diag, node.log())
    assert link.value('transitions_learned') >= 150, link.diag
    assert float(link.diag['sim_share']) == 0.5 and float(link.diag['prior_share']) == 0.0
    assert link.diag['sim_version'] == '0' and link.value('sim_falls') == 0, link.diag
    assert link.diag['sim_error'] == '' and link.diag['sim_note'] == '', link.diag
    assert link.value('updates') > 0 and not link.diag['learner_error'], link.diag
    assert node.stopped_cleanly(), node.log()


def test_co_training_settings_are_checked_at_start(link, tmp_path):
    checkpoint = os.path.join(REPO, 'checkpoints', 'sac_anymal_paper', 'checkpoint.pt')
    for params, reason in (
        (('sim_share:=1.5',), 'sim_share 1.5: in [0, 1)'),
        ((f'warm_start:={checkpoint}', 'sim_share:=0.5'), 'needs gate_reference'),
    ):
        node = Node(
            link.env, tmp_path / 'node.log', tmp_path / 'store', tmp_path / 'policies', None,
            *params,
        )  # fmt: skip
        assert node.proc.wait(60) == 2, node.log()
        assert reason in node.log(), node.log()
