"""The fit's linearisation: the Jacobian, the parameters' covariance and their 95 % intervals.

The Jacobian is by finite differences with the four legs perturbed together; numpy, scipy and
the problem's mujoco.sysid residual function only. The parameter vector is
loco_train.actuator.fit's: kp_scale, kd_scale, armature, friction, damping (12 joints each,
robot order), then the delay; each sequence's residual is stamp-major, 24 channels (12
positions, 12 efforts) per stamp, in noise units.
"""

import numpy as np

from loco_policy import spec

LEG = np.arange(spec.NUM_JOINTS) // 3
"""(12,) leg of each joint (three joints per leg, robot order): with the base fixed, a joint's
parameters move only its own leg's signals."""

HAC_WINDOW = 0.15
"""Longest lag (s) over which the intervals count residuals as correlated (``covariance``)."""


def residual_legs(problem):
    """(n_res,) leg of each residual row (the rows are stamp-major, 24 channels each)."""
    channel_leg = np.concatenate([LEG, LEG])
    return np.concatenate([np.tile(channel_leg, len(s.times)) for s in problem.sequences])


def fd_steps(params, x):
    """(n,) forward-difference steps of the parameter vector x (backward at the upper bound)."""
    lo, hi = params.get_bounds()
    step = 1e-6 * np.maximum(np.abs(x), 1e-2 * (hi - lo))
    return np.where(x + step > hi, -step, step)


def jacobian(problem, params, x, r0=None):
    """J (n_res, n_params) at x by forward differences, the four legs perturbed together.

    With the base fixed a joint's parameters move only its own leg's residuals, so one rollout
    perturbs a field of the same joint of every leg (16 rollouts instead of 61). r0: the
    residual at x (computed when None).
    """
    n = x.size
    if r0 is None:
        r0 = np.concatenate(problem.residual_fn(x, params)[0])
    r0 = np.ravel(r0)
    legs = residual_legs(problem)
    if legs.size != r0.size:
        raise RuntimeError(f'residual has {r0.size} rows, the sequences give {legs.size}')
    step = fd_steps(params, x)
    per_joint = n - 1  # fields of 12 joints each, the delay last
    groups = [[f * 12 + leg * 3 + i for leg in range(4)] for f in range(per_joint // 12)
              for i in range(3)] + [[per_joint]]  # fmt: skip
    columns = np.repeat(x[:, None], len(groups), axis=1)
    for g, members in enumerate(groups):
        columns[members, g] += step[members]
    shifted = np.concatenate(problem.residual_fn(columns, params)[0], axis=0)
    J = np.zeros((r0.size, n))
    for g, members in enumerate(groups):
        diff = shifted[:, g] - r0
        if len(members) == 1:
            J[:, members[0]] = diff / step[members[0]]
            continue
        for member in members:
            rows = legs == LEG[member % 12]
            J[rows, member] = diff[rows] / step[member]
    return J


def covariance(problem, r, J):
    """Newey-West covariance H^-1 S H^-1 (n_params, n_params) of the parameters, and H^-1.

    r (n_res,) residuals in noise units, J (n_res, n_params). H = J^T J; S sums, per sequence,
    the products of the per-stamp scores g_t = J_t^T r_t (n_params,) up to HAC_WINDOW apart,
    with Bartlett weights. White residuals make S ~ H (the textbook H^-1); residuals correlated
    over a few stamps (a timing error's ringing) make S larger, and the intervals wider.
    Parameters the data do not determine (H singular along them) get an infinite variance.
    """
    H = J.T @ J
    lam, V = np.linalg.eigh(H)
    ok = lam > 1e-15 * lam.max()
    H_inv = (V[:, ok] / lam[ok]) @ V[:, ok].T
    S = np.zeros_like(H)
    offset = 0
    for seq in problem.sequences:
        n = len(seq.times)
        rows = slice(offset, offset + 24 * n)
        g = np.einsum('tcp,tc->tp', J[rows].reshape(n, 24, -1), r[rows].reshape(n, 24))
        lags = int(round(HAC_WINDOW / np.median(np.diff(seq.times)))) if n > 1 else 0
        S += g.T @ g
        for lag in range(1, min(lags, n - 1) + 1):
            G = g[:-lag].T @ g[lag:]
            S += (1.0 - lag / (lags + 1.0)) * (G + G.T)
        offset += 24 * n
    cov = H_inv @ S @ H_inv
    free = np.any(np.abs(V[:, ~ok]) > 1e-8 * np.abs(V).max(axis=1, keepdims=True), axis=1)
    cov[free, free] = np.inf
    return cov, H_inv


def intervals(problem, r, J, alpha=0.05):
    """(n_params,) half widths of the (1 - alpha) intervals: Student t times the parameters' sd.

    The variance is the Newey-West one (``covariance``), never below the white-noise one
    (s^2 H^-1, s^2 the residuals' mean square: mujoco.sysid's calculate_intervals), which it
    matches on white residuals up to its own sampling noise.
    """
    import scipy.special

    cov, H_inv = covariance(problem, r, J)
    dof = max(r.size - J.shape[1], 1)
    variance = np.maximum(np.diag(cov), float(r @ r) / dof * np.diag(H_inv))
    quantile = scipy.special.stdtrit(dof, 1 - alpha / 2)
    return quantile * np.sqrt(np.maximum(variance, 0.0))
