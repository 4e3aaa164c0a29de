"""The fit's report: mujoco.sysid's HTML report and a matplotlib PNG of held-out data per joint."""

import pathlib

import numpy as np

from loco_policy import spec


def held_out_figure(path, times, measured, fitted, nominal, dpi=90):
    """PNG at path: measured vs predicted position and effort per joint on held-out data.

    times (N,) s; measured, fitted, nominal: (q (N, 12), tau (N, 12)) pairs.
    """
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(12, 2, figsize=(12, 26), sharex=True)
    for j, name in enumerate(spec.JOINT_NAMES):
        for column, (label, unit) in enumerate((('position', 'rad'), ('effort', 'N m'))):
            axis = axes[j, column]
            axis.plot(times, measured[column][:, j], color='black', lw=1.2, label='measured')
            axis.plot(times, fitted[column][:, j], color='tab:blue', lw=0.9, label='fitted')
            axis.plot(times, nominal[column][:, j], color='tab:orange', lw=0.7, ls='--',
                      label='nominal')  # fmt: skip
            axis.set_ylabel(f'{name}\n{label} ({unit})', fontsize=7)
            axis.tick_params(labelsize=6)
    axes[0, 0].legend(fontsize=7, loc='upper right')
    for axis in axes[-1]:
        axis.set_xlabel('time in held-out segment (s)')
    figure.suptitle('Actuator fit: held-out joint positions and efforts')
    figure.tight_layout(rect=(0, 0, 1, 0.99))
    figure.savefig(path, dpi=dpi)
    plt.close(figure)


def sysid_report(directory, problem, result):
    """mujoco.sysid's results (parameters, intervals) and HTML report in directory.

    The report has the parameter table, the fitted and measured signals, the intervals and the
    covariance; no videos and no optimisation trace (the fit's log prints the iterations).
    """
    from mujoco import sysid

    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    sysid.save_results(directory, problem.models_sequences, result.initial, result.fitted,
                       result.opt_result, problem.residual_fn)  # fmt: skip
    # without the optimisation trace (extras): its per-parameter plots cost half a minute
    summary = type(result.opt_result)(
        {k: v for k, v in result.opt_result.items() if k != 'extras'}
    )
    sysid.default_report(problem.models_sequences, result.initial, result.fitted,
                         problem.residual_fn, summary, title='Actuator fit',
                         save_path=directory, build_model=problem.builder,
                         generate_videos=False)  # fmt: skip
    return directory / 'report.html'


def rmse(a, b):
    """(12,) root mean square of a - b over time."""
    return np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2, axis=0))
