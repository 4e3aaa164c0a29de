"""loco-train fit-actuator: recovery of known parameters, and clear refusals of bad recordings."""

from dataclasses import replace
import shutil

import numpy as np
import pytest
from ruamel.yaml import YAML

from loco_policy.tools.bag_writer import SplitBagWriter
from loco_train import cli
from loco_train.actuator import (
    bag_reader,
    fit,
    fit_command,
    initial_state,
    recovery,
    sensitivity,
    synthetic,
)
from loco_train.actuator.excitation import Excitation, ExcitationConfig
from loco_train.actuator.model import ActuatorParams


def test_fit_recovers_known_parameters_and_writes_yaml_and_report(tmp_path):
    summary = recovery.run(str(tmp_path), duration=3.0, seed=3, max_iters=12, report=True)
    worst = summary['worst_relative_error_pct']
    for field, goal in recovery.GOALS.items():
        assert worst[field] <= goal, summary
    assert abs(summary['delay_error_ms']) <= 1e3 * recovery.DELAY_GOAL, summary
    document = YAML(typ='safe').load(open(summary['output']))
    assert document['robot'] == 'anymal_c' and document['mujoco_version']
    assert len(document['bags'][0]['sha256']) == 64
    joint = document['joints']['LF_KFE']
    low, high = joint['kp']['interval']
    assert low <= joint['kp']['value'] <= high
    held = document['held_out']['LF_KFE']
    assert held['position_rmse_fitted'] < 0.2 * held['position_rmse_nominal']
    assert held['effort_rmse_fitted'] < 0.2 * held['effort_rmse_nominal']
    report = tmp_path / 'report'
    assert (report / 'report.html').stat().st_size > 10_000
    assert (report / 'held_out.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


@pytest.fixture(scope='module')
def short_bag(tmp_path_factory):
    """A 1.5 s synthetic recording (nominal drive)."""
    root = tmp_path_factory.mktemp('bags')
    schedule = Excitation(ExcitationConfig(duration=1.5))
    return synthetic.record(str(root / 'good'), schedule, ActuatorParams())


def fit_fails(bags, tmp_path, capsys):
    """Run fit-actuator expecting the refusal; return its stderr (no YAML written)."""
    output = tmp_path / 'out.yaml'
    assert cli.main(['fit-actuator', *map(str, bags), '--output', str(output)]) == 2
    assert not output.exists()
    return capsys.readouterr().err


def copy_topics(source, target, keep, rename=None, drop=None, drop_topic='/joint_states',
                edit=None):  # fmt: skip
    """Rewrite a bag with only the topics in keep, joint names mapped through rename, the
    drop_topic messages with bag times (ns) in the drop interval left out, and each message
    passed through edit(topic, index, msg) where given."""
    from pathlib import Path

    from rosbags.highlevel import AnyReader

    writer = SplitBagWriter(str(target), split_size=0, split_duration=0, flush_period=0,
                            fsync=False)  # fmt: skip
    for topic in keep:
        writer.add_topic(topic, 'sensor_msgs/msg/JointState')
    counts = {}  # messages seen per topic
    with AnyReader([Path(source)], default_typestore=writer.typestore) as reader:
        for connection, stamp, raw in reader.messages():
            if connection.topic not in keep:
                continue
            if drop and connection.topic == drop_topic and drop[0] <= stamp < drop[1]:
                continue
            if rename or edit:
                msg = reader.deserialize(raw, connection.msgtype)
                if rename:
                    msg.name = [rename(n) for n in msg.name]
                if edit:
                    counts[connection.topic] = counts.get(connection.topic, -1) + 1
                    msg = edit(connection.topic, counts[connection.topic], msg)
                raw = writer.typestore.serialize_cdr(msg, connection.msgtype)
            writer.write(connection.topic, stamp, raw)
    writer.close()
    return target


def test_a_bag_without_the_commands_is_refused(short_bag, tmp_path, capsys):
    bag = copy_topics(short_bag, tmp_path / 'states_only', ['/joint_states'])
    assert 'no /joint_command messages' in fit_fails([bag], tmp_path, capsys)


def test_joint_names_that_do_not_match_are_refused(short_bag, tmp_path, capsys):
    bag = copy_topics(short_bag, tmp_path / 'renamed', ['/joint_states', '/joint_command'],
                      rename=lambda n: n.replace('LF_', 'FL_'))  # fmt: skip
    error = fit_fails([bag], tmp_path, capsys)
    assert 'joint names' in error and 'LF_HAA' in error


def test_too_little_excitation_names_the_unidentifiable_parameters(tmp_path, capsys):
    still = Excitation(ExcitationConfig(duration=1.5, amplitude=1e-4))
    bag = synthetic.record(str(tmp_path / 'still'), still, ActuatorParams())
    error = fit_fails([bag], tmp_path, capsys)
    assert 'too little excitation' in error and 'LF_HAA' in error and 'armature' in error


def test_a_standing_recording_is_refused(tmp_path, capsys):
    schedule = Excitation(ExcitationConfig(duration=1.5))
    bag = synthetic.record(str(tmp_path / 'standing'), schedule, ActuatorParams(),
                           fixed_base=False)  # fmt: skip
    error = fit_fails([bag], tmp_path, capsys)
    assert 'not a hanging robot' in error and 'KFE' in error, error


@pytest.fixture(scope='module')
def noisy_problem(tmp_path_factory):
    """A 1.5 s recording of known drives with sensor noise, as a fit problem, and the truth."""
    truth = recovery.draw_truth(3)
    root = tmp_path_factory.mktemp('noisy')
    schedule = Excitation(ExcitationConfig(duration=1.5))
    bag = synthetic.record(str(root / 'bag'), schedule, truth, noise=recovery.NOISE, seed=3)
    _, model = fit.fit_model()
    groups, _ = fit_command._sequences([bag], 0.25, model)
    return fit.build_problem(groups, fit.weights_of(groups[0][3])), truth


def test_leg_grouped_jacobian_equals_the_full_finite_differences(noisy_problem):
    problem, truth = noisy_problem
    params = fit.exact_parameter_dict(truth)
    x = params.as_vector()
    J = sensitivity.jacobian(problem, params, x)
    step = sensitivity.fd_steps(params, x)
    r0 = np.concatenate(problem.residual_fn(x, params)[0])
    shifted = np.concatenate(problem.residual_fn(x[:, None] + np.diag(step), params)[0], axis=0)
    full = (shifted - r0[:, None]) / step
    assert J.shape == full.shape == (r0.size, 61)
    np.testing.assert_allclose(J, full, rtol=0, atol=1e-6 * np.abs(full).max())


def test_a_noisy_recorded_start_is_re_estimated_with_the_model(noisy_problem):
    problem, truth = noisy_problem
    noise = {'q': np.full(12, recovery.NOISE[0]), 'tau': np.full(12, recovery.NOISE[2])}
    (sequence,) = problem.sequences
    kick = sequence.qd0 + np.where(np.arange(12) % 2, 0.06, -0.06)  # rad/s, 3 sigma
    groups = [(*problem.groups[0][:3], [replace(sequence, qd0=kick)])]

    def window_rmse(groups):
        ((q, _),) = fit.predict(fit.build_problem(groups, noise), truth)
        keep = sequence.times < initial_state.WINDOW
        return np.sqrt(np.mean((q[keep] - sequence.q[keep]) ** 2, axis=0)).max()

    estimated = fit.estimate_starts(groups, truth, noise)
    assert window_rmse(groups) > 3 * recovery.NOISE[0]  # the kicked start rings
    assert window_rmse(estimated) < 1.3 * recovery.NOISE[0]  # the estimate's rollout: noise


def test_a_truncated_mcap_is_refused(short_bag, tmp_path, capsys):
    bag = tmp_path / 'truncated'
    shutil.copytree(short_bag, bag)
    mcap = next(bag.glob('*.mcap'))
    data = mcap.read_bytes()
    mcap.write_bytes(data[: len(data) // 2])
    error = fit_fails([bag], tmp_path, capsys)
    assert 'cannot read the bag' in error or 'truncated' in error, error


def test_gaps_split_a_recording_into_segments(short_bag, tmp_path, monkeypatch):
    (segment,) = bag_reader.read(short_bag)
    assert segment.duration > 1.4
    start = int(round(segment.t[0] * 1e9))
    hole = (start + int(0.2e9), start + int(0.4e9))  # 0.2 s without joint states
    bag = copy_topics(short_bag, tmp_path / 'gap', ['/joint_states', '/joint_command'], drop=hole)
    (kept,) = bag_reader.read(str(bag))  # the 0.2 s before the hole is under MIN_SEGMENT
    assert kept.t[0] >= hole[1] * 1e-9 - 1e-6
    monkeypatch.setattr(bag_reader, 'MIN_SEGMENT', 0.1)
    pieces = bag_reader.read(str(bag))
    assert len(pieces) == 2
    assert pieces[0].t[-1] < hole[0] * 1e-9 and pieces[1].t[0] >= hole[1] * 1e-9 - 1e-6
    ctrl = bag_reader.hold_on_grid(pieces[1], pieces[1].t[:3])
    assert ctrl.shape == (3, 36) and np.all(np.isfinite(ctrl))
    with pytest.raises(bag_reader.BagError, match='no such bag'):
        bag_reader.read(str(tmp_path / 'missing'))


def test_states_during_a_command_gap_are_dropped_and_every_segment_has_its_history(
    short_bag, tmp_path, monkeypatch
):
    (whole,) = bag_reader.read(short_bag)
    monkeypatch.setattr(bag_reader, 'MIN_SEGMENT', 0.1)  # keep the short pieces too
    start = int(round(whole.t[0] * 1e9))
    hole = (start + int(0.5e9), start + int(0.8e9))  # 0.3 s without commands
    topics = ['/joint_states', '/joint_command']
    bag = copy_topics(short_bag, tmp_path / 'gap', topics, drop=hole, drop_topic='/joint_command')
    pieces = bag_reader.read(str(bag))
    assert len(pieces) == 2
    period = float(np.median(np.diff(whole.cmd_t)))
    for piece in pieces:
        # every state has the command in force recorded no more than one period before it
        index = np.searchsorted(piece.cmd_t, piece.t + bag_reader.STAMP_TOLERANCE, 'right') - 1
        assert np.all(index >= 0) and np.all(piece.t - piece.cmd_t[index] <= period + 1e-6)
        # and the commands of the HISTORY before its first state (what the delay acts on)
        assert piece.cmd_t[0] <= piece.t[0] - bag_reader.HISTORY + period
    gap_states = (whole.t >= hole[0] * 1e-9 + period) & (whole.t < hole[1] * 1e-9)
    assert gap_states.sum() > 10
    kept = np.concatenate([piece.t for piece in pieces])
    assert not np.isin(whole.t[gap_states], kept).any()
    # after a state gap, the commands before it are the next piece's history
    after = bag_reader.read(
        str(copy_topics(short_bag, tmp_path / 'state_gap', topics, drop=hole))
    )[-1]
    assert (
        after.t[0] >= hole[1] * 1e-9 - 1e-6 and after.cmd_t[0] <= after.t[0] - bag_reader.HISTORY
    )


@pytest.mark.parametrize('fault', ['nan_effort', 'short_velocity', 'no_velocity'])
def test_bad_joint_state_values_are_refused_naming_the_message(short_bag, tmp_path, fault):
    def edit(topic, index, msg):
        if topic == '/joint_states' and index == 40:
            if fault == 'nan_effort':
                msg.effort = msg.effort.copy()
                msg.effort[3] = float('nan')
            else:
                msg.velocity = msg.velocity[: 6 if fault == 'short_velocity' else 0]
        return msg

    topics = ['/joint_states', '/joint_command']
    bag = copy_topics(short_bag, tmp_path / fault, topics, edit=edit)
    expected = 'non-finite effort' if fault == 'nan_effort' else 'fewer velocity values'
    with pytest.raises(bag_reader.BagError, match=expected):
        bag_reader.read(str(bag))


def test_the_applied_commands_are_read_before_the_senders(short_bag, tmp_path):
    """A bag with /joint_command/applied takes its commands from there (the drives' clock), the
    sender's /joint_command (here stamped 3 ms late) only without it; a state stamp repeated
    (a tick that took no physics step) counts once."""
    from pathlib import Path

    from rosbags.highlevel import AnyReader

    (plain,) = bag_reader.read(short_bag)
    writer = SplitBagWriter(str(tmp_path / 'both'), split_size=0, split_duration=0,
                            flush_period=0, fsync=False)  # fmt: skip
    for topic in ('/joint_states', '/joint_command', '/joint_command/applied'):
        writer.add_topic(topic, 'sensor_msgs/msg/JointState')
    repeated = 0
    with AnyReader([Path(short_bag)], default_typestore=writer.typestore) as reader:
        for connection, stamp, raw in reader.messages():
            if connection.topic == '/joint_command':
                writer.write('/joint_command/applied', stamp, raw)  # exact: the drives' own
                msg = reader.deserialize(raw, connection.msgtype)
                msg.header.stamp.nanosec = (msg.header.stamp.nanosec + 3_000_000) % 10**9
                raw = writer.typestore.serialize_cdr(msg, connection.msgtype)
            writer.write(connection.topic, stamp, raw)
            if connection.topic == '/joint_states' and repeated < 5:
                writer.write(connection.topic, stamp, raw)  # the same sample twice
                repeated += 1
    writer.close()
    split = writer.closed_splits[-1] if writer.closed_splits else writer.path
    (both,) = bag_reader.read(str(split))
    assert np.array_equal(both.cmd_t, plain.cmd_t) and np.array_equal(both.cmd_q, plain.cmd_q)
    assert np.array_equal(both.t, plain.t) and np.all(np.diff(both.t) > 0)
    sender = copy_topics(split, tmp_path / 'sender', ['/joint_states', '/joint_command'])
    (late,) = bag_reader.read(str(sender))
    assert not np.array_equal(late.cmd_t, plain.cmd_t)  # the 3 ms are seen without the topic


def shift_stamp(msg, seconds):
    """msg with its header stamp moved by seconds."""
    ns = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec + round(seconds * 1e9)
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 10**9)
    return msg


def test_commands_stamped_on_a_clock_off_the_states_are_refused(short_bag, tmp_path, capsys):
    """The sender's clock 20 ms behind the robot's: the delay fit would absorb the 20 ms."""
    topics = ['/joint_states', '/joint_command']
    behind = copy_topics(
        short_bag, tmp_path / 'behind', topics,
        edit=lambda topic, i, msg: shift_stamp(msg, -0.02) if topic == topics[1] else msg,
    )  # fmt: skip
    messages, received = bag_reader._messages(str(behind))
    assert bag_reader.clock_offset(messages, received) == pytest.approx(-0.02, abs=1e-6)
    err = fit_fails([behind], tmp_path, capsys)
    assert '/joint_command is stamped on a clock -20.0 ms off the /joint_states clock' in err
    assert 'chrony' in err and '/joint_command/applied' in err
    both = copy_topics(  # the same states, and the commands' own stamps
        short_bag, tmp_path / 'both', topics,
        edit=lambda topic, i, msg: shift_stamp(msg, 0.004) if topic == topics[1] else msg,
    )  # fmt: skip
    assert len(bag_reader.read(str(both))) == 1  # 4 ms: within the tolerance
    assert len(bag_reader.read(str(behind), clock_tolerance=0.025)) == 1  # --clock-tolerance


def test_the_fit_imports_neither_torch_nor_warp():
    import subprocess
    import sys

    code = (
        'import sys; from loco_train import cli; import loco_train.actuator.fit_command, '
        'loco_train.actuator.fit, loco_train.actuator.report, loco_train.actuator.recovery; '
        "from mujoco import sysid; print(sorted(m for m in ('torch', 'warp') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, '-c', code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == '[]'
