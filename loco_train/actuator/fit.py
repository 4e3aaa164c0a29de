"""The actuator fit: mujoco.sysid least squares of the actuator model against recorded segments.

The model is the robot description with the base fixed and the actuator model
(loco_train.actuator.mjcf); its commands are the recorded /joint_command put on the physics grid
by zero-order hold (the drive holds a command until the next), the delay history initialised
with the commands before each segment. The residual compares joint positions (MuJoCo state) and
joint efforts (the joints' total actuator torque) with the recording at its own stamps, each of
the 24 channels (12 positions, 12 efforts) divided by its noise. Parameters, per joint:
kp_scale, kd_scale (realised / commanded gain), armature (kg m^2), friction (N m), damping
(N m s/rad); one delay (s). numpy and mujoco only.

Two passes: the first weighs each channel by its spread over the recording and starts each
rollout from the recorded joint state; then each sequence's start is re-estimated with the model
(loco_train.actuator.initial_state), each channel's noise is estimated as its residual RMS, and
the second pass refits with the residuals divided by those noises (maximum likelihood under
white Gaussian sensor noise). The 95 % intervals are the second pass's linearised ones, with a
Newey-West covariance that widens them where the residuals are correlated
(loco_train.actuator.sensitivity).
"""

import copy
from dataclasses import dataclass, replace

import numpy as np

from loco_policy import spec
from loco_train.actuator import bag_reader, mjcf, sensitivity
from loco_train.actuator import initial_state as start_state
from loco_train.actuator.model import ActuatorParams, MAX_DELAY

FIELDS = ('kp_scale', 'kd_scale', 'armature', 'friction', 'damping')
"""Per-joint fitted fields (12 values each), then 'delay'."""

BOUNDS = {
    'kp_scale': (0.3, 3.0),
    'kd_scale': (0.1, 5.0),
    'armature': (0.0, 0.5),  # kg m^2
    'friction': (0.0, 10.0),  # N m
    'damping': (0.0, 10.0),  # N m s/rad
}
"""Box bounds of the per-joint fields."""

START = ActuatorParams(armature=0.01, delay=0.005)
"""Where the fit starts: nominal gains, friction and damping; small armature and delay."""

NOISE_FLOOR = {'q': 1e-6, 'tau': 1e-4}
"""Smallest noise (rad, N m) a channel is credited with (a noise-free recording's residual is
the simulator's round-off)."""

BURN_IN = 0.5
"""Start (s) of each sequence left out of the first noise estimate: the recorded start's error
still rings there."""

REFINE_ITERS = 5
"""Most iterations of the second pass (it starts at the first one's optimum: on a recording the
model explains it converges in two or three; on one it does not, it creeps by hundredths of a
percent of the cost per iteration)."""

MIN_MOTION = 0.005
"""Smallest spread (rad, std) of a joint's commanded and measured positions for its parameters to
be identifiable."""


class FitError(ValueError):
    """Recordings that do not determine the actuator model, with the reason."""


@dataclass
class Sequence:
    """One segment ready for rollouts: grid controls, measured signals, initial state."""

    name: str
    segment: bag_reader.Segment
    times: np.ndarray
    """(N,) measured stamps (s) from the segment's start, inside the simulated span."""
    q: np.ndarray
    """(N, 12) measured joint positions (rad)."""
    tau: np.ndarray
    """(N, 12) measured efforts (N m)."""
    ctrl: np.ndarray
    """(K, 36) commands on the physics grid (q*, qd*, tau_ff)."""
    history: np.ndarray
    """(nsample, 36) commands at the history's times before the start."""
    q0: np.ndarray
    """(12,) initial joint positions (rad)."""
    qd0: np.ndarray
    """(12,) initial joint velocities (rad/s)."""


def fit_model():
    """The compiled fit model (fixed base, actuator model, torque sensors) and its spec."""
    model_spec = mjcf.build_spec(ActuatorParams(), fixed_base=True, sensors=True)
    return model_spec, model_spec.compile()


def history_times(model):
    """(nsample,) times (s, before t = 0) of the actuator history at the start of a rollout."""
    n = int(model.actuator_history[0, 0])
    return (np.arange(n) - n) * model.opt.timestep


def prepare(segment, model, name):
    """A Sequence of a segment: grid ctrl by zero-order hold, measured signals after t0."""
    dt = model.opt.timestep
    t0 = segment.t[0]
    steps = int(np.floor((segment.t[-1] - t0) / dt))
    grid = t0 + np.arange(steps) * dt
    ctrl = bag_reader.hold_on_grid(segment, grid)
    history = bag_reader.hold_on_grid(segment, t0 + history_times(model))
    rel = segment.t - t0
    keep = (rel > 0.5 * dt) & (rel <= steps * dt + 1e-9)
    return Sequence(name, segment, rel[keep], segment.q[keep], segment.tau[keep], ctrl, history,
                    segment.q[0].copy(), segment.qd[0].copy())  # fmt: skip


def initial_state(model, sequence):
    """mjSTATE_FULLPHYSICS vector at t = 0: the sequence's q0, qd0; the prior commands' history."""
    import mujoco

    data = mujoco.MjData(model)
    data.qpos[:] = sequence.q0
    data.qvel[:] = sequence.qd0
    drives = mjcf.Drives(model)
    times = history_times(model)
    for kind_index, kind in enumerate(mjcf.KINDS):
        for j, index in enumerate(drives.ids[kind]):
            column = sequence.history[:, kind_index * spec.NUM_JOINTS + j]
            mujoco.mj_initCtrlHistory(model, data, int(index), times, column)
    signature = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state = np.zeros(mujoco.mj_stateSize(model, signature))
    mujoco.mj_getState(model, data, state, signature)
    return state


def params_from_vector(values):
    """ActuatorParams from a sysid ParameterDict's values (rounding below a zero bound cut)."""
    return ActuatorParams(**{name: np.maximum(values[name].value, 0.0) for name in FIELDS},
                          delay=max(float(values['delay'].value[0]), 0.0))  # fmt: skip


def parameter_dict(start=START):
    """The sysid ParameterDict of the fit, starting at start, moved off its bounds."""
    from mujoco import sysid

    params = sysid.ParameterDict()
    for name in FIELDS:
        low, high = BOUNDS[name]
        params.add(sysid.Parameter(name, getattr(start, name).copy(),
                                   np.full(12, low), np.full(12, high)))  # fmt: skip
    dt = 0.005
    params.add(sysid.Parameter('delay', start.delay, 0.0, MAX_DELAY - dt))
    return params.move_off_bounds()


def exact_parameter_dict(params):
    """The sysid ParameterDict holding exactly params (ActuatorParams)."""
    values = parameter_dict(params)
    for name in FIELDS:  # parameter_dict moves values off bounds: put them back exactly
        values[name].value[:] = getattr(params, name)
    values['delay'].value[:] = params.delay
    return values


def write_params(model, params, kp, kd, limit):
    """Write params (ActuatorParams) into model at commanded gains kp, kd and limits (12,)."""
    drives = mjcf.Drives(model)
    drives.set_params(params, kp, kd)
    drives.set_gains(
        params.kp_scale * kp, params.kd_scale * kd, np.minimum(limit, spec.TORQUE_LIMIT)
    )
    return model


class ModelBuilder:
    """sysid build_model: a copy of one compiled model per spec with the candidate written in."""

    def __init__(self):
        """No models yet."""
        self.base = {}  # id(spec) -> (compiled model, commanded kp, kd, limit (12,))

    def register(self, model_spec, model, kp, kd, limit):
        """Remember the compiled model of a spec and the commanded gains of its segments."""
        self.base[id(model_spec)] = (model, kp, kd, limit)

    def __call__(self, params, model_spec):
        """The model for the parameters in params (a sysid ParameterDict)."""
        base, kp, kd, limit = self.base[id(model_spec)]
        return write_params(copy.copy(base), params_from_vector(params), kp, kd, limit)


def make_residual(weights):
    """Sysid modify_residual comparing q (state) and tau (sensors) at the measured stamps.

    weights: {'q': (12,), 'tau': (12,)} divisors (rad, N m) of the joints' signals. The residual
    of a sequence is (N, 24): per stamp the 12 positions, then the 12 efforts.
    """
    from mujoco import sysid

    def modify_residual(params, pred_sensordata, measured_sensordata, model, return_pred_all,
                        state=None, **_):  # fmt: skip
        times = state[:, 0]
        q_pred = state[:, 1 : 1 + model.nq]
        tau_pred = pred_sensordata.data[:, spec.NUM_JOINTS : 2 * spec.NUM_JOINTS]
        t_meas = measured_sensordata.times
        predicted = np.concatenate([q_pred, tau_pred], axis=1)
        at = start_state.interpolate(times, predicted[None], t_meas)[0]
        scale = np.concatenate([weights['q'], weights['tau']])
        res = (at - measured_sensordata.data) / scale
        pred_ts = sysid.TimeSeries(t_meas, at, measured_sensordata.signal_mapping)
        return res, pred_ts, measured_sensordata

    return modify_residual


def measured_names():
    """Signal names of the measured TimeSeries: joint positions, then joint torques."""
    from mujoco import sysid

    names = [(f'{n}_qpos', sysid.SignalType.MjStateQPos) for n in spec.JOINT_NAMES]
    names += [(f'{n}_tau', sysid.SignalType.MjSensor) for n in spec.JOINT_NAMES]
    return names


@dataclass
class Problem:
    """The sysid objects of one fit."""

    groups: list
    """[(kp, kd, limit (12,), [Sequence])] the problem was built from."""
    sequences: list
    models_sequences: list
    residual_fn: object
    builder: ModelBuilder
    weights: dict
    """{'q': (12,) rad, 'tau': (12,) N m} divisors of the residual's channels."""


def build_problem(sequences_by_gain, weights):
    """Sysid ModelSequences (one spec per commanded gain set) and the residual function.

    sequences_by_gain: [(kp, kd, limit, [Sequence])].
    """
    from mujoco import sysid

    builder = ModelBuilder()
    models_sequences, flat = [], []
    for index, (kp, kd, limit, sequences) in enumerate(sequences_by_gain):
        model_spec, model = fit_model()
        builder.register(model_spec, model, kp, kd, limit)
        states, controls, sensors = [], [], []
        for seq in sequences:
            states.append(initial_state(model, seq))
            controls.append(sysid.TimeSeries(np.arange(len(seq.ctrl)) * model.opt.timestep,
                                             seq.ctrl))  # fmt: skip
            data = np.concatenate([seq.q, seq.tau], axis=1)
            sensors.append(sysid.TimeSeries.from_names(seq.times, data, model, measured_names()))
            flat.append(seq)
        models_sequences.append(sysid.ModelSequences(
            f'gains{index}', model_spec, [s.name for s in sequences], states, controls, sensors,
        ))  # fmt: skip
    residual_fn = sysid.build_residual_fn(
        models_sequences=models_sequences, build_model=builder,
        modify_residual=make_residual(weights), resample_true=False,
    )  # fmt: skip
    return Problem(sequences_by_gain, flat, models_sequences, residual_fn, builder, weights)


def weights_of(sequences):
    """Per-joint divisors: spread of measured q (rad) and tau (N m) over all sequences."""
    q = np.concatenate([s.q for s in sequences])
    tau = np.concatenate([s.tau for s in sequences])
    return {'q': np.maximum(q.std(axis=0), 1e-3), 'tau': np.maximum(tau.std(axis=0), 1e-2)}


def check_excitation(sequences):
    """Raise FitError naming the joints (and their parameters) the recordings do not move."""
    targets = np.concatenate([s.ctrl[:, : spec.NUM_JOINTS] for s in sequences])
    q = np.concatenate([s.q for s in sequences])
    spread = np.minimum(targets.std(axis=0), q.std(axis=0))
    still = [n for n, s in zip(spec.JOINT_NAMES, spread) if s < MIN_MOTION]
    if still:
        raise FitError(
            f'too little excitation: joints {still} are commanded or move less than '
            f'{MIN_MOTION} rad (std), so '
            f'their {", ".join(FIELDS)} are unidentifiable; record the excitation node '
            '(identification_mode:=true) on a hanging robot'
        )


def predict(problem, params):
    """[(q (N, 12), tau (N, 12))] predicted at each sequence's stamps under params."""
    values = exact_parameter_dict(params)
    _, preds, _ = problem.residual_fn(values.as_vector(), values, return_pred_all=True)
    return [(p[0].data[:, :12], p[0].data[:, 12:]) for p in preds]


def noise_of(problem, params, burn_in=0.0):
    """{'q': (12,) rad, 'tau': (12,) N m} residual RMS per channel under params, after burn_in s.

    On a recording the model explains, the sensors' noise.
    """
    q, tau = [], []
    for seq, (q_pred, tau_pred) in zip(problem.sequences, predict(problem, params)):
        keep = seq.times >= min(burn_in, 0.5 * seq.times[-1])
        q.append(q_pred[keep] - seq.q[keep])
        tau.append(tau_pred[keep] - seq.tau[keep])
    rms = lambda e: np.sqrt(np.mean(np.concatenate(e) ** 2, axis=0))  # noqa: E731
    return {'q': np.maximum(rms(q), NOISE_FLOOR['q']),
            'tau': np.maximum(rms(tau), NOISE_FLOOR['tau'])}  # fmt: skip


def estimate_starts(groups, params, weights):
    """The groups [(kp, kd, limit, [Sequence])] with each start q0, qd0 estimated under params.

    weights: the channels' noise (rad, N m), as for make_residual (initial_state.estimate).
    """
    import mujoco

    scale = np.concatenate([weights['q'], weights['tau']])
    out = []
    for kp, kd, limit, sequences in groups:
        _, model = fit_model()
        write_params(model, params, kp, kd, limit)
        datas = [mujoco.MjData(model) for _ in range(2)]
        estimated = []
        for seq in sequences:
            q0, qd0 = start_state.estimate(model, initial_state(model, seq), seq.ctrl, seq.times,
                                           np.concatenate([seq.q, seq.tau], axis=1), scale,
                                           datas=datas)  # fmt: skip
            estimated.append(replace(seq, q0=q0, qd0=qd0))
        out.append((kp, kd, limit, estimated))
    return out


@dataclass
class FitResult:
    """What the fit found."""

    params: ActuatorParams
    intervals: dict
    """{field: (12, 2), 'delay': (2,)} 95 % intervals."""
    initial: object
    """sysid ParameterDict at the start."""
    fitted: object
    """sysid ParameterDict at the optimum."""
    opt_result: object
    cost: float
    """Final sum of squared (noise-weighted) residuals."""
    problem: Problem
    """The second pass's problem (estimated starts, noise weights)."""
    noise: dict
    """{'q': (12,) rad, 'tau': (12,) N m} estimated sensor noise per channel."""


def _optimize(problem, initial, max_iters):
    """Sysid least squares of problem from initial with the leg-grouped Jacobian."""
    from mujoco import sysid

    scratch = initial.copy()  # the residual function writes the candidates into it

    def jac(x, r):
        return sensitivity.jacobian(problem, scratch, np.ravel(x), r)

    return sysid.optimize(initial_params=initial, residual_fn=problem.residual_fn,
                          optimizer='mujoco', verbose=False, max_iters=max_iters,
                          x_scale='jac', jacobian=jac)  # fmt: skip


def fit(problem, max_iters=30):
    """Run the two passes (max_iters, REFINE_ITERS); FitError if a parameter is unidentifiable."""
    initial = parameter_dict()
    first, _ = _optimize(problem, initial, max_iters)
    rough = params_from_vector(first)
    groups = estimate_starts(problem.groups, rough, noise_of(problem, rough, BURN_IN))
    noise = noise_of(build_problem(groups, problem.weights), rough)
    problem = build_problem(groups, noise)
    fitted, opt_result = _optimize(problem, first.copy(), min(REFINE_ITERS, max_iters))
    x = fitted.as_vector()
    r = np.concatenate(problem.residual_fn(x, fitted)[0])
    J = sensitivity.jacobian(problem, fitted, x, r)
    opt_result.jac = J
    half = sensitivity.intervals(problem, r, J)
    values = params_from_vector(fitted)
    lo, hi = fitted.get_bounds()
    bad = []
    names = [f'{n}.{f}' for f in FIELDS for n in spec.JOINT_NAMES] + ['delay']
    for name, width, low, high in zip(names, half, lo, hi):
        if not np.isfinite(width) or width > 0.5 * (high - low):
            bad.append(name)
    if bad:
        raise FitError(f'too little excitation: {bad} are unidentifiable from these recordings '
                       '(95 % interval wider than half their range)')  # fmt: skip
    intervals = {}
    offset = 0
    for name in FIELDS:
        value = getattr(values, name)
        w = half[offset : offset + 12]
        intervals[name] = np.stack([value - w, value + w], axis=1)
        offset += 12
    intervals['delay'] = np.array([values.delay - half[-1], values.delay + half[-1]])
    return FitResult(values, intervals, initial, fitted, opt_result, float(r @ r), problem,
                     noise)  # fmt: skip
