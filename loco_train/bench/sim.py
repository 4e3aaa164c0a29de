"""`loco-train bench sim`: env-substeps per second of the Warp simulator against MuJoCo.

Measures, on the robot description with PD actuators standing at the default pose:
- Warp env-substeps/s at each N over a window of control steps from the reset state:
  `forward`: the bare control steps (no tape, no observation; the figure held against MuJoCo);
  `forward_window`: the training window through the torch bridge without recording (steps,
  feet, loss); `forward_backward`: the same window recorded and differentiated. `ratio` is
  forward_window / forward_backward (like for like), `ratio_vs_forward` against the bare steps;
- MuJoCo steps/s on the same model, dt and contact set (foot spheres against the floor only),
  single-threaded and with mujoco.rollout on all cores.
Prints one status line per measurement and one JSON object as its last line.
"""

import json
import os
import sys
import time

import numpy as np


def add_arguments(parser):
    """Options of the simulator benchmark."""
    parser.add_argument('--envs', default='1,64,1024', help='comma-separated env counts')
    parser.add_argument('--contact', default='smooth', help='smooth, hard, soft or none')
    parser.add_argument('--device', default='cpu', help="warp device: 'cpu' or 'cuda'")
    parser.add_argument('--dtype', default='float32', help='float32 or float64')
    parser.add_argument(
        '--adjoint', default='hand', help="reverse pass of a substep: 'hand' or 'auto'"
    )
    parser.add_argument(
        '--no-graphs',
        action='store_true',
        help='launch every kernel from Python instead of replaying captured graphs',
    )
    parser.add_argument('--seconds', type=float, default=3.0, help='time budget per measurement')
    parser.add_argument('--window', type=int, default=8, help='control steps per backward pass')
    parser.add_argument('--quick', action='store_true', help='N = 1 and 16, short timings')
    parser.add_argument(
        '--profile',
        action='store_true',
        help='also time every kernel, forward and adjoint, over windows at the largest N',
    )


def _status(text):
    print(text, file=sys.stdout, flush=True)


def _timed(fn, budget, min_reps=2):
    """Run fn until `budget` seconds have passed (at least min_reps); return seconds per call."""
    fn()  # warm-up: compilation and allocation
    fn()  # and graph capture (on the second run of a launch sequence)
    reps, start = 0, time.perf_counter()
    while reps < min_reps or time.perf_counter() - start < budget:
        fn()
        reps += 1
    return (time.perf_counter() - start) / reps


def _warp_rates(model, n, args):
    import torch
    import warp as wp

    from loco_policy import spec
    from loco_policy.description import default_qpos
    from loco_train.sim import Simulator
    from loco_train.sim.torch_bridge import TorchSim

    profile = getattr(args, 'profile_windows', 0)  # times each launch: no graphs
    sim = Simulator(
        model, n, contact=args.contact, device=args.device, dtype=args.dtype,
        adjoint=args.adjoint, graphs=not (args.no_graphs or profile),
    )  # fmt: skip
    sim.set_params(kp=spec.KP, kd=spec.KD, tau_max=spec.TORQUE_LIMIT)
    qpos = np.tile(default_qpos(), (n, 1))
    sim.set_state(qpos, np.zeros((n, model.nv)))
    targets = np.tile(spec.DEFAULT_JOINT_POS, (n, 1))
    substeps = sim.config.substeps

    def forward():  # the public step(), window steps from the reset state (captured graphs)
        sim.set_state(qpos, np.zeros((n, model.nv)))
        for _ in range(args.window):
            sim.step(targets)
        wp.synchronize_device(sim.device)

    ts = TorchSim(sim)
    window_targets = torch.tensor(targets, dtype=ts.dtype).repeat(args.window, 1, 1)

    def window(record):  # the window a training step differentiates: steps, feet, a loss
        ts.reset(qpos, np.zeros((n, model.nv)))
        tgt = window_targets.clone().requires_grad_(record)
        with torch.set_grad_enabled(record):
            for t in range(args.window):
                out = ts.step(tgt[t])
            loss = out.qpos[:, 2].sum() + out.foot_pos.square().sum()
        if record:
            loss.backward()
        wp.synchronize_device(sim.device)

    def forward_backward():
        window(True)

    if profile:
        return _kernel_profile(forward_backward, profile, sim.device)
    steps = n * substeps * args.window
    fwd = steps / _timed(forward, args.seconds)
    _status(f'warp {args.device} N={n}: forward {fwd:,.0f} env-substeps/s')
    same = steps / _timed(lambda: window(False), args.seconds)
    _status(f'warp {args.device} N={n}: forward of the training window {same:,.0f} env-substeps/s')
    both = steps / _timed(forward_backward, args.seconds)
    _status(f'warp {args.device} N={n}: forward+backward {both:,.0f} env-substeps/s')
    return {
        'graphs_captured': len(sim.graphs.captured()) if sim.graphs.enabled else 0,
        'forward': round(fwd),
        'forward_window': round(same),
        'forward_backward': round(both),
        'ratio': round(same / both, 2),
        'ratio_vs_forward': round(fwd / both, 2),
    }


def _kernel_profile(forward_backward, windows, device):
    """Seconds per window spent in each kernel, forward and adjoint (launches synchronised)."""
    import warp as wp

    totals = {}
    launch = wp.launch

    def timed_launch(kernel, *a, **k):
        start = time.perf_counter()
        result = launch(kernel, *a, **k)
        wp.synchronize_device(device)
        name = kernel.key.split('__')[-1]
        if not name.endswith('_adjoint'):  # hand-written reverse kernels are named so already
            name = f'{name} {"adjoint" if k.get("adjoint") else "forward"}'
        totals[name] = totals.get(name, 0.0) + time.perf_counter() - start
        return result

    forward_backward()  # warm-up
    wp.launch = timed_launch  # the tape's backward calls wp.launch too
    try:
        start = time.perf_counter()
        for _ in range(windows):
            forward_backward()
        wall = (time.perf_counter() - start) / windows
    finally:
        wp.launch = launch
    ranked = sorted(totals.items(), key=lambda item: -item[1])
    profile = {name: round(t / windows, 5) for name, t in ranked}
    kernels = sum(profile.values())
    forward = sum(t for name, t in profile.items() if name.endswith(' forward'))
    _status(
        f'profile: {wall:.3f} s per window, {kernels:.3f} s in kernels '
        f'({forward:.3f} forward, {kernels - forward:.3f} reverse)'
    )
    for name, t in list(profile.items())[:15]:
        _status(f'  {name:32} {t:8.4f} s  {100 * t / wall:5.1f} %')
    return {
        'window_s': round(wall, 4),
        'kernels_s': round(kernels, 4),
        'forward_kernels_s': round(forward, 4),
        'kernels': profile,
    }


def _mujoco_model(dt):
    """The robot with PD position actuators (kp, kd, torque limit) and only foot contacts."""
    import mujoco

    from loco_policy import spec
    from loco_train.sim import load_model

    model = load_model()
    model.opt.timestep = dt
    feet = {mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, f) for f in spec.FOOT_NAMES}
    for g in range(model.ngeom):
        if model.geom_bodyid[g] != 0 and g not in feet:
            model.geom_contype[g] = model.geom_conaffinity[g] = 0
    model.actuator_gaintype[:] = mujoco.mjtGain.mjGAIN_FIXED
    model.actuator_biastype[:] = mujoco.mjtBias.mjBIAS_AFFINE
    model.actuator_gainprm[:, 0] = spec.KP
    model.actuator_biasprm[:, :3] = np.stack([0 * spec.KP, -spec.KP, -spec.KD], axis=1)
    model.actuator_ctrlrange[:] = [-10.0, 10.0]
    model.actuator_forcelimited[:] = 1
    model.actuator_forcerange[:] = np.stack([-spec.TORQUE_LIMIT, spec.TORQUE_LIMIT], axis=1)
    return model


def _mujoco_rates(dt, args):
    import mujoco
    from mujoco import rollout

    from loco_policy import spec
    from loco_policy.description import default_qpos

    model = _mujoco_model(dt)
    data = mujoco.MjData(model)
    data.qpos[:] = default_qpos()
    state = np.zeros(mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(model, data, state, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    nbatch, nstep = (16, 50) if args.quick else (256, 100)
    initial = np.tile(state, (nbatch, 1))
    control = np.tile(spec.DEFAULT_JOINT_POS, (nbatch, nstep, 1))
    result = {}
    threads = os.cpu_count() or 1
    for name, count in (('single_thread', 1), ('rollout_all_cores', threads)):
        datas = [mujoco.MjData(model) for _ in range(count)]
        with rollout.Rollout(nthread=count) as runner:

            def run(runner=runner, datas=datas):
                runner.rollout(model, datas, initial, control)

            rate = nbatch * nstep / _timed(run, args.seconds)
        result[name] = round(rate)
        _status(f'mujoco {name} ({count} thread{"s" * (count > 1)}): {rate:,.0f} steps/s')
    result['threads'] = threads
    return result


def run(args):
    """Run the benchmark; print progress and the JSON result (last line)."""
    from loco_train.sim import load_model, SimConfig

    if args.quick:
        args.envs, args.seconds, args.window = '1,16', min(args.seconds, 0.5), 4
    envs = [int(n) for n in args.envs.split(',')]
    model = load_model()
    config = SimConfig(contact=args.contact, device=args.device, dtype=args.dtype)
    warp = {}
    for n in envs:
        warp[str(n)] = _warp_rates(model, n, args)
    mujoco_rates = _mujoco_rates(config.dt, args)
    largest = warp[str(max(envs))]
    profile = None
    if args.profile:  # after the rates: the timed launches synchronise and cost a little
        args.profile_windows = 3
        profile = _warp_rates(model, max(envs), args)
    result = {
        'bench': 'sim',
        'device': args.device,
        'contact': args.contact,
        'dtype': args.dtype,
        'adjoint': args.adjoint,
        'graphs': not args.no_graphs,
        'dt': config.dt,
        'substeps': config.substeps,
        'warp_env_substeps_per_s': warp,
        'mujoco_steps_per_s': mujoco_rates,
        'goals': {
            'forward_vs_mujoco_per_core': round(
                largest['forward'] / mujoco_rates['single_thread'], 3
            ),
            'forward_ge_mujoco_per_core': largest['forward'] >= mujoco_rates['single_thread'],
            'backward_cost_x_forward': largest['ratio'],
            'backward_cost_x_bare_forward': largest['ratio_vs_forward'],
            'fwd_bwd_le_3x_forward': largest['ratio'] <= 3.0,
        },
    }
    if profile:
        result['profile_forward_backward_window'] = dict(profile, envs=max(envs))
    print(json.dumps(result))
    return 0
