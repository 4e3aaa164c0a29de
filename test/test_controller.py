import numpy as np
import pytest

from loco_policy import spec
from loco_policy.control.controller import Controller, ControllerConfig
from loco_policy.control.safety import Mode
from loco_policy.observation import quat_rotate_inverse
from loco_policy.policy_file import OnnxPolicy
from loco_policy.sim.backends import MujocoBackend
from test.helpers.deploy_fixtures import make_policy_file

DT = spec.CONTROL_DT


class Loop:
    """Controller and MuJoCo backend in one process, stepped on a simulated clock."""

    def __init__(self, policy=None, **config):
        self.ctrl = Controller(ControllerConfig(**config), policy)
        self.sim = MujocoBackend()
        self.t, self.commands, self.rows = 0.0, [], []
        self.stamp = lambda t: 1000.0 + t  # header stamp (s) of the inputs sent at t
        self.substeps = int(round(DT / self.sim.dt))

    def feed(self):
        s = self.sim.state()
        w, x, y, z = s.base_quat
        stamp = self.stamp(self.t)
        self.ctrl.on_joint_state(spec.JOINT_NAMES, s.q, s.qd, s.tau, self.t, stamp)
        self.ctrl.on_imu((x, y, z, w), s.base_ang_vel, self.t, stamp)
        self.ctrl.on_odom(s.base_lin_vel, self.t, stamp)

    def run(self, seconds, feed=True):
        for _ in range(int(round(seconds / DT))):
            if feed:
                self.feed()
            tick = self.ctrl.step(self.t)
            assert tick.command.is_finite()
            self.commands.append(tick.command)
            if tick.row is not None:
                self.rows.append(tick.row)
            for _ in range(self.substeps):
                self.sim.step(tick.command)
            self.t += DT
        return self.ctrl.fsm.mode


@pytest.fixture(scope='module')
def policy(tmp_path_factory):
    return OnnxPolicy(make_policy_file(tmp_path_factory.mktemp('p') / 'p.onnx', weight_scale=0.01))


def test_passive_then_stand_reaches_the_default_pose_without_a_policy():
    loop = Loop(stand_duration=1.0)
    assert loop.run(0.5) is Mode.PASSIVE and np.all(loop.commands[-1].kp == 0)
    assert loop.commands[-1].kd.min() > 0
    ok, _ = loop.ctrl.request('start', loop.t)
    assert ok and loop.run(2.5) is Mode.STAND
    assert loop.ctrl.stand_progress(loop.t) == 1.0
    assert np.allclose(loop.commands[-1].position, spec.DEFAULT_JOINT_POS)
    assert loop.sim.state().base_pos[2] > 0.4
    ok, message = loop.ctrl.request('start', loop.t)
    assert not ok and 'no policy file loaded' in message
    steps = np.abs(np.diff([c.position for c in loop.commands], axis=0))
    assert steps.max() <= loop.ctrl.config.max_target_step + 1e-9


def test_the_status_hint_follows_the_mode(policy):
    loop = Loop(policy, stand_duration=0.5)
    loop.run(0.1)
    assert loop.ctrl.status(loop.t)['hint'] == 'call start to stand'
    ok, message = loop.ctrl.request('start', loop.t)
    assert ok and message.endswith('call start again to walk')
    loop.run(0.2)
    assert loop.ctrl.request('start', loop.t) == (
        False,
        'WALK refused: the default pose is not reached yet',
    )
    assert loop.ctrl.status(loop.t)['hint'].startswith('call start to walk')
    loop.run(0.4)
    assert loop.ctrl.request('start', loop.t)[0]
    assert loop.ctrl.status(loop.t)['hint'] == 'call stop to stand'
    loop.run(0.2, feed=False)  # the inputs go stale: watchdog -> DAMP
    status = loop.ctrl.status(loop.t)
    assert status['mode'] == 'DAMP' and status['hint'] == 'call reset'


def test_no_policy_says_walk_is_unavailable_on_the_first_start():
    loop = Loop()
    loop.run(0.1)
    ok, message = loop.ctrl.request('start', loop.t)
    assert ok and message.endswith('WALK unavailable: no policy file loaded')
    assert loop.ctrl.status(loop.t)['hint'].startswith('WALK unavailable: no policy file loaded')


def test_walk_runs_the_policy_and_streams_consecutive_transitions(policy):
    loop = Loop(policy, stand_duration=0.5)
    loop.run(0.1)
    loop.ctrl.request('start', loop.t)
    loop.run(0.6)
    assert loop.ctrl.request('start', loop.t)[0]
    loop.ctrl.on_cmd_vel(5.0, 0.0, 0.0, loop.t)  # clipped to 1.0
    assert loop.ctrl.command.tolist() == [1.0, 0.0, 0.0]
    assert loop.run(0.4) is Mode.WALK
    assert loop.ctrl.command.tolist() == [1.0, 0.0, 0.0]  # fresh for command_timeout 0.5 s
    assert loop.run(0.6) is Mode.WALK
    assert loop.ctrl.command.tolist() == [0.0, 0.0, 0.0]  # operator silent: stand still
    assert loop.ctrl.request('stop', loop.t)[0]
    loop.run(0.1)
    seqs = [r.seq for r in loop.rows]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    walk = [r for r in loop.rows if r.mode == 'WALK']
    assert len(walk) == 50 and len({r.episode for r in walk}) == 1
    assert [r.truncated for r in loop.rows].count(True) == 1


def test_stale_inputs_trip_damp_within_three_periods_and_reset_needs_fresh_inputs():
    loop = Loop()
    loop.run(0.2)
    loop.ctrl.request('start', loop.t)
    loop.run(0.2, feed=False)
    history = loop.ctrl.fsm.history
    assert loop.ctrl.fsm.mode is Mode.DAMP and 'watchdog' in loop.ctrl.fsm.fault
    assert history[-1].time - history[-2].time <= 4 * DT + 1e-9  # limit 3 periods, 1 tick late
    assert np.all(loop.commands[-1].kp == 0) and loop.commands[-1].mode == 'DAMP'
    assert not loop.ctrl.request('reset', loop.t)[0]
    loop.run(0.1)
    assert loop.ctrl.fsm.mode is Mode.DAMP  # latched
    assert loop.ctrl.request('reset', loop.t)[0] and loop.ctrl.fsm.mode is Mode.PASSIVE


def test_inputs_on_time_whose_stamps_do_not_advance_are_stale():
    """A hung driver whose last sample is re-sent arrives on time but is not fresh: DAMP."""
    loop = Loop()
    loop.run(0.2)
    loop.ctrl.request('start', loop.t)
    loop.run(0.2)
    assert loop.ctrl.fsm.mode is Mode.STAND
    loop.stamp = lambda t: 1000.4  # frozen on the last sample's stamp, still arriving each tick
    loop.run(0.2)
    assert loop.ctrl.fsm.mode is Mode.DAMP and 'watchdog' in loop.ctrl.fsm.fault
    assert 'not newer than the last' in loop.ctrl.last_rejection


def test_a_backwards_clock_step_costs_one_message_and_unstamped_inputs_are_watched_by_arrival():
    loop = Loop()
    loop.run(0.2)
    loop.ctrl.request('start', loop.t)
    loop.stamp = lambda t: t - 500.0  # the robot's clock stepped back 1,500 s
    loop.run(0.2)
    assert loop.ctrl.rejections == 3  # one message of each input
    loop.stamp = lambda t: 0.0  # unstamped
    loop.run(0.2)
    assert loop.ctrl.fsm.mode is Mode.STAND and loop.ctrl.rejections == 3


def test_non_finite_policy_output_trips_damp(tmp_path):
    path = make_policy_file(tmp_path / 'p.onnx')
    policy = OnnxPolicy(path)
    loop = Loop(policy, stand_duration=0.2)
    loop.run(0.1)
    loop.ctrl.request('start', loop.t)
    loop.run(0.3)
    loop.ctrl.request('start', loop.t)
    policy.act = lambda obs: np.full(12, np.nan)  # the runtime misbehaves mid-run
    assert loop.run(0.1) is Mode.DAMP
    assert loop.ctrl.fsm.fault == 'policy produced non-finite actions'
    assert loop.rows[-1].mode == 'DAMP' and any(r.terminated for r in loop.rows)


def test_garbage_inputs_never_produce_a_non_finite_command():
    rng = np.random.default_rng(0)
    ctrl = Controller()
    t = 0.0
    for i in range(300):
        scale = 10.0 ** rng.integers(-2, 8)
        values = rng.standard_normal(12) * scale
        values[rng.integers(12)] = rng.choice([np.nan, np.inf, 1.0])
        ctrl.on_joint_state(spec.JOINT_NAMES, values, values, values, t)
        ctrl.on_imu(rng.standard_normal(4) * scale, rng.standard_normal(3) * scale, t)
        ctrl.on_odom(rng.standard_normal(3) * scale, t)
        ctrl.on_cmd_vel(*(rng.standard_normal(3) * scale), t)
        if i % 50 == 0:
            ctrl.request(['start', 'reset', 'estop', 'stop'][i // 50 % 4], t)
        tick = ctrl.step(t)
        assert tick.command.is_finite()
        t += DT
    assert ctrl.rejections > 0 and ctrl.last_rejection


def test_tilt_beyond_limits_trips_damp():
    ctrl = Controller()
    ctrl.on_joint_state(spec.JOINT_NAMES, spec.DEFAULT_JOINT_POS, np.zeros(12), [], 0.0)
    ctrl.on_imu((0.0, 0.0, 0.0, 1.0), (0.0, 0.0, 0.0), 0.0)
    ctrl.on_odom((0.0, 0.0, 0.0), 0.0)
    assert ctrl.request('start', 0.0)[0]
    angle = 1.0  # rad of roll, above max_roll 0.8
    ctrl.on_imu((np.sin(angle / 2), 0.0, 0.0, np.cos(angle / 2)), (0.0, 0.0, 0.0), 0.01)
    ctrl.step(0.01)
    assert ctrl.fsm.mode is Mode.DAMP and 'roll 1.00' in ctrl.fsm.fault
    gravity = quat_rotate_inverse([np.cos(angle / 2), np.sin(angle / 2), 0, 0], [0, 0, -1])
    assert gravity[1] < 0  # the observation sees the tilt too


def test_deferred_row_matches_the_inline_row(policy):
    loop = Loop(policy)
    loop.run(0.1)
    loop.feed()
    tick = loop.ctrl.step(loop.t, defer_row=True)
    row = loop.ctrl.take_row()
    assert tick.row is None and row.seq == loop.rows[-1].seq + 1 and row.mode == 'PASSIVE'
    assert loop.ctrl.take_row() is None  # taken once


def test_warming_before_a_tick_changes_nothing_the_loop_sends(policy):
    warmed, plain = Loop(policy, stand_duration=0.2), Loop(policy, stand_duration=0.2)
    for loop in (warmed, plain):
        loop.run(0.1)
        loop.ctrl.request('start', loop.t)
        loop.run(0.3)
        loop.ctrl.request('start', loop.t)
        loop.ctrl.on_cmd_vel(0.5, 0.0, 0.2, loop.t)
    calls = []
    act = policy.act
    policy.act = lambda obs: calls.append(1) or act(obs)
    try:
        for _ in range(10):
            warmed.feed()
            assert warmed.ctrl.warm()  # what policy_node does just before a tick is due
            warmed.run(DT, feed=False)
            plain.run(DT)
        assert not Controller(ControllerConfig(), policy).warm()  # PASSIVE: no inference
    finally:
        policy.act = act
    # both loops share the policy: a warm-up and two ticks each period
    assert warmed.ctrl.fsm.mode is Mode.WALK and len(calls) == 30
    for a, b in zip(warmed.commands, plain.commands):
        assert np.array_equal(a.position, b.position) and a.mode == b.mode
    assert [r.seq for r in warmed.rows] == [r.seq for r in plain.rows]
    assert np.array_equal(warmed.rows[-1].action, plain.rows[-1].action)


def test_policy_actions_are_clipped_to_the_trained_box(tmp_path):
    path = make_policy_file(tmp_path / 'wild.onnx', weight_scale=50.0)  # saturating outputs
    loop = Loop(OnnxPolicy(path), stand_duration=0.2, max_target_step=1.0)
    loop.run(0.1)
    loop.ctrl.request('start', loop.t)
    loop.run(0.3)
    assert loop.ctrl.request('start', loop.t)[0]
    loop.run(0.2)
    walk = [r for r in loop.rows if r.mode == 'WALK']
    actions = np.array([r.action for r in walk])
    assert np.all(actions >= spec.ACTION_LOW - 1e-9) and np.all(actions <= spec.ACTION_HIGH + 1e-9)
    assert np.any(np.isclose(np.abs(actions), spec.ACTION_HIGH))  # it did saturate


@pytest.mark.parametrize(
    'bad',
    [
        {'damping_kd': -5.0},
        {'damping_kd': float('nan')},
        {'stale_periods': float('inf')},
        {'max_target_step': 0.0},
    ],
)
def test_parameters_that_would_disable_a_safety_function_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        ControllerConfig(**bad)


def test_implausible_joint_effort_is_a_fault_not_a_crash():
    loop = Loop()
    loop.run(0.1)
    s = loop.sim.state()
    error = loop.ctrl.on_joint_state(spec.JOINT_NAMES, s.q, s.qd, np.full(12, 1e20), loop.t)
    assert 'effort' in error and loop.ctrl.fsm.mode is Mode.DAMP
    tick = loop.ctrl.step(loop.t)
    assert tick.command.is_finite() and tick.command.mode == 'DAMP'


def test_exploration_noise_is_what_runs_and_what_is_recorded(policy):
    def walk_rows(**config):
        loop = Loop(policy, stand_duration=0.5, **config)
        loop.run(0.1)
        loop.ctrl.request('start', loop.t)
        loop.run(0.6)
        loop.ctrl.request('start', loop.t)
        loop.run(1.0)
        return [r for r in loop.rows if r.mode == 'WALK']

    quiet, noisy = walk_rows(), walk_rows(exploration_std=0.1)
    # the random-weight policy's actions are ~0; noise of std 0.1 shows in the recorded actions
    noise = np.array([r.action - policy.act(r.obs) for r in noisy[1:]])  # (T, 12)
    assert 0.07 < noise.std() < 0.13
    assert np.abs(np.array([r.action - policy.act(r.obs) for r in quiet[1:]])).max() < 1e-5
    with pytest.raises(ValueError, match='exploration_std'):
        ControllerConfig(exploration_std=0.5)


def test_exploration_noise_fades_as_the_base_tilts():
    ctrl = Controller(ControllerConfig(exploration_std=0.1, exploration_tilt=0.3))
    assert ctrl.exploration_scale() == 0.0  # no IMU yet: no noise

    def scale_at(roll, pitch=0.0):
        # w-x-y-z of roll about x, then pitch about y
        cr, sr, cp, sp = np.cos(roll / 2), np.sin(roll / 2), np.cos(pitch / 2), np.sin(pitch / 2)
        ctrl.quat = np.array([cr * cp, sr * cp, cr * sp, -sr * sp])
        return ctrl.exploration_scale()

    assert scale_at(0.0) == 1.0 and scale_at(0.14) == 1.0 and scale_at(-0.1, 0.12) == 1.0
    assert scale_at(0.225) == pytest.approx(0.5, abs=1e-6)
    assert scale_at(0.0, -0.225) == pytest.approx(0.5, abs=1e-6)
    assert scale_at(0.3) == 0.0 and scale_at(0.0, 0.7) == 0.0
    assert Controller(ControllerConfig(exploration_tilt=0.3)).exploration_scale() == 0.0
    with pytest.raises(ValueError, match='exploration_tilt'):
        ControllerConfig(exploration_tilt=0.0)


def test_a_gait_clock_policy_gets_the_clock_restarted_when_walk_begins(tmp_path):
    clocked = OnnxPolicy(make_policy_file(tmp_path / 'c.onnx', layout='gait_clock'))
    assert clocked.contract.gait_clock and clocked.contract.obs_dim == spec.OBS_DIM + 2
    seen = []
    act = clocked.act
    clocked.act = lambda obs: seen.append(np.array(obs)) or act(obs)  # record what it is given
    loop = Loop(clocked, stand_duration=0.3)
    loop.run(0.1)  # inputs first
    assert loop.ctrl.request('start', loop.t)[0]  # PASSIVE -> STAND
    loop.run(0.4)
    for _ in range(2):  # WALK, STAND again, WALK: the clock starts over each time
        assert loop.ctrl.request('start', loop.t)[0]
        seen.clear()
        assert loop.run(0.3) is Mode.WALK
        sin, cos = spec.gait_clock(np.arange(len(seen)))
        got = np.array(seen)
        assert got.shape == (15, 50)
        np.testing.assert_allclose(got[:, -2], sin, atol=1e-6)
        np.testing.assert_allclose(got[:, -1], cos, atol=1e-6)
        assert loop.rows[-1].obs.shape == (spec.OBS_DIM,)  # rows keep the velocity layout
        np.testing.assert_allclose(loop.rows[-1].obs, got[-1, :48], atol=1e-6)
        assert loop.ctrl.request('stop', loop.t)[0]  # WALK -> STAND
        loop.run(0.4)
