"""`loco-train fit-actuator BAG [BAG ...] --output FILE.yaml [--report DIR]`.

Reads the recordings (/joint_states, /joint_command), cuts each segment by time into a fit part
and a held-out tail (never random samples), checks that the robot was hanging
(loco_train.actuator.hanging), fits the actuator model with mujoco.sysid on the hanging robot
(loco_train.actuator.fit: two passes, the second weighted by the estimated sensor noise), and
writes the YAML (loco_train.actuator.model's layout, each value with its 95 % interval) with the
recordings' sha256, held-out RMSEs (fitted and nominal), the estimated noise per joint and the
MuJoCo version. Nothing is written when a recording is unusable or the fit cannot determine
every parameter. --report adds mujoco.sysid's HTML report and held_out.png.
"""

import os
import sys

import numpy as np

from loco_policy import spec


def add_arguments(parser):
    """Declare the subcommand's arguments."""
    parser.add_argument(
        'bags',
        nargs='+',
        metavar='BAG',
        help='rosbag2 directory, recorder output root or .mcap file',
    )
    parser.add_argument(
        '--output', required=True, metavar='FILE.yaml', help='actuator model YAML to write'
    )
    parser.add_argument('--report', metavar='DIR', help='write the HTML report and PNG here')
    parser.add_argument(
        '--held-out',
        type=float,
        default=0.25,
        metavar='FRACTION',
        help='share of each segment, at its end, kept for validation',
    )
    parser.add_argument('--max-iters', type=int, default=30, help='least-squares iterations')
    parser.add_argument(
        '--clock-tolerance', type=float, default=None, metavar='S',
        help='largest offset (s) between the /joint_command and /joint_states stamps the '
        "recorder's receive times may show, without /joint_command/applied (default 5 ms, "
        'bag_reader.CLOCK_TOLERANCE)',
    )  # fmt: skip
    parser.add_argument('--robot', default='anymal_c', help='robot name written to the YAML')
    # fmt: skip


def _sequences(paths, held_out, model, clock_tolerance=None):
    """Fit sequences grouped by commanded gains, and held-out sequences, from the recordings.

    clock_tolerance: s (None: bag_reader.CLOCK_TOLERANCE).
    """
    from loco_train.actuator import bag_reader, fit

    if clock_tolerance is None:
        clock_tolerance = bag_reader.CLOCK_TOLERANCE

    if not 0.0 < held_out < 0.9:
        raise fit.FitError(f'--held-out {held_out} must be in (0, 0.9)')
    groups = {}
    for path in paths:
        for index, segment in enumerate(bag_reader.read(path, clock_tolerance)):
            cut = segment.t[0] + (1.0 - held_out) * segment.duration
            train, test = segment.window(segment.t[0], cut), segment.window(cut, segment.t[-1] + 1)
            name = f'{os.path.basename(os.path.normpath(path))}:{index}'
            key = (segment.kp.tobytes(), segment.kd.tobytes(), segment.limit.tobytes())
            group = groups.setdefault(key, (segment.kp, segment.kd, segment.limit, [], []))
            if train.duration >= bag_reader.MIN_SEGMENT * 0.5:
                group[3].append(fit.prepare(train, model, name))
            if test.duration >= 0.2:
                group[4].append(fit.prepare(test, model, name + ':held_out'))
    fit_groups = [(kp, kd, limit, seqs) for kp, kd, limit, seqs, _ in groups.values() if seqs]
    held_groups = [(kp, kd, limit, seqs) for kp, kd, limit, _, seqs in groups.values() if seqs]
    if not fit_groups:
        raise fit.FitError('no segment long enough to fit')
    if not held_groups:
        raise fit.FitError('no held-out data: segments too short for --held-out')
    return fit_groups, held_groups


def _held_out(groups, params, nominal, noise):
    """Per-joint RMSE of q (rad) and tau (N m) on the held-out sequences, fitted and nominal.

    Each held-out sequence starts from the joint state estimated on its first
    initial_state.WINDOW s under the parameters being judged (the recorded one carries the
    sensors' noise); the RMSEs are over the whole sequence.
    """
    from loco_train.actuator import fit
    from loco_train.actuator.report import rmse

    sequences = [s for group in groups for s in group[3]]
    measured_q = np.concatenate([s.q for s in sequences])
    measured_tau = np.concatenate([s.tau for s in sequences])
    predictions = {}
    for label, values in (('fitted', params), ('nominal', nominal)):
        problem = fit.build_problem(fit.estimate_starts(groups, values, noise), noise)
        runs = fit.predict(problem, values)
        predictions[label] = (np.concatenate([r[0] for r in runs]),
                              np.concatenate([r[1] for r in runs]))  # fmt: skip
    table = {}
    for j, name in enumerate(spec.JOINT_NAMES):
        table[name] = {
            f'{signal}_rmse_{label}': float(rmse(pred[k][:, j], measured)[()])
            for label, pred in predictions.items()
            for k, (signal, measured) in enumerate(
                (('position', measured_q[:, j]), ('effort', measured_tau[:, j]))
            )
        }
    return table, (measured_q, measured_tau), predictions


def _dump(document):
    """Block-style YAML text of document."""
    from io import StringIO

    from ruamel.yaml import YAML

    yaml = YAML(typ='safe')
    yaml.default_flow_style = False
    text = StringIO()
    yaml.dump(document, text)
    return text.getvalue()


def run(args):
    """Fit and write; return 0, or 2 with one line on stderr naming what is wrong."""
    import mujoco

    from loco_policy.tools.bag_writer import write_text_atomic
    from loco_train.actuator import bag_reader, fit, hanging
    from loco_train.actuator import model as actuator_model
    from loco_train.actuator.report import held_out_figure, sysid_report

    output = os.path.abspath(args.output)
    if not os.path.isdir(os.path.dirname(output)):
        print(f'fit-actuator: the directory of --output {args.output} does not exist',
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        _, model = fit.fit_model()
        fit_groups, held_groups = _sequences(args.bags, args.held_out, model, args.clock_tolerance)
        sequences = [s for group in fit_groups for s in group[3]]
        hanging.check([s.segment for group in fit_groups + held_groups for s in group[3]])
        fit.check_excitation(sequences)
        problem = fit.build_problem(fit_groups, fit.weights_of(sequences))
        result = fit.fit(problem, max_iters=args.max_iters)
        nominal = actuator_model.ActuatorParams()
        table, measured, predictions = _held_out(held_groups, result.params, nominal,
                                                 result.noise)  # fmt: skip
        digests = [{'path': os.path.abspath(p), 'sha256': bag_reader.sha256(p)} for p in args.bags]
    except (bag_reader.BagError, fit.FitError) as error:
        print(f'fit-actuator: {error}; nothing written', file=sys.stderr)
        return 2
    kp_cmd, kd_cmd = fit_groups[0][0], fit_groups[0][1]
    document = {'robot': args.robot, 'bags': digests}
    intervals = {  # SI: the gains' scale intervals times the commanded gains
        'kp': result.intervals['kp_scale'] * kp_cmd[:, None],
        'kd': result.intervals['kd_scale'] * kd_cmd[:, None],
        **{k: result.intervals[k] for k in ('armature', 'friction', 'damping', 'delay')},
    }
    document.update(actuator_model.to_document(result.params, kp_cmd, kd_cmd, intervals))
    document['held_out'] = table
    document['fit'] = {
        'cost': result.cost, 'segments': len(sequences),
        'residuals': int(sum(24 * len(s.times) for s in result.problem.sequences)),
        'noise': {name: {'position': float(result.noise['q'][j]),
                         'effort': float(result.noise['tau'][j])}
                  for j, name in enumerate(spec.JOINT_NAMES)},
        'held_out_fraction': args.held_out,
        'mean_sum_squared_position_error': float(
            np.mean(np.sum((predictions['fitted'][0] - measured[0]) ** 2, axis=1))
        ),
    }  # fmt: skip
    document['mujoco_version'] = mujoco.__version__
    if args.report:
        os.makedirs(args.report, exist_ok=True)
        sysid_report(args.report, result.problem, result)
        times = np.concatenate([s.times for group in held_groups for s in group[3]])
        times = np.arange(len(times)) * (times[1] - times[0]) if len(times) > 1 else times
        held_out_figure(os.path.join(args.report, 'held_out.png'), times, measured,
                        predictions['fitted'], predictions['nominal'])  # fmt: skip
    write_text_atomic(output, _dump(document))
    print(f'fit-actuator: wrote {output} (delay {result.params.delay * 1e3:.2f} ms, '
          f'{len(sequences)} segments)')  # fmt: skip
    return 0
