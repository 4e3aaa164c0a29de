import pytest

from loco_policy.control.safety import Mode, SafetyStateMachine, Watchdog


def test_start_walks_only_through_stand_with_a_policy():
    fsm = SafetyStateMachine()
    assert fsm.start(0.0, False, True, inputs_ok=False)[0] is False
    assert fsm.start(0.0, False, True, True) == (
        True,
        'STAND: standing up to the default pose; call start again to walk',
    )
    ok, message = fsm.start(0.1, True, False, True, 'no trained policy is shipped yet')
    assert not ok and 'no trained policy' in message and fsm.mode is Mode.STAND
    assert fsm.start(0.2, False, True, True)[0] is False  # pose not reached
    assert fsm.start(0.3, True, True, True)[0] and fsm.mode is Mode.WALK
    assert fsm.stop(0.4)[0] and fsm.mode is Mode.STAND
    assert fsm.stop(0.5)[0] and fsm.mode is Mode.PASSIVE
    assert [t.target for t in fsm.history] == [Mode.STAND, Mode.WALK, Mode.STAND, Mode.PASSIVE]


def test_the_first_start_and_the_hint_say_what_to_call_next():
    fsm = SafetyStateMachine()
    assert fsm.hint(True) == 'call start to stand'
    ok, message = fsm.start(0.0, False, False, True, 'no policy file loaded')
    assert ok and message.endswith('WALK unavailable: no policy file loaded')
    assert 'again' not in message and 'no policy file loaded' in fsm.hint(
        False, 'no policy file loaded'
    )
    assert 'call start to walk' in fsm.hint(True)
    assert fsm.start(0.1, True, True, True)[0] and fsm.hint(True) == 'call stop to stand'
    fsm.trip(0.2, 'estop requested')
    assert fsm.hint(True) == 'call reset'
    assert fsm.reset(0.3, inputs_ok=True)[0] and fsm.hint(True) == 'call start to stand'


def test_damp_is_latched_until_reset_with_fresh_inputs():
    fsm = SafetyStateMachine()
    fsm.start(0.0, False, True, True)
    assert fsm.trip(0.1, 'watchdog') and fsm.mode is Mode.DAMP
    assert not fsm.trip(0.2, 'again') and fsm.fault == 'watchdog'
    assert not fsm.start(0.3, True, True, True)[0]
    assert not fsm.stop(0.3)[0]
    assert not fsm.reset(0.4, inputs_ok=False)[0] and fsm.mode is Mode.DAMP
    assert fsm.reset(0.5, inputs_ok=True)[0] and fsm.mode is Mode.PASSIVE and fsm.fault == ''


def test_watchdog_arms_after_every_input_and_names_the_stale_one():
    dog = Watchdog(limit=0.06)
    dog.feed('/joint_states', 0.0)
    dog.feed('/imu', 0.0)
    assert not dog.armed and dog.fault(10.0) == ''
    dog.feed('/odom', 0.0)
    assert dog.armed and dog.fault(0.05) == ''
    dog.feed('/joint_states', 0.07)
    dog.feed('/odom', 0.07)
    reason = dog.fault(0.08)
    assert '/imu 80 ms' in reason and '/odom' not in reason and 'limit 60 ms' in reason
    assert dog.stale(0.08) == ['/imu']


def fed_watchdog(t, idle=0.03):
    dog = Watchdog(limit=0.06, idle=idle)
    for name in dog.names:
        dog.feed(name, t)
    dog.awake(t)
    return dog


def test_the_nodes_own_stall_is_not_counted_in_input_ages_but_silence_while_awake_is():
    dog = fed_watchdog(1.0)
    assert dog.awake(1.13) == pytest.approx(0.1)  # no callback for 130 ms: a 100 ms stall
    assert dog.fault(1.15) == '' and dog.behind_stall()
    dog.feed('/imu', 1.0)  # a message that waited out the stall does not move the age back
    assert dog.ages(1.15)['/imu'] == pytest.approx(0.05)
    assert '/joint_states 70 ms' in dog.fault(1.17)  # silent while the node ran: stale
    for name in dog.names:
        dog.feed(name, 1.14)  # what was queued during the stall
    assert not dog.behind_stall() and dog.stalls == 1


def test_a_long_stall_is_forgiven_only_up_to_max_credit():
    dog = fed_watchdog(1.0)
    assert dog.awake(2.03) == pytest.approx(1.0)  # the controller was gone for a second
    assert 'stale' in dog.fault(2.03) and dog.ages(2.03)['/odom'] == pytest.approx(1.03 - 0.2)


def test_repeated_stalls_do_not_hide_an_input_that_went_quiet():
    """Callbacks 100 ms apart (a starved node): /imu dead from 1.0 s, the others coming."""
    dog = fed_watchdog(1.0)
    t, tripped = 1.0, None
    while tripped is None and t < 2.0:
        t += 0.1
        dog.awake(t)
        dog.feed('/joint_states', t)
        dog.feed('/odom', t)
        if dog.fault(t):
            tripped = t
    # one credit of 70 ms for /imu, none after (it has not arrived since): stale by the limit
    assert tripped == pytest.approx(1.2) and dog.stale(tripped) == ['/imu']


def test_an_unstamped_message_between_two_equal_stamps_does_not_let_the_second_through():
    dog = Watchdog(limit=0.06)
    verdicts = [dog.stamp_error('/imu', stamp) for stamp in (5.0, 0.0, 5.0, 0.0, 5.1)]
    assert [bool(v) for v in verdicts] == [False, False, True, False, False]
