"""Policy hot-swap checks: signature, digest, contract, actions, deviation; swap and rollback."""

import hashlib
import json
import os
import threading
import time

import numpy as np
import pytest

from loco_policy import spec
from loco_policy.control import hot_swap
from loco_policy.control.controller import Controller
from loco_policy.control.hot_swap import PolicySwitch, SwapLimits, SwapMonitor, UpdateRejected
from loco_policy.policy_file import OnnxPolicy
from loco_policy.tools.random_policy import write_random_policy
from loco_policy.transition import REWARD_TERMS, TransitionRow

KEY = b'0123456789abcdef-test-key'
RELAXED = SwapLimits(inference_budget=1.0)  # timing is not what these tests are about


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / 'update.key'
    path.write_bytes(KEY)
    return str(path)


def announce(file, version=2, key=KEY, **changes):
    """The /policy/update JSON for a file, signed with key; fields overridable."""
    blob = open(file, 'rb').read()
    fields = {
        'path': str(file),
        'sha256': hashlib.sha256(blob).hexdigest(),
        'version': version,
        'parent_version': version - 1,
        'signature': hot_swap.sign(blob, key),
    }
    fields.update(changes)
    return json.dumps(fields)


def observations(n=50, seed=0):
    return np.random.default_rng(seed).normal(scale=0.5, size=(n, spec.OBS_DIM))


@pytest.fixture
def active(tmp_path):
    return OnnxPolicy(write_random_policy(tmp_path / 'active.onnx', weight_scale=0.01))


def test_a_close_signed_candidate_is_accepted(tmp_path, key_file, active):
    path = write_random_policy(tmp_path / 'new.onnx', weight_scale=0.01, seed=1)
    update, candidate, figures = hot_swap.validate(
        announce(path), key_file, active, observations(), RELAXED
    )
    assert update.version == 2 and candidate.contract.path == path
    assert figures['observations'] == 50 and figures['deviation_max'] < 1.0


@pytest.mark.parametrize(
    'case, reason',
    [
        ('no_key', 'no update_key_file'),
        ('short_key', 'at least 16'),
        ('not_json', 'not JSON'),
        ('missing', 'lacks'),
        ('wrong_type', "'version' must be a int"),
        ('unsigned', 'signature does not match'),
        ('forged', 'signature does not match'),
        ('sha', 'sha256'),
        ('truncated', 'signature does not match'),
        ('missing_file', 'unreadable'),
    ],
)
def test_bad_updates_are_rejected_naming_why(tmp_path, key_file, active, case, reason):
    path = write_random_policy(tmp_path / 'new.onnx', weight_scale=0.01, seed=1)
    text, key = announce(path), key_file
    if case == 'no_key':
        key = ''
    elif case == 'short_key':
        (tmp_path / 'short.key').write_bytes(b'short')
        key = str(tmp_path / 'short.key')
    elif case == 'not_json':
        text = '{"path": '
    elif case == 'missing':
        text = json.dumps({k: v for k, v in json.loads(text).items() if k != 'sha256'})
    elif case == 'wrong_type':
        text = json.dumps({**json.loads(text), 'version': '2'})
    elif case == 'unsigned':
        text = announce(path, signature='')
    elif case == 'forged':
        text = announce(path, key=b'another-key-of-some-length')
    elif case == 'sha':
        text = announce(path, sha256='0' * 64)
    elif case == 'truncated':
        blob = open(path, 'rb').read()
        open(path, 'wb').write(blob[: len(blob) // 2])  # cut after it was signed
    elif case == 'missing_file':
        text = announce(path, path=str(tmp_path / 'gone.onnx'))
    with pytest.raises(UpdateRejected, match=reason):
        hot_swap.validate(text, key, active, observations(), RELAXED)


def test_candidates_whose_contract_or_actions_differ_are_rejected(tmp_path, key_file, active):
    ranges = {'vx': [0.0, 1.0], 'vy': [0.0, 0.0], 'wz': [0.0, 0.0]}
    other = write_random_policy(tmp_path / 'ranges.onnx', weight_scale=0.01, command_ranges=ranges)
    with pytest.raises(UpdateRejected, match='command ranges differ'):
        hot_swap.validate(announce(other), key_file, active, observations())
    gains = write_random_policy(tmp_path / 'kp.onnx', weight_scale=0.01, kp=[60.0] * 12)
    with pytest.raises(UpdateRejected, match='kp'):  # refused against the robot spec already
        hot_swap.validate(announce(gains), key_file, active, observations())
    nan = write_random_policy(tmp_path / 'nan.onnx', nan=True)
    with pytest.raises(UpdateRejected, match='non-finite'):
        hot_swap.validate(announce(nan), key_file, active, observations())
    wild = write_random_policy(tmp_path / 'wild.onnx', weight_scale=3.0, seed=4)
    with pytest.raises(UpdateRejected, match='action deviation'):
        hot_swap.validate(announce(wild), key_file, active, observations(), RELAXED)
    with pytest.raises(UpdateRejected, match='no real observations'):
        near0 = write_random_policy(tmp_path / 'near0.onnx', weight_scale=0.01, seed=3)
        hot_swap.validate(announce(near0), key_file, active, np.zeros((0, spec.OBS_DIM)))
    with pytest.raises(UpdateRejected, match='inference'):
        slow = SwapLimits(inference_budget=1e-9)
        near = write_random_policy(tmp_path / 'near.onnx', weight_scale=0.01, seed=2)
        hot_swap.validate(announce(near), key_file, active, observations(), slow)


def test_monitor_rolls_back_on_a_fault_in_the_window_and_on_a_tracking_drop():
    monitor = SwapMonitor(window=1.0, margin=0.2)
    for i in range(50):
        monitor.record(i * 0.02, 1.2)
    monitor.swapped(1.0)
    assert monitor.verdict(1.1, faulted=False) == ''
    assert 'fault within' in monitor.verdict(1.2, faulted=True)
    assert monitor.verdict(1.3, faulted=True) == ''  # one verdict per swap
    for i in range(50):
        monitor.record(i * 0.02, 1.2)
    monitor.swapped(1.0)
    for i in range(60):
        monitor.record(1.0 + i * 0.02, 0.8)  # tracks worse than before the swap
    assert 'below the previous' in monitor.verdict(2.3, faulted=False)
    monitor.swapped(3.0)
    for i in range(60):
        monitor.record(3.0 + i * 0.02, 1.1)  # within the margin
    assert monitor.verdict(4.3, faulted=False) == ''


def test_monitor_compares_tracking_command_by_command():
    def before_swap(monitor):
        for i in range(100):  # standing tracks well, walking forward less so
            command = (0.0, 0.0, 0.0) if i % 2 else (0.8, 0.0, 0.0)
            monitor.record(i * 0.02, 1.4 if i % 2 else 0.6, command)
        monitor.swapped(2.0)

    monitor = SwapMonitor(window=1.0, margin=0.2)
    before_swap(monitor)
    for i in range(60):  # after the swap only walking, as well as before: no rollback
        monitor.record(2.0 + i * 0.02, 0.6, (0.8, 0.0, 0.0))
    assert monitor.verdict(3.3, faulted=False) == ''
    before_swap(monitor)
    for i in range(60):  # walking worse than the previous policy walked
        monitor.record(2.0 + i * 0.02, 0.3, (0.8, 0.0, 0.0))
    assert 'for the same commands' in monitor.verdict(3.3, faulted=False)
    before_swap(monitor)
    for i in range(60):  # a command the previous policy did not run: nothing to compare
        monitor.record(2.0 + i * 0.02, 0.1, (0.0, 0.0, 1.0))
    assert monitor.verdict(3.3, faulted=False) == ''


def walk_row(seq, obs, tracking):
    terms = np.zeros(len(REWARD_TERMS))
    terms[0] = terms[1] = tracking
    return TransitionRow(seq, 1, 0, 'WALK', obs, np.zeros(12), terms, False, False)


def walking_switch(active, key_file):
    """A Controller running `active` and a PolicySwitch that has seen 20 WALK ticks of it."""
    controller = Controller(policy=active)
    switch = PolicySwitch(active, key_file, RELAXED, window=0.5, margin=0.1, observations=20)
    for i, obs in enumerate(observations(20)):
        controller.policy_obs = obs.astype(np.float32)  # what a WALK step gave the policy
        switch.after_tick(controller, walk_row(i, obs, 1.0), False, i * 0.02)
    return controller, switch


def test_switch_swaps_at_a_tick_keeps_the_previous_and_rolls_back(tmp_path, key_file, active):
    controller, switch = walking_switch(active, key_file)
    try:
        path = write_random_policy(tmp_path / 'new.onnx', weight_scale=0.01, seed=1)
        switch.submit(announce(path, version=7))
        switch.submit('not json')
        for _ in range(200):  # the worker validates off this thread
            if switch.counts['rejected'] == 1 and switch._staged is not None:
                break
            import time

            time.sleep(0.02)
        assert controller.policy is active  # nothing changes before a tick boundary
        events = switch.at_tick(controller, 1.0)
        assert controller.policy is not active and controller.policy_version == 7
        assert 'policy update 7 active' in events[0][1]
        status = switch.status()
        assert status['previous_sha256'] == active.contract.file_sha256
        assert status['updates']['accepted'] == 1 and status['updates']['rejected'] == 1
        assert 'not JSON' in status['updates']['last_rejection']['reason']
        events = switch.after_tick(controller, None, True, 1.1)  # a fault right after the swap
        assert controller.policy is active and 'rolled back' in events[0][1]
        assert switch.status()['updates']['rollbacks'] == 1
        assert switch.request_rollback()[0] is False  # nothing older kept
    finally:
        switch.close()


def test_a_gait_clock_policy_swaps_only_for_another_gait_clock_policy(tmp_path, key_file, active):
    clocked = OnnxPolicy(write_random_policy(tmp_path / 'c1.onnx', weight_scale=0.01,
                                             layout='gait_clock'))  # fmt: skip
    near = write_random_policy(
        tmp_path / 'c2.onnx', weight_scale=0.01, seed=1, layout='gait_clock'
    )
    seen = np.random.default_rng(0).normal(scale=0.5, size=(20, spec.OBS_DIM + 2))  # with clock
    _, candidate, figures = hot_swap.validate(announce(near), key_file, clocked, seen, RELAXED)
    assert candidate.contract.gait_clock and figures['observations'] == 20
    with pytest.raises(UpdateRejected, match='observation differs'):  # 48 terms for a clock policy
        hot_swap.validate(announce(active.contract.path), key_file, clocked, seen, RELAXED)
    with pytest.raises(UpdateRejected, match='observation differs'):
        hot_swap.validate(announce(near), key_file, active, observations(), RELAXED)


def test_only_a_regular_file_of_bounded_size_is_read(tmp_path, key_file):
    fifo = tmp_path / 'pipe.onnx'
    os.mkfifo(fifo)  # no writer: a blocking open would hang the validator for ever
    with pytest.raises(UpdateRejected, match='not a regular file'):
        hot_swap.validate(announce_path(fifo), key_file, None, [])
    with pytest.raises(UpdateRejected, match='not a regular file'):
        hot_swap.validate(announce_path('/dev/zero'), key_file, None, [])
    huge = tmp_path / 'huge.onnx'
    with open(huge, 'wb') as handle:  # sparse: no disk used
        handle.truncate(hot_swap.MAX_POLICY_BYTES + 1)
    with pytest.raises(UpdateRejected, match='bytes; at most'):
        hot_swap.validate(announce_path(huge), key_file, None, [])


def announce_path(path):
    """An unsigned-looking announcement naming path (the file is never signed)."""
    return json.dumps(
        {'path': str(path), 'sha256': '0' * 64, 'version': 2, 'parent_version': 1,
         'signature': '0' * 64}
    )  # fmt: skip


def test_malformed_announcements_are_rejected_not_raised():
    nested = '{"a":' * 100000
    with pytest.raises(UpdateRejected, match='not JSON'):
        hot_swap.parse_update(nested)
    fields = json.loads(announce_path('/x'))
    with pytest.raises(UpdateRejected, match='version'):
        hot_swap.parse_update(json.dumps(fields | {'version': 2**32}))


def test_a_rejection_quotes_only_a_valid_version_and_a_bounded_reason(tmp_path, key_file, active):
    nested = '[' * 990 + ']' * 990
    for text, version in [
        ('{"version": ' + nested + '}', None),  # json.dumps of it overflows a deeper stack
        ('{"version": true}', None),
        ('{"version": 1.5}', None),
        ('{"version": -3}', None),
        (json.dumps({'version': 12, 'path': 'x' * 100_000}), 12),
    ]:
        assert hot_swap.announced_version(text) == version, text[:40]
    switch = PolicySwitch(active, key_file, RELAXED, window=0.5, margin=0.1, observations=20)
    try:
        switch.submit('{"version": ' + nested + '}')
        switch.submit(announce_path('/' + 'p' * 100_000))  # the reason quotes the path
        for _ in range(200):
            if switch.counts['rejected'] == 2:
                break
            time.sleep(0.02)
        status = switch.status()
        assert status['updates']['rejected'] == 2
        rejection = status['updates']['last_rejection']
        assert rejection['version'] == 2 and len(rejection['reason']) <= hot_swap.MAX_REASON
        json.dumps(status)  # what policy_node publishes on /policy/status, on any thread
    finally:
        switch.close()


@pytest.mark.parametrize('name', ['max_action_deviation', 'max_mean_action_deviation',
                                  'inference_budget'])  # fmt: skip
@pytest.mark.parametrize('value', [float('nan'), float('inf'), 0.0, -1.0])
def test_limits_that_would_switch_a_check_off_are_refused(name, value):
    with pytest.raises(ValueError, match=name):
        SwapLimits(**{name: value})


@pytest.mark.parametrize('window, margin', [(float('nan'), 0.2), (0.0, 0.2), (5.0, float('inf'))])
def test_a_rollback_that_could_never_trigger_is_refused(window, margin):
    with pytest.raises(ValueError, match='refused'):
        PolicySwitch(None, '', window=window, margin=margin)


def test_the_validator_thread_leaves_the_control_threads_realtime_class(tmp_path):
    seen = {}

    def control_thread():  # stands for policy_node's main thread after set_realtime_priority
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # any class but SCHED_OTHER
        switch = PolicySwitch(None, '')
        seen['parent'] = os.sched_getscheduler(0)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:  # the worker sets its class as it starts
            seen['worker'] = os.sched_getscheduler(switch._worker.native_id)
            if seen['worker'] == os.SCHED_OTHER:
                break
            time.sleep(0.01)
        switch.close()

    thread = threading.Thread(target=control_thread)
    thread.start()
    thread.join()
    assert seen['parent'] == os.SCHED_IDLE  # what a thread it makes inherits
    assert seen['worker'] == os.SCHED_OTHER


def wait_for(predicate, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def swap_in(switch, controller, path, version, now):
    """Announce path as version, wait until validated, and swap it in at a tick at `now`."""
    switch.submit(announce(path, version=version))
    assert wait_for(lambda: switch._staged is not None)
    events = switch.at_tick(controller, now)
    assert controller.policy_version == version, events
    return events


def test_a_candidate_checked_against_a_policy_no_longer_running_is_not_swapped_in(
    tmp_path, key_file, active
):
    controller, switch = walking_switch(active, key_file)
    try:
        u1 = write_random_policy(tmp_path / 'u1.onnx', weight_scale=0.01, seed=1)
        u2 = write_random_policy(tmp_path / 'u2.onnx', weight_scale=0.01, seed=2)
        # two candidates before a tick: the first is superseded, counted, never active
        switch.submit(announce(u1, version=7))
        assert wait_for(lambda: switch._staged is not None)
        switch.submit(announce(u2, version=8))
        assert wait_for(lambda: switch.counts['rejected'] == 1)
        assert 'superseded by version 8' in switch.status()['updates']['last_rejection']['reason']
        # the running policy changes (a rollback, another swap) after u2 was checked against it
        controller.swap_policy(OnnxPolicy(u1), 7)
        events = switch.at_tick(controller, 1.0)
        assert controller.policy_version == 7  # u2 was compared with the old policy: not taken
        assert switch.counts == {'accepted': 0, 'rejected': 2, 'rollbacks': 0}
        assert 'no longer running' in events[0][1]
        # a candidate staged when a rollback is asked for is dropped, counted
        switch.previous = (active, 1, active.contract.file_sha256)
        switch.submit(announce(u2, version=9))
        assert wait_for(lambda: switch._staged is not None)
        assert switch.request_rollback()[0]
        events = switch.at_tick(controller, 2.0)
        assert controller.policy is active and switch.counts['rejected'] == 3
        assert 'rollback was requested' in switch.status()['updates']['last_rejection']['reason']
    finally:
        switch.close()


def test_a_rolled_back_file_does_not_come_back_by_an_update(tmp_path, key_file, active):
    """The signature covers the bytes alone: a replayed announcement must not undo a rollback."""
    controller, switch = walking_switch(active, key_file)
    try:
        u1 = write_random_policy(tmp_path / 'u1.onnx', weight_scale=0.01, seed=1)
        swap_in(switch, controller, u1, 7, 1.0)
        switch.after_tick(controller, None, True, 1.1)  # a fault: rolled back to the start policy
        assert controller.policy is active and switch.counts['rollbacks'] == 1
        switch.submit(announce(u1, version=8))  # the same signed file, a higher version
        assert wait_for(lambda: switch.counts['rejected'] == 1)
        reason = switch.status()['updates']['last_rejection']['reason']
        assert 'was rolled back as version 7' in reason and 'export a new one' in reason
        events = switch.at_tick(controller, 2.0)  # at most the note that the record was written
        assert all('recorded' in text for _, text in events) and controller.policy is active
        u2 = write_random_policy(tmp_path / 'u2.onnx', weight_scale=0.01, seed=2)
        swap_in(switch, controller, u2, 10, 3.0)  # a new file is taken
        swap_in(switch, controller, active.contract.path, 11, 4.0)  # replaced, not rolled back
    finally:
        switch.close()


def test_a_rollback_is_recorded_beside_the_file_and_refused_after_a_restart(
    tmp_path, key_file, active
):
    """A new PolicySwitch (policy_node restarted) still refuses a file rolled back before."""
    from loco_policy.control import rollback_log

    candidates = tmp_path / 'policies'
    candidates.mkdir()
    u1 = write_random_policy(candidates / 'u1.onnx', weight_scale=0.01, seed=1)
    controller, switch = walking_switch(active, key_file)
    try:
        swap_in(switch, controller, u1, 7, 1.0)
        switch.after_tick(controller, None, True, 1.1)  # a fault: rolled back
        assert controller.policy is active
        record = candidates / rollback_log.LOG_NAME
        assert wait_for(lambda: switch._notes)  # the writer's thread is done
        events = switch.at_tick(controller, 1.2)
        assert events[0][0] == 'info' and str(record) in events[0][1]
        entry = json.loads(record.read_text().splitlines()[-1])
        assert entry['version'] == 7 and entry['file'] == 'u1.onnx'
        assert 'fault' in entry['reason'] or 'DAMP' in entry['reason'], entry
    finally:
        switch.close()
    with open(record, 'a') as handle:  # a line too deep for the parser, and a torn last line
        handle.write('[' * 100_000 + '\n{"sha256": "ab')
    controller, switch = walking_switch(active, key_file)  # the node restarted
    try:
        switch.submit(announce(u1, version=9))
        assert wait_for(lambda: switch.counts['rejected'] == 1)
        reason = switch.status()['updates']['last_rejection']['reason']
        assert 'was rolled back as version 7 at ' in reason and rollback_log.LOG_NAME in reason
        u2 = write_random_policy(candidates / 'u2.onnx', weight_scale=0.01, seed=2)
        swap_in(switch, controller, u2, 10, 3.0)  # another file of the same directory is taken
    finally:
        switch.close()


def test_an_unwritable_record_is_reported_and_an_unreadable_one_refuses(
    tmp_path, key_file, active
):
    from loco_policy.control import rollback_log

    u1 = write_random_policy(tmp_path / 'u1.onnx', weight_scale=0.01, seed=1)
    (tmp_path / rollback_log.LOG_NAME).mkdir()  # neither appendable nor readable as a file
    controller, switch = walking_switch(active, key_file)
    try:
        switch.submit(announce(u1, version=7))
        assert wait_for(lambda: switch.counts['rejected'] == 1)
        reason = switch.status()['updates']['last_rejection']['reason']
        assert 'unreadable' in reason  # fail closed: the record may list this file
        os.rmdir(tmp_path / rollback_log.LOG_NAME)
        swap_in(switch, controller, u1, 8, 1.0)
        (tmp_path / rollback_log.LOG_NAME).mkdir()
        switch.after_tick(controller, None, True, 1.1)  # rolled back; the record cannot be written
        assert controller.policy is active
        assert wait_for(lambda: switch._notes)
        level, text = switch.at_tick(controller, 1.2)[0]
        assert level == 'warning' and 'may not be recorded' in text and 'accepted again' in text
        switch.submit(announce(u1, version=9))  # still refused in this process
        assert wait_for(lambda: switch.counts['rejected'] == 2)
    finally:
        switch.close()
