"""The on-robot regression guard: versions scored by command against the reference."""

import numpy as np
import pytest

from loco_policy import spec
from loco_train.finetune.regression import RegressionGuard, tracking_errors

SLICES = spec.observation_slices()
SCALE = spec.observation_scale()


def observations(commands, velocities, yaw_rates):
    """Spec-scaled observations (K, OBS_DIM) with these commands (K, 3), v_xy (K, 2), w_z (K,)."""
    raw = np.zeros((len(commands), spec.OBS_DIM))
    raw[:, SLICES['command']] = commands
    raw[:, SLICES['base_lin_vel']][:, :2] = velocities
    ang = SLICES['base_ang_vel']
    raw[:, ang.start + 2] = yaw_rates
    return raw * SCALE


def rows(command, lin_error, rows=200, yaw_error=0.0):
    """`rows` observations at `command` (vx, vy, wz), off by lin_error in vx and yaw_error."""
    commands = np.tile(np.asarray(command, dtype=float), (rows, 1))
    velocities = commands[:, :2] + np.array([lin_error, 0.0])
    return observations(commands, velocities, commands[:, 2] + yaw_error)


def feed(guard, version, command, lin_error, count=200, falls=0):
    obs = rows(command, lin_error, count)
    ended = np.zeros(count, dtype=bool)
    ended[:falls] = True
    guard.add(np.full(count, version), obs, ended)


def test_tracking_errors_read_the_spec_scaled_observation():
    obs = observations(np.array([[1.0, 0.5, 0.4]]), np.array([[0.7, 0.1]]), np.array([0.1]))
    commands, errors = tracking_errors(obs)
    np.testing.assert_allclose(commands, [[1.0, 0.5, 0.4]])
    np.testing.assert_allclose(errors, [np.hypot(0.3, 0.4) + 0.3])


def test_versions_compare_command_by_command_with_the_reference():
    guard = RegressionGuard(rows=300, margin=0.1)
    feed(guard, 1, (1.0, 0.0, 0.0), 0.4)  # the reference: poor at 1 m/s ...
    feed(guard, 1, (0.0, 0.0, 0.0), 0.1)  # ... good standing
    # version 2 ran only the forward command, 20 % better there: not penalised for missing
    # the easy one, which a plain mean over its rows would do the other way round
    feed(guard, 2, (1.0, 0.0, 0.0), 0.32, count=400)
    change, matched = guard.change(2)
    assert matched == 400
    assert change == pytest.approx(-0.2)
    assert guard.judge(1).regressed is False  # the reference is never its own regression
    verdict = guard.judge(2)
    assert not verdict.regressed
    assert verdict.best_version == 2 and verdict.best_change == pytest.approx(-0.2)


def test_a_version_worse_than_the_best_by_the_margin_is_a_regression():
    guard = RegressionGuard(rows=200, margin=0.1)
    feed(guard, 1, (1.0, 0.0, 0.0), 0.4)
    feed(guard, 2, (1.0, 0.0, 0.0), 0.3)  # -25 %: the best
    assert not guard.judge(2).regressed
    feed(guard, 3, (1.0, 0.0, 0.0), 0.33)  # -17.5 %: within the margin of the best
    assert not guard.judge(3).regressed
    feed(guard, 4, (1.0, 0.0, 0.0), 0.4)  # back at the reference's error: 25 % above the best
    verdict = guard.judge(4)
    assert verdict.regressed and verdict.best_version == 2
    assert 'best -25.0% (version 2)' in verdict.reason
    assert guard.resets == 1  # the one regression found


def test_a_version_that_falls_more_often_is_a_regression_however_it_tracks():
    guard = RegressionGuard(rows=200, margin=0.1)
    feed(guard, 1, (1.0, 0.0, 0.0), 0.4)
    feed(guard, 2, (1.0, 0.0, 0.0), 0.2, falls=2)
    verdict = guard.judge(2)
    assert verdict.regressed and verdict.best_version == 1
    assert verdict.reason == '2 falls in 200 rows'


def test_no_verdict_before_enough_rows_of_commands_the_reference_ran():
    guard = RegressionGuard(rows=300, margin=0.1)
    feed(guard, 1, (1.0, 0.0, 0.0), 0.4, count=300)
    feed(guard, 2, (0.5, 0.0, 0.0), 0.1, count=500)  # a command the reference never ran
    assert guard.judge(2) is None
    feed(guard, 2, (1.0, 0.0, 0.0), 0.4, count=299)
    assert guard.judge(2) is None
    feed(guard, 2, (1.0, 0.0, 0.0), 0.4, count=1)
    assert guard.judge(2) is not None


def test_bad_thresholds_are_refused():
    with pytest.raises(ValueError, match='must be positive'):
        RegressionGuard(rows=0)
    with pytest.raises(ValueError, match='must be positive'):
        RegressionGuard(resolution=0.0)


def test_falls_are_held_to_the_references_rate_so_the_bar_does_not_creep():
    guard = RegressionGuard(rows=100, margin=0.1)
    feed(guard, 1, (1.0, 0.0, 0.0), 0.4, count=100)  # no fall
    for version, falls, lin_error in ((2, 1, 0.38), (3, 2, 0.36), (4, 3, 0.34)):
        # each tracks better than the one before; one fall in 100 is within the bar, more not
        feed(guard, version, (1.0, 0.0, 0.0), lin_error, count=100, falls=falls)
        verdict = guard.judge(version)
        assert verdict.regressed == (falls > 1), verdict
    assert guard.best[0] == 2


def test_non_finite_rows_are_left_out():
    guard = RegressionGuard(rows=100, margin=0.1)
    feed(guard, 1, (1.0, 0.0, 0.0), 0.4, count=100)
    bad = rows((1.0, 0.0, 0.0), 0.4, 5)
    bad[:, 0] = np.nan
    guard.add(np.full(5, 1), bad, np.zeros(5, dtype=bool))
    feed(guard, 2, (1.0, 0.0, 0.0), 0.2, count=100)
    assert guard.rows_of(1) == 100
    assert guard.judge(2).change == pytest.approx(-0.5)


def test_a_version_that_can_never_be_compared_stops_holding_candidates():
    guard = RegressionGuard(rows=100, margin=0.1)
    feed(guard, 1, (1.0, 0.0, 0.0), 0.4, count=100)
    feed(guard, 2, (0.5, 0.3, 0.0), 0.1, count=399)  # commands the reference never ran
    assert guard.judge(2) is None and not guard.settled(2)
    feed(guard, 2, (0.5, 0.3, 0.0), 0.1, count=1)
    assert guard.judge(2) is None and guard.settled(2)
