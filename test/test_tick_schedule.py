"""TickSchedule: ticks on the state arrival that completes a period, 50 Hz on average."""

import numpy as np
import pytest

from loco_policy.tick_schedule import TickSchedule


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
