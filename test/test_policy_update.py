"""policy_node's /policy/update over real DDS: signed swap while walking, rejections, rollback."""

import hashlib
import json

import pytest

from loco_policy import transition
from loco_policy.control.hot_swap import sign
from test.helpers.deploy_fixtures import all_finite, make_policy_file
from test.test_policy_node import graph, TOLERANT, walk  # noqa: F401  (fixture)

pytestmark = pytest.mark.ros

KEY = b'robot-update-key-for-the-tests-0123456789'


def announcement(path, version, key=KEY):
    blob = open(path, 'rb').read()
    return json.dumps({
        'path': str(path), 'sha256': hashlib.sha256(blob).hexdigest(), 'version': version,
        'parent_version': version - 1, 'signature': sign(blob, key),
    })  # fmt: skip


def test_signed_update_swaps_while_walking_bad_ones_are_rejected_rollback_restores(graph):  # noqa: F811
    from std_msgs.msg import String

    key_file = graph.tmp / 'update.key'
    key_file.write_bytes(KEY)
    first = make_policy_file(graph.tmp / 'first.onnx', weight_scale=0.01)
    probe = walk(graph, first, f'update_key_file:={key_file}', 'inference_budget:=0.05')
    updates = probe.node.create_publisher(String, '/policy/update', 10)
    assert probe.status['updates']['accepted'] == 0
    probe.spin(1.0)  # recent WALK observations for the checks
    first_sha = probe.status['policy_sha256']

    def counts():
        return probe.status.get('updates', {})

    # rejected while walking, each naming why: forged, unsigned, contract mismatch, NaN
    forged = make_policy_file(graph.tmp / 'forged.onnx', weight_scale=0.01, seed=1)
    ranges = {'vx': [0.0, 1.0], 'vy': [0.0, 0.0], 'wz': [0.0, 0.0]}
    other = make_policy_file(graph.tmp / 'other.onnx', weight_scale=0.01, command_ranges=ranges)
    nan = make_policy_file(graph.tmp / 'nan.onnx', nan=True)
    bad = [
        (announcement(forged, 5, key=b'not-the-robot-key-at-all-0000'), 'signature'),
        (json.dumps({**json.loads(announcement(forged, 5)), 'signature': ''}), 'signature'),
        (announcement(other, 5), 'command ranges differ'),
        (announcement(nan, 5), 'non-finite'),
    ]
    for i, (text, reason) in enumerate(bad):
        updates.publish(String(data=text))
        assert probe.spin_until(lambda n=i + 1: counts().get('rejected') == n, 10.0), counts()
        assert reason in counts()['last_rejection']['reason'], counts()
        assert probe.status['mode'] == 'WALK' and probe.status['policy_sha256'] == first_sha

    # a signed, close candidate becomes active at a tick, rows carry its version
    second = make_policy_file(graph.tmp / 'second.onnx', weight_scale=0.01, seed=2)
    updates.publish(String(data=announcement(second, 7)))
    assert probe.spin_until(lambda: counts().get('accepted') == 1, 10.0), counts()
    assert probe.status['policy_version'] == 7 and probe.status['previous_sha256'] == first_sha
    assert probe.status['policy']['path'] == str(second)
    probe.spin(0.5)
    rows = []
    for m in probe.batches:
        rows += transition.unpack_rows([(d.label, d.size, d.stride) for d in m.layout.dim], m.data)
    assert transition.gaps(rows) == [] and rows[-1].policy_version == 7
    assert probe.status['mode'] == 'WALK'  # the swap did not trip anything

    ok, message = probe.call('/policy_node/rollback')
    assert ok, message
    assert probe.spin_until(lambda: counts().get('rollbacks') == 1, 5.0), counts()
    assert probe.status['policy_sha256'] == first_sha and probe.status['policy']['path'] == first
    assert probe.status['mode'] == 'WALK' and all_finite(probe.commands)
    assert probe.call('/policy_node/rollback')[0] is False  # only one previous policy is kept


def test_without_a_key_file_every_update_is_refused_saying_why(graph):  # noqa: F811
    from std_msgs.msg import String

    first = make_policy_file(graph.tmp / 'first.onnx', weight_scale=0.01)
    graph.start('sim_robot')
    graph.start('policy_node', f'policy:={first}', 'allow_untrained:=true', TOLERANT)
    probe = graph.probe
    updates = probe.node.create_publisher(String, '/policy/update', 10)
    assert probe.spin_until(probe.inputs_fresh, 20.0), graph.log('policy_node')
    second = make_policy_file(graph.tmp / 'second.onnx', weight_scale=0.01, seed=2)
    updates.publish(String(data=announcement(second, 3)))
    updates_of = lambda: probe.status.get('updates', {})  # noqa: E731
    assert probe.spin_until(lambda: updates_of().get('rejected') == 1, 10.0), updates_of()
    assert 'no update_key_file' in updates_of()['last_rejection']['reason']
    assert updates_of()['last_rejection']['version'] == 3


def test_a_hostile_unsigned_update_leaves_the_walking_robot_walking(graph):  # noqa: F811
    from std_msgs.msg import String

    probe = walk(graph, make_policy_file(graph.tmp / 'first.onnx', weight_scale=0.01))
    updates = probe.node.create_publisher(String, '/policy/update', 10)
    probe.spin(0.5)
    before = len(probe.commands)
    nested = '[' * 990 + ']' * 990  # parses on the validator's stack, not on a deeper one
    updates.publish(String(data='{"version": ' + nested + ', "path": "' + 'x' * 50_000 + '"}'))
    updates_of = lambda: probe.status.get('updates', {})  # noqa: E731
    assert probe.spin_until(lambda: updates_of().get('rejected') == 1, 10.0), updates_of()
    probe.spin(1.5)  # a /diagnostics period: its status publish must not end the node
    rejection = updates_of()['last_rejection']
    assert rejection['version'] is None and len(rejection['reason']) <= 400, rejection
    assert graph.procs['policy_node'].poll() is None, graph.log('policy_node')
    modes = {command[0] for command in probe.commands[before:]}
    assert modes == {'WALK'} and probe.status['mode'] == 'WALK', (modes, probe.status)


def test_a_damp_entered_between_ticks_soon_after_a_swap_rolls_back(graph):  # noqa: F811
    from std_msgs.msg import String

    key_file = graph.tmp / 'update.key'
    key_file.write_bytes(KEY)
    first = make_policy_file(graph.tmp / 'first.onnx', weight_scale=0.01)
    probe = walk(
        graph, first, f'update_key_file:={key_file}', 'inference_budget:=0.05',
        'rollback_window:=30.0',
    )  # fmt: skip
    updates = probe.node.create_publisher(String, '/policy/update', 10)
    probe.spin(1.0)
    first_sha = probe.status['policy_sha256']
    second = make_policy_file(graph.tmp / 'second.onnx', weight_scale=0.01, seed=2)
    updates.publish(String(data=announcement(second, 7)))
    counts = lambda: probe.status.get('updates', {})  # noqa: E731
    assert probe.spin_until(lambda: counts().get('accepted') == 1, 10.0), counts()
    # DAMP entered in a service callback, not inside a tick: it counts like a tick's fault
    assert probe.call('/policy_node/estop')[0]
    assert probe.spin_until(lambda: counts().get('rollbacks') == 1, 5.0), counts()
    assert probe.status['policy_sha256'] == first_sha and probe.status['mode'] == 'DAMP'
