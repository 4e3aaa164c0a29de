"""TickSchedule: ticks on the state arrival that completes a period, 50 Hz on average."""

import numpy as np
import pytest

from loco_policy.control.tick_schedule import grid_publish_time, TickSchedule


def simulate(state_period, seconds=4.0, jitter=0.0, seed=0, first_late=0.0):
    """Feed arrivals every state_period (+- jitter) s; return the tick times.

    first_late: s the first arrival comes after its grid time (a start-up burst).
    """
    rng = np.random.default_rng(seed)
    schedule, ticks = TickSchedule(0.02), []
    for k in range(int(seconds / state_period)):
        now = k * state_period + rng.uniform(-jitter, jitter) + (first_late if k == 0 else 0.0)
        if schedule.on_state(now):
            schedule.ticked(now, now)
            ticks.append(now)
    return np.array(ticks)


@pytest.mark.parametrize('rate', [200.0, 400.0, 1000.0, 166.0, 333.0, 196.0, 198.0, 202.0, 204.0])
def test_average_rate_is_50_hz_for_any_state_rate(rate):
    # near 200 Hz too: a phase that followed the stream without bound would tick at rate / 4
    ticks = simulate(1.0 / rate, seconds=20.0)
    periods = np.diff(ticks[5:])
    assert abs(1.0 / periods.mean() - 50.0) < 0.05, 1.0 / periods.mean()
    # each tick lands on an arrival within one state period of its due time
    assert np.all(np.abs(periods - 0.02) <= 1.0 / rate + 1e-9)


def test_divisible_rate_ticks_on_every_fourth_state_exactly():
    ticks = simulate(0.005, jitter=0.0005)
    assert np.allclose(np.diff(ticks[5:]), 0.02, atol=0.0011)


@pytest.mark.parametrize('first_late', [0.0024, 0.0026])
def test_due_grid_settles_on_the_stream_after_a_late_first_state(first_late):
    # A first tick on a late message puts the due grid near the middle between two states;
    # held there, arrival noise of 0.3 ms picks the earlier or the later one (periods of 15 and
    # 25 ms). Pulled towards the triggering arrivals it settles on the stream's phase.
    ticks = simulate(0.005, seconds=20.0, jitter=0.0003, first_late=first_late)
    settled = np.abs(np.diff(ticks[25:]) - 0.02)
    assert settled.max() < 0.001, settled.max()
    assert abs(1.0 / np.diff(ticks[25:]).mean() - 50.0) < 0.01


@pytest.mark.parametrize('first_late', [0.0024, 0.0026])
def test_a_due_grid_without_the_pull_would_flip_between_states(first_late):
    # the failure the pull removes: the same stream with fallback-style ticks (no state time)
    rng = np.random.default_rng(0)
    schedule, ticks = TickSchedule(0.02), []
    for k in range(4000):
        now = k * 0.005 + rng.uniform(-0.0003, 0.0003) + (first_late if k == 0 else 0.0)
        if schedule.on_state(now):
            schedule.ticked(now)
            ticks.append(now)
    assert np.abs(np.diff(ticks[25:]) - 0.02).max() > 0.004


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
