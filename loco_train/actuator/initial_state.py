"""The joint state at the start of a recorded sequence, estimated with the model (ROS-free).

A rollout starts from a joint state, and the recorded one carries the sensors' noise: a velocity
error of a few hundredths of rad/s rings through the lightly damped hanging legs for half a
second (millirad of position error, a correlated residual that biases the fit, narrows its
intervals wrongly and dominates a short held-out segment's RMSE). The estimate is the
(q0, qd0) whose rollout over the sequence's first ``window`` s best matches the measured
positions and efforts, for given actuator parameters: Gauss-Newton from the recorded state
with finite differences and a step shortened where dry friction kinks the response (batched
mujoco.rollouts). The recorded velocities are only its starting point; positions over the window
pin the velocity down far better than one sample (where they do not, as in a joint held by its
friction, the velocity does not matter for the prediction either).
"""

import numpy as np

QPOS = slice(1, 13)
"""The joint positions in a fixed-base model's mjSTATE_FULLPHYSICS vector (after the time)."""

QVEL = slice(13, 25)
"""The joint velocities in that vector."""

WINDOW = 0.5
"""Length (s) of the stretch the start is estimated from (longer than the legs' ring-down)."""

ITERATIONS = 6
"""Most Gauss-Newton steps."""

FRACTIONS = np.array([1.0, 0.5, 0.25, 0.125])
"""Shares of the Gauss-Newton step tried in each iteration (one batched rollout)."""

STEPS = np.concatenate([np.full(12, 1e-5), np.full(12, 1e-3)])
"""Finite-difference steps (rad, rad/s) of q0 and qd0."""


def interpolate(grid, values, times):
    """Linear interpolation (B, K, C) at times (K,) s of values (B, n, C) sampled at grid (n,)."""
    index = np.clip(np.searchsorted(grid, times) - 1, 0, len(grid) - 2)
    w = ((times - grid[index]) / (grid[index + 1] - grid[index]))[None, :, None]
    return (1 - w) * values[:, index] + w * values[:, index + 1]


def predict(model, datas, states, ctrl, times):
    """Predicted q and tau (B, K, 24) at times (K,) s of rollouts from states (B, nstate)."""
    from mujoco import rollout

    state, sensordata = rollout.rollout(model, datas, states, ctrl[None])
    predicted = np.concatenate([state[:, :, QPOS], sensordata[:, :, 12:24]], axis=2)
    if len(state[0]) < 2:
        return np.repeat(predicted, len(times), axis=1)
    return interpolate(state[0, :, 0], predicted, times)


def estimate(model, state0, ctrl, times, measured, scale, window=WINDOW, datas=None):
    """(q0 (12,), qd0 (12,)) whose rollout best matches measured over the first window s.

    model: the fit model with the actuator parameters in; state0: the recorded start (nstate,);
    ctrl (K, 36) on the physics grid; times (N,) s and measured (N, 24) positions and efforts;
    scale (24,) their noise (rad, N m).
    """
    import mujoco

    dt = model.opt.timestep
    steps = int(min(len(ctrl), max(2, round(window / dt))))
    keep = times <= steps * dt + 1e-9
    if keep.sum() < 4:  # too short to say more than the recording does
        return state0[QPOS].copy(), state0[QVEL].copy()
    times, target = times[keep], measured[keep] / scale
    ctrl = ctrl[:steps]
    datas = datas or [mujoco.MjData(model)]

    def residuals(points):
        """(B, K * 24) scaled residuals of rollouts from the starts points (B, 24)."""
        states = np.repeat(state0[None], len(points), axis=0)
        states[:, 1:25] = points
        return (predict(model, datas, states, ctrl, times) / scale - target).reshape(
            len(points), -1
        )

    x = np.concatenate([state0[QPOS], state0[QVEL]])
    r = residuals(x[None])[0]
    cost = float(r @ r)
    for _ in range(ITERATIONS):
        shifted = residuals(x[None] + np.diag(STEPS))
        jacobian = (shifted - r).T / STEPS  # (K * 24, 24)
        dx = np.linalg.lstsq(jacobian, -r, rcond=None)[0]
        # dry friction makes the response kinked: try the step and shorter ones, keep the best
        candidates = x[None] + dx[None] * FRACTIONS[:, None]
        tried = residuals(candidates)
        costs = np.einsum('bk,bk->b', tried, tried)
        best = int(np.argmin(costs))
        if costs[best] >= cost:
            break
        x, r, cost = candidates[best], tried[best], float(costs[best])
        if np.all(np.abs(dx * FRACTIONS[best]) < 0.01 * STEPS):
            break
    return x[:12], x[12:]
