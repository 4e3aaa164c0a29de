"""`loco-train eval FILE --sim mujoco|warp`: a policy file on a fixed 20 s command schedule.

The policy runs exactly as on the robot: the deployment Controller (safety state machine,
action clipping, target rate limit, onnxruntime on the spec's observation at 50 Hz), its PD
commands held over the physics substeps of a loco_policy.sim.backends backend (MuJoCo, the
independent simulator, or the project's Warp simulator). Seeds vary the sensor noise. Reports
the mean absolute tracking error per segment (after a settling time), falls, the feet's air-time
share and swing clearance while moving (MuJoCo kinematics of the rollout), and writes a PNG
of commanded versus measured velocity and, with --video, an MP4 of the first seed's rollout
(loco_policy.tools.video: MuJoCo's offscreen renderer on the backend's state, so a Warp rollout is
drawn by MuJoCo from the Warp qpos). The last printed line is one JSON object.
"""

import argparse
import collections
from dataclasses import dataclass, replace
import json
import os
import sys

import numpy as np

from loco_policy import spec
from loco_policy.control.controller import Controller, ControllerConfig
from loco_policy.control.safety import Mode
from loco_policy.tools.video import (
    parse_size,
    RolloutVideo,
    state_qpos,
    VideoSettings,
    VideoUnavailable,
)
from loco_policy.transition import REWARD_TERMS

SCHEDULE = (
    # name, seconds, command (vx m/s, vy m/s, wz rad/s)
    ('stand', 3.0, (0.0, 0.0, 0.0)),
    ('forward_0.5', 3.5, (0.5, 0.0, 0.0)),
    ('forward_1.0', 3.5, (1.0, 0.0, 0.0)),
    ('sideways_0.5', 3.0, (0.0, 0.5, 0.0)),
    ('turn_1.0', 3.5, (0.0, 0.0, 1.0)),
    ('stop', 3.5, (0.0, 0.0, 0.0)),
)
"""The fixed 20 s command schedule."""

SETTLE_S = 1.0
"""Seconds at the start of each segment left out of its tracking error (the transient)."""

AIR_HEIGHT = 0.01
"""Foot sole height (m) above which a foot counts as in the air (gait figures)."""


class FootHeights:
    """Sole heights (4,) m of the feet, LF RF LH RH, from a qpos (MuJoCo kinematics only)."""

    def __init__(self):
        """Compile the description once."""
        import mujoco

        from loco_policy import description

        self.mujoco = mujoco
        self.model = description.load_model()
        self.data = mujoco.MjData(self.model)
        self.ids = [self.model.geom(name).id for name in spec.FOOT_NAMES]
        self.radius = self.model.geom_size[self.ids, 0]  # (4,) m, spheres

    def __call__(self, qpos):
        """Heights of the foot spheres' lowest points above the ground (4,) m."""
        self.data.qpos[:] = qpos
        self.mujoco.mj_kinematics(self.model, self.data)
        return self.data.geom_xpos[self.ids, 2] - self.radius


def gait_figures(trace, schedule=SCHEDULE):
    """Air-time share and swing clearance of the feet over the moving segments (after settling).

    air_share: fraction of (tick, foot) pairs with the sole above AIR_HEIGHT; clearance_m: mean
    over swings (a foot's ticks in the air in a row) of the swing's highest sole height.
    """
    feet, t, segment = trace['feet'], trace['t'], trace['segment']
    starts = np.cumsum([0.0] + [s for _, s, _ in schedule])
    moving = np.array([
        any(schedule[i][2]) and t[k] - starts[i] > SETTLE_S for k, i in enumerate(segment)
    ], dtype=bool)  # fmt: skip
    if not moving.any():
        return {'air_share': None, 'clearance_m': None, 'swings': 0}
    air = feet > AIR_HEIGHT  # (T, 4)
    apexes = []
    for foot in range(feet.shape[1]):
        up = air[:, foot] & moving
        edges = np.flatnonzero(np.diff(np.concatenate([[0], up.astype(int), [0]])))
        apexes += [float(feet[a:b, foot].max()) for a, b in zip(edges[::2], edges[1::2])]
    return {
        'air_share': float(air[moving].mean()),
        'clearance_m': float(np.mean(apexes)) if apexes else 0.0,
        'swings': len(apexes),
    }


@dataclass
class EvalConfig:
    """Evaluation settings."""

    sim: str = 'mujoco'
    """Backend: 'mujoco' or 'warp'."""
    seeds: int = 10
    """Episodes, each with its own sensor-noise stream."""
    first_seed: int = 0
    """Seed of the first episode: the episodes run seeds first_seed ... first_seed + seeds - 1
    (a later first_seed repeats an evaluation on fresh noise streams and schedule shifts)."""
    lin_vel_noise: float = 0.05
    """Std of the noise on the measured base linear velocity (m/s)."""
    ang_vel_noise: float = 0.05
    """Std of the noise on the measured base angular velocity (rad/s)."""
    joint_vel_noise: float = 0.2
    """Std of the noise on joint velocities (rad/s)."""
    fall_height: float = 0.25
    """Base height (m) below which the robot has fallen."""
    fall_tilt: float = 1.0
    """Roll or pitch (rad) beyond which the robot has fallen."""
    crawl_height: float = 0.38
    """Base height (m) below which a robot that has not fallen is crawling (it walks at
    0.45-0.55 m); reported beside the falls, never counted as one."""
    crawl_s: float = 1.0
    """Seconds below crawl_height after which an episode without a fall counts as a crawl."""
    payload: float = 0.0
    """Mass (kg) added to the base, as sim_robot's payload parameter."""
    gain_scale: float = 1.0
    """Multiplier on the commanded kp and kd (weaker drives below 1), as sim_robot's."""
    friction: float = -1.0
    """Sliding friction coefficient (< 0: the description's)."""
    latency: float = 0.0
    """Seconds from a command to its use by the actuators."""
    actuator: str = ''
    """Actuator YAML (fit-actuator's layout) for the MuJoCo drives ('': the ideal PD drive)."""
    stiff_feet: bool = False
    """MuJoCo: feet that sink ~1 mm instead of the description's ~17 mm (Perturbation)."""
    phase_jitter: float = 0.0
    """Seconds: each seed lengthens the schedule's second segment by a draw in [0, phase_jitter)
    and shortens the last by as much, so the gait's phase at every later command change differs
    between seeds (on the stack, timing does that); 0: every seed runs the same schedule."""
    target_jitter: float = 0.0
    """Std (rad) of noise added to every joint target, drawn per seed: with a value far below
    any effect on the gait (1e-6) each seed samples the spread that a chaotic closed loop gives
    identical policies (ONNX rounding, the stack's timing); 0: none."""

    def __post_init__(self):
        """Refuse a negative first seed and a phase_jitter the last segment cannot give up."""
        if self.target_jitter < 0.0:
            raise ValueError(f'target_jitter must be >= 0, not {self.target_jitter}')
        if self.first_seed < 0:
            raise ValueError(f'first_seed must be >= 0, not {self.first_seed}')
        room = SCHEDULE[-1][1] - SETTLE_S
        if not 0.0 <= self.phase_jitter < room:
            raise ValueError(f'phase_jitter must lie in [0, {room}) s, not {self.phase_jitter}')


NO_NOISE = {'lin_vel_noise': 0.0, 'ang_vel_noise': 0.0, 'joint_vel_noise': 0.0}
"""EvalConfig fields for exact velocities, as sim_robot publishes them by default."""


def jittered_schedule(schedule, shift):
    """The schedule with its second segment `shift` s longer and its last as much shorter."""
    out = [list(segment) for segment in schedule]
    out[1][1] += shift
    out[-1][1] -= shift
    return tuple(tuple(segment) for segment in out)


def seed_schedule(seed, phase_jitter):
    """The schedule seed `seed` walks: SCHEDULE shifted by its own draw below phase_jitter s."""
    if not phase_jitter:
        return SCHEDULE
    shift = np.random.default_rng([seed, 1]).uniform(0.0, phase_jitter)  # s
    return jittered_schedule(SCHEDULE, shift)


def schedule_command(t, schedule=SCHEDULE):
    """Return (segment index, command (3,)) at time t (s) of the schedule."""
    start = 0.0
    for index, (_, seconds, command) in enumerate(schedule):
        if t < start + seconds:
            return index, np.asarray(command)
        start += seconds
    return len(schedule) - 1, np.asarray(schedule[-1][2])


def tilt(quat):
    """Roll and pitch magnitude proxy: angle between body z and world z (rad)."""
    w, x, y, z = quat
    return float(np.arccos(np.clip(1.0 - 2.0 * (x * x + y * y), -1.0, 1.0)))


class CommandDelay:
    """Joint commands as the drives see them, `latency` s after they were sent (as sim_robot)."""

    def __init__(self, latency):
        """No command sent yet."""
        self.latency = float(latency)
        self.pending = collections.deque()  # (time the drives use it (s), JointCommand)
        self.current = None

    def send(self, t, command):
        """A command sent at time t (s)."""
        self.pending.append((t + self.latency, command))

    def at(self, t):
        """The command in force at time t (s): the newest arrived (before any: the first sent)."""
        while self.pending and self.pending[0][0] <= t + 1e-9:
            _, self.current = self.pending.popleft()
        return self.current if self.current is not None else self.pending[0][1]


def _control_tick(ctrl, backend, rng, config, t, command=None, delay=None):
    """Feed the backend's (noisy) sensors to the controller, step it, apply its command.

    delay: a CommandDelay (config.latency) the command passes through, or None (no latency).
    """
    state = backend.state()
    w, x, y, z = state.base_quat
    qd = state.qd + rng.normal(0.0, config.joint_vel_noise, spec.NUM_JOINTS)
    ctrl.on_joint_state(spec.JOINT_NAMES, state.q, qd, state.tau, t)
    ctrl.on_imu((x, y, z, w), state.base_ang_vel + rng.normal(0.0, config.ang_vel_noise, 3), t)
    ctrl.on_odom(state.base_lin_vel + rng.normal(0.0, config.lin_vel_noise, 3), t)
    if command is not None:
        ctrl.on_cmd_vel(*command, t)  # streamed every tick, as a teleoperator does
    tick = ctrl.step(t)
    if config.target_jitter > 0.0:
        noise = rng.normal(0.0, config.target_jitter, spec.NUM_JOINTS)  # (12,) rad
        tick = replace(tick, command=replace(tick.command, position=tick.command.position + noise))
    if delay is None:
        for _ in range(int(round(spec.CONTROL_DT / backend.dt))):
            backend.step(tick.command)
        return tick
    delay.send(t, tick.command)
    for j in range(int(round(spec.CONTROL_DT / backend.dt))):
        backend.step(delay.at(t + j * backend.dt))
    return tick


def run_episode(policy, backend, config, seed, video=None, schedule=SCHEDULE):
    """Run the schedule once through the deployment Controller; return traces and falls.

    The robot is stood up exactly as on hardware (PASSIVE -> STAND -> WALK through the safety
    state machine), then the schedule runs in WALK with the controller's action clipping and
    target rate limit. Leaving WALK (a fault) counts as a fall. video (a RolloutVideo or None)
    is offered the state after every schedule tick; it only reads it. schedule: (name, s,
    command) segments, SCHEDULE unless given; the trace adds the joint positions q (T, 12) and
    the feet's sole heights (T, 4) m.
    """
    rng = np.random.default_rng(seed)
    feet = FootHeights()
    delay = CommandDelay(config.latency) if config.latency > 0.0 else None
    backend.reset()
    ctrl = Controller(ControllerConfig(stand_duration=0.5), policy)
    t = 0.0
    for request, seconds in (('start', 0.2), ('start', 1.0)):  # PASSIVE -> STAND -> WALK
        for _ in range(int(round(seconds / spec.CONTROL_DT))):
            _control_tick(ctrl, backend, rng, config, t, delay=delay)
            t += spec.CONTROL_DT
        ctrl.request(request, t)
    if ctrl.fsm.mode is not Mode.WALK:
        raise RuntimeError(f'the controller did not reach WALK: {ctrl.status(t)}')
    steps = int(round(sum(s for _, s, _ in schedule) / spec.CONTROL_DT))
    trace = {'t': [], 'segment': [], 'command': [], 'lin_vel': [], 'ang_vel': [], 'height': [],
             'q': [], 'feet': []}  # fmt: skip
    terms = []  # (7,) raw reward terms of each WALK tick, as the robot computes them
    fell = False
    for k in range(steps):
        segment, command = schedule_command(k * spec.CONTROL_DT, schedule)
        tick = _control_tick(ctrl, backend, rng, config, t, command, delay)
        if tick.row is not None:
            terms.append(tick.row.reward_terms)
        t += spec.CONTROL_DT
        state = backend.state()
        trace['t'].append((k + 1) * spec.CONTROL_DT)
        trace['segment'].append(segment)
        trace['command'].append(command)
        trace['lin_vel'].append(state.base_lin_vel[:2].copy())
        trace['ang_vel'].append(float(state.base_ang_vel[2]))
        trace['height'].append(float(state.base_pos[2]))
        trace['q'].append(state.q.copy())
        trace['feet'].append(feet(state_qpos(state)))
        if video is not None:
            measured = (*state.base_lin_vel[:2], state.base_ang_vel[2])
            video.add(trace['t'][-1], state_qpos(state), command, measured, schedule[segment][0])
        fallen = state.base_pos[2] < config.fall_height or tilt(state.base_quat) > config.fall_tilt
        if fallen or ctrl.fsm.mode is not Mode.WALK:
            fell = True
            break
    trace = {key: np.asarray(value) for key, value in trace.items()}
    trace['fell'] = fell
    trace['reward_terms'] = np.mean(terms, axis=0) if terms else np.full(len(REWARD_TERMS), np.nan)
    return trace


def segment_errors(trace, schedule=SCHEDULE):
    """Mean absolute planar-velocity and yaw-rate errors per segment (nan if not reached)."""
    start, errors = 0.0, {}
    for index, (name, seconds, _) in enumerate(schedule):
        mask = (trace['segment'] == index) & (trace['t'] > start + SETTLE_S)
        start += seconds
        if not np.any(mask):
            errors[name] = {'lin': float('nan'), 'yaw': float('nan')}
            continue
        lin = np.linalg.norm(trace['command'][mask, :2] - trace['lin_vel'][mask], axis=1)
        yaw = np.abs(trace['command'][mask, 2] - trace['ang_vel'][mask])
        errors[name] = {'lin': float(lin.mean()), 'yaw': float(yaw.mean())}
    return errors


def plot(trace, path, title):
    """Write commanded versus measured vx, vy, wz of one episode as a PNG."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
    measured = (trace['lin_vel'][:, 0], trace['lin_vel'][:, 1], trace['ang_vel'])
    for axis, label, column, value in zip(
        axes, ('vx m/s', 'vy m/s', 'wz rad/s'), range(3), measured
    ):
        axis.plot(trace['t'], trace['command'][:, column], 'k--', label='command')
        axis.plot(trace['t'], value, label='measured')
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[0].legend(loc='upper right')
    axes[0].set_title(title)
    axes[-1].set_xlabel('time (s)')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def evaluate(policy_path, config, plot_path=None, video=None):
    """Evaluate a policy file over config.seeds episodes; return the summary dict.

    video (a loco_policy.tools.video.VideoSettings or None): render the first seed's rollout.
    """
    from loco_policy.policy_file import OnnxPolicy
    from loco_policy.sim.backends import make_backend, Perturbation

    policy = OnnxPolicy(policy_path)
    perturbation = Perturbation(
        config.payload, config.friction, config.gain_scale, config.latency, config.stiff_feet
    )
    actuator = None
    if config.actuator:
        from loco_train.actuator import model

        actuator = model.read(config.actuator)
    backend = make_backend(config.sim, perturbation, actuator=actuator)
    recorder = _open_video(video, policy_path, config) if video else None
    per_seed, falls, first, terms, video_summary, gaits = [], 0, None, [], None, []
    crawls, low_s, heights = 0, [], []  # episodes crawled, s below crawl_height, median heights
    fell_in = []  # the schedule segment of each fall
    for seed in range(config.first_seed, config.first_seed + config.seeds):
        schedule = seed_schedule(seed, config.phase_jitter)
        video_here = recorder is not None and first is None
        try:
            trace = run_episode(
                policy, backend, config, seed, recorder if video_here else None, schedule
            )
        finally:
            if video_here:
                video_summary = recorder.close()
        first = trace if first is None else first
        falls += int(trace['fell'])
        if trace['fell']:
            fell_in.append(schedule[int(trace['segment'][-1])][0] if len(trace['segment']) else '')
        low = float(np.sum(trace['height'] < config.crawl_height)) * spec.CONTROL_DT  # s
        crawls += int(not trace['fell'] and low > config.crawl_s)
        low_s.append(low)
        heights.append(float(np.median(trace['height'])))
        per_seed.append(segment_errors(trace, schedule))
        terms.append(trace['reward_terms'])
        gaits.append(gait_figures(trace, schedule))
        print(
            f'seed {seed}: {"FELL" if trace["fell"] else "ok"} at {trace["t"][-1]:.2f} s',
            file=sys.stderr,
        )
    segments = {}
    for name, _, _ in SCHEDULE:
        lin = [e[name]['lin'] for e in per_seed]
        yaw = [e[name]['yaw'] for e in per_seed]
        segments[name] = {
            'lin_err': float(np.nanmean(lin)) if not np.all(np.isnan(lin)) else None,
            'yaw_err': float(np.nanmean(yaw)) if not np.all(np.isnan(yaw)) else None,
        }
    moving = [s for s in segments.values() if s['lin_err'] is not None]
    if plot_path:
        label = f'{os.path.basename(policy_path)} in {config.sim} (seed {config.first_seed})'
        plot(first, plot_path, label)
    return {
        'policy': os.path.abspath(policy_path),
        'sim': config.sim,
        'seeds': config.seeds,
        'first_seed': config.first_seed,
        'perturbation': {
            'payload': config.payload,
            'gain_scale': config.gain_scale,
            'friction': config.friction,
            'latency': config.latency,
            'stiff_feet': config.stiff_feet,
            'actuator': os.path.abspath(config.actuator) if config.actuator else None,
        },  # fmt: skip
        'sensor_noise': [config.lin_vel_noise, config.ang_vel_noise, config.joint_vel_noise],
        'phase_jitter': config.phase_jitter,
        'target_jitter': config.target_jitter,
        'falls': falls,
        'fell_in': fell_in,  # the schedule segment of each fall, in seed order
        'crawls': crawls,  # episodes without a fall and over crawl_s below crawl_height
        'base_height': {  # m over the schedule; s below crawl_height, the most of one episode
            'median': float(np.median(heights)),
            'crawl_height': config.crawl_height,
            'crawl_s': config.crawl_s,
            'max_s_below': float(max(low_s)),
        },
        'gait': {  # means over the seeds (moving segments, after settling)
            key: float(np.mean(values)) if values else None
            for key in ('air_share', 'clearance_m')
            for values in [[g[key] for g in gaits if g[key] is not None]]
        },
        'mean_lin_err': float(np.mean([s['lin_err'] for s in moving])) if moving else None,
        'mean_yaw_err': float(np.mean([s['yaw_err'] for s in moving])) if moving else None,
        'segments': segments,
        'reward_terms': {  # raw per-tick means over the schedule and the seeds
            name: float(value) for name, value in zip(REWARD_TERMS, np.nanmean(terms, axis=0))
        },
        'plot': os.path.abspath(plot_path) if plot_path else None,
        'video': video_summary,
    }


def _open_video(settings, policy_path, config):
    """A RolloutVideo of settings, captioned with the policy file, simulator and seed."""
    sim = {'mujoco': 'MuJoCo', 'warp': 'Warp'}[config.sim]  # both drawn by MuJoCo
    caption = settings.caption or (
        f'{os.path.basename(policy_path)} in {sim}, seed {config.first_seed}'
    )
    return RolloutVideo(replace(settings, caption=caption))


def add_arguments(parser):
    """`loco-train eval FILE [--sim mujoco|warp] [--seeds N] [--plot PNG] [--video MP4]`."""
    parser.add_argument('policy', help='ONNX policy file')
    parser.add_argument('--sim', default='mujoco', choices=('mujoco', 'warp'))
    parser.add_argument('--seeds', type=int, default=10)
    parser.add_argument(
        '--first-seed', type=int, default=0, help='seed of the first episode (default 0)'
    )
    parser.add_argument('--payload', type=float, default=0.0, help='kg added to the base')
    parser.add_argument(
        '--gain-scale', type=float, default=1.0, help='multiplier on kp and kd (weaker drives < 1)'
    )
    parser.add_argument(
        '--friction', type=float, default=-1.0, help="sliding friction (< 0: the description's)"
    )
    parser.add_argument('--latency', type=float, default=0.0, help='s from command to actuators')
    parser.add_argument(
        '--actuator', default='', help='actuator model YAML for the drives (MuJoCo; fit-actuator)'
    )
    parser.add_argument(
        '--stiff-feet', action='store_true',
        help="MuJoCo: feet that sink ~1 mm instead of the description's ~17 mm",
    )  # fmt: skip
    parser.add_argument(
        '--phase-jitter', type=float, default=0.0,
        help='s: each seed shifts the command changes by a draw below this (0: the same for all)',
    )  # fmt: skip
    parser.add_argument(
        '--target-jitter', type=float, default=0.0,
        help='rad: noise on every joint target, drawn per seed (1e-6 samples a chaotic '
        "loop's spread without changing the gait; 0: none)",
    )  # fmt: skip
    parser.add_argument(
        '--sensor-noise', action=argparse.BooleanOptionalAction, default=True,
        help='noise on the measured velocities (--no-sensor-noise: exact, as sim_robot sends)',
    )  # fmt: skip
    parser.add_argument('--plot', default='', help='PNG of command vs measured (the first seed)')
    parser.add_argument('--video', default='', help='MP4 of the rollout (the first seed)')
    parser.add_argument('--video-fps', type=float, default=25.0, help='video frames per s')
    parser.add_argument('--video-size', default='640x480', help='video WIDTHxHEIGHT (pixels)')
    parser.add_argument(
        '--video-shadows', action=argparse.BooleanOptionalAction, default=None,
        help='draw shadows in the video (default: only on a hardware GL)',
    )  # fmt: skip


def run(args):
    """Evaluate, print a table and one JSON line; exit 1 on any fall."""
    video = None
    if args.video:
        try:
            width, height = parse_size(args.video_size)
            video = VideoSettings(
                args.video, args.video_fps, width, height, shadows=args.video_shadows
            )
        except ValueError as error:
            print(f'loco-train eval: {error}', file=sys.stderr)
            return 2
    try:
        config = EvalConfig(
            sim=args.sim, seeds=args.seeds, first_seed=args.first_seed, payload=args.payload,
            gain_scale=args.gain_scale,
            friction=args.friction, latency=args.latency, actuator=args.actuator,
            stiff_feet=args.stiff_feet, phase_jitter=args.phase_jitter,
            target_jitter=args.target_jitter, **({} if args.sensor_noise else NO_NOISE),
        )  # fmt: skip
    except ValueError as error:
        print(f'loco-train eval: {error}', file=sys.stderr)
        return 2
    try:
        summary = evaluate(args.policy, config, args.plot or None, video)
    except VideoUnavailable as error:  # only raised when a video was asked for
        print(f'loco-train eval: {error}', file=sys.stderr)
        return 1
    print(f'{"segment":<14}{"lin err m/s":>12}{"yaw err rad/s":>15}')
    for name, errors in summary['segments'].items():
        lin = 'n/a' if errors['lin_err'] is None else f'{errors["lin_err"]:.3f}'
        yaw = 'n/a' if errors['yaw_err'] is None else f'{errors["yaw_err"]:.3f}'
        print(f'{name:<14}{lin:>12}{yaw:>15}')
    print(f'falls: {summary["falls"]} of {summary["seeds"]}')
    height = summary['base_height']
    print(f'crawls: {summary["crawls"]} of {summary["seeds"]} (over {height["crawl_s"]:g} s '
          f'below {height["crawl_height"]:g} m without a fall); base height median '
          f'{height["median"]:.3f} m')  # fmt: skip
    gait = summary['gait']
    if gait['air_share'] is not None:
        print(f'feet in the air {100 * gait["air_share"]:.0f} % of the moving time, swing '
              f'clearance {100 * gait["clearance_m"]:.1f} cm')  # fmt: skip
    print(
        'reward terms (raw, per tick): '
        + ', '.join(f'{name} {value:.4g}' for name, value in summary['reward_terms'].items())
    )
    print(json.dumps(summary))
    return 1 if summary['falls'] else 0
