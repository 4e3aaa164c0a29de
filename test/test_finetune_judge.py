"""The fine-tuning demo's verdict on its goal, from paired rows (ROS-free)."""

import pytest

from loco_train.experiments.finetune_demo import Faults, judge
from loco_train.experiments.stack_eval import parse_schedule, SCHEDULE


def row(error, falls=0):
    """A paired evaluation's row: tracking error (m/s + rad/s) and falls."""
    return {'tracking_error': error, 'falls': falls}


NOMINAL = [row(0.20), row(0.19)]


def test_the_goal_needs_30_percent_no_fall_no_damp_and_no_loss_on_the_nominal_robot():
    verdict = judge(row(0.40), row(0.27), NOMINAL, 0, 'stack')
    assert verdict['reached'] and verdict['not_met'] == [] and verdict['on'] == 'stack'
    assert verdict['reduction'] == pytest.approx(0.325)
    cases = {
        '30 % lower tracking error': judge(row(0.40), row(0.2801), NOMINAL, 0, 'stack'),
        'no fall in evaluation': judge(row(0.40), row(0.20, falls=1), NOMINAL, 0, 'stack'),
        'no DAMP while fine-tuning': judge(row(0.40), row(0.20), NOMINAL, 1, 'stack'),
        'no loss on the unperturbed robot': judge(
            row(0.40), row(0.20), [row(0.20), row(0.2001)], 0, 'stack'
        ),
        'no fall on the unperturbed robot': judge(
            row(0.40), row(0.20), [row(0.20), row(0.18, falls=1)], 0, 'stack'
        ),
    }
    for condition, verdict in cases.items():
        assert not verdict['reached'] and verdict['not_met'] == [condition], (condition, verdict)


def test_a_missing_measurement_never_reaches_the_goal():
    assert judge(row(0.40), None, NOMINAL, 0, 'stack')['not_met'] == ['measured']
    assert not judge(row(0.40), row(None), NOMINAL, 0, 'stack')['reached']
    assert not judge(row(0.40), row(0.10), [row(0.20), row(None)], 0, 'stack')['reached']
    assert not judge(row(0.40), row(0.10), None, 0, 'loco-train eval')['reached']


def test_the_stack_schedule_is_parsed_and_a_repeated_name_refused():
    assert parse_schedule('') == SCHEDULE
    assert parse_schedule('stand:1:0,0,0;walk:2:0.5,0,0') == (
        ('stand', 1.0, (0.0, 0.0, 0.0)),
        ('walk', 2.0, (0.5, 0.0, 0.0)),
    )
    with pytest.raises(ValueError, match='must differ'):
        parse_schedule('stop:1:0,0,0;walk:2:0.5,0,0;stop:1:0,0,0')
    with pytest.raises(ValueError, match='name:seconds'):
        parse_schedule('walk:fast:1,0,0')


def test_a_fault_latched_before_the_first_walk_is_kept_apart_from_fine_tuning():
    faults = Faults()
    for mode, fault in [
        (None, None), ('PASSIVE', None), ('DAMP', 'watchdog: stale /odom 62 ms'),
        ('DAMP', 'watchdog: stale /odom 62 ms'), ('PASSIVE', None), ('STAND', None),
        ('WALK', None), ('WALK', None), ('DAMP', 'base tilt'), ('DAMP', 'base tilt'),
        ('PASSIVE', None), ('STAND', None), ('DAMP', 'watchdog: stale /imu 70 ms'),
        ('PASSIVE', None), ('WALK', None),
    ]:  # fmt: skip
        faults.seen(mode, fault)
    assert faults.start_up == ['watchdog: stale /odom 62 ms']
    # after the first WALK every DAMP entry counts, in STAND as well as in WALK, once each
    assert faults.while_fine_tuning == ['base tilt', 'watchdog: stale /imu 70 ms']
