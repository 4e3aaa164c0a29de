"""TickSchedule: ticks on the state arrival that completes a period, 50 Hz on average."""

import numpy as np
import pytest

from loco_policy.control.tick_schedule import grid_publish_time, TickSchedule


def simulate(state_period, seconds=4.0, jitter=0.0, seed=0):
    """Feed arrivals every state_period (+- jitter) s; return the tick times."""
    rng = np.random.default_rng(seed)
    schedule, ticks = TickSchedule(0.02), []
    for k in range(int(seconds / state_period)):
        now = k * state_period + rng.uniform(-jitter, jitter)
        if schedule.on_state(now):
            schedule.ticked(now)
            ticks.append(now)
    return np.array(ticks)


@pytest.mark.parametrize('rate', [200.0, 400.0, 1000.0, 166.0, 333.0])
def test_average_rate_is_50_hz_for_any_state_rate(rate):
    ticks = simulate(1.0 / rate)
    periods = np.diff(ticks[5:])
    assert abs(1.0 / periods.mean() - 50.0) < 0.5, 1.0 / periods.mean()
    # each tick lands on an arrival within one state period of its due time
    assert np.all(np.abs(periods - 0.02) <= 1.0 / rate + 1e-9)


def test_divisible_rate_ticks_on_every_fourth_state_exactly():
    ticks = simulate(0.005, jitter=0.0005)
    assert np.allclose(np.diff(ticks[5:]), 0.02, atol=0.0011)


def test_fallback_ticks_only_when_states_stop():
    schedule = TickSchedule(0.02)
    assert schedule.on_check(0.0)  # nothing ticked yet
    schedule.ticked(0.0)
    assert not schedule.on_check(0.02)  # a state-driven tick is due now: no fallback yet
    assert schedule.on_check(0.026)  # 1.25 periods without a tick
    schedule.ticked(0.026)
    assert not schedule.on_check(0.04) and schedule.on_check(0.052)


def test_resyncs_after_a_gap_instead_of_bursting():
    schedule = TickSchedule(0.02)
    schedule.ticked(0.0)
    assert schedule.on_state(0.5)  # long gap: tick at once
    schedule.ticked(0.5)
    assert not schedule.on_state(0.505)  # and not again until the next period
    assert abs(schedule.next_due - 0.52) < 1e-12


@pytest.mark.parametrize(
    'awake, expected',
    [
        (10.0049, 10.005),  # woken 0.1 ms before the grid point's publish time: waits for it
        (10.00401, 10.005),  # woken on time (lead early)
        (10.0050, 10.005),  # exactly at the publish time
        (10.0062, 10.0062),  # late past the publish time: publishes at once
        (10.0091, 10.010),  # woken for the next grid point, 0.9 ms early
        (10.0001, 10.0001),  # very late for the previous grid point: at once, never before
    ],
)
def test_grid_publish_time_keeps_the_clock_grid(awake, expected):
    # 200 Hz timer from 9.999 s, publishing 1 ms after each firing: at 10.000, 10.005, ...
    assert grid_publish_time(awake, 9.999, 0.005, 0.001) == pytest.approx(expected, abs=1e-9)
