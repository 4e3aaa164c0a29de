"""The `loco-train` command line: one subcommand per job, each implemented in its own module."""

import argparse
import importlib
import os
import sys

from loco_policy.tools import missing_dependency

COMMANDS = {
    # name: ('module', 'help'); the module provides add_arguments(parser) and run(args) -> int.
    'shac': ('loco_train.runners.shac', 'train SHAC through the differentiable simulator'),
    'ppo': ('loco_train.runners.ppo', "train rsl-rl-lib's PPO on the same environment (baseline)"),
    'sac': ('loco_train.runners.sac', 'train SAC (RSL-RL-SAC fixes) on anymal or a gymnasium env'),
    'export': (
        'loco_train.policy.export',
        'export a checkpoint as a contract-carrying ONNX policy',
    ),
    'check-policy': ('loco_train.policy.check', 'print a policy file contract; fail on mismatch'),
    'eval': (
        'loco_train.experiments.evaluate',
        'evaluate a policy file on the fixed command schedule',
    ),
    'compare': (
        'loco_train.experiments.compare',
        'SHAC against PPO: env steps to 90 % of PPO return',
    ),
    'bench': ('loco_train.bench', 'run a benchmark; prints one JSON object as its last line'),
    'bag-recover': ('loco_policy.tools.bag_recover', 'repair the MCAP splits a killed run left'),
    'fit-actuator': ('loco_train.actuator.fit_command', 'fit the actuator model to rosbags'),
}

MISSING_MODULE = 2
"""Exit status when a subcommand needs a module that is not installed."""


def _missing(error, command):
    """Print the one-line install hint for a missing module; re-raise when no group has it."""
    line = missing_dependency.from_error(error, command, prefer=('train',))
    if line is None:
        raise error
    print(line, file=sys.stderr)
    return MISSING_MODULE


def main(argv=None):
    """Parse `loco-train SUBCOMMAND ...` and run the subcommand; return its exit status.

    Only the chosen subcommand's module is imported, so the overview (`loco-train --help`) needs
    none of the training dependencies, and a missing one is reported as one line.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    # Before torch loads: libgomp's threads wait passively instead of spinning. Spinning, a
    # run slowed 2.2x (SHAC) to 2.4x (PPO) beside one busy process on 2 cores, and 15x beside
    # a second run; passive costs PPO 12 % alone (`loco-train bench contention`).
    os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')
    chosen = argv[0] if argv and argv[0] in COMMANDS else None
    parser = argparse.ArgumentParser(prog='loco-train', description=__doc__)
    # dest '_subcommand': the runners have a --command option (velocity command ranges)
    sub = parser.add_subparsers(dest='_subcommand', metavar='SUBCOMMAND')
    module = None
    for name, (module_name, help_text) in COMMANDS.items():
        # argparse %-formats help strings (for %(default)s): a literal % is written %%
        sub_parser = sub.add_parser(name, help=help_text.replace('%', '%%'), description=help_text)
        if name == chosen:
            try:
                module = importlib.import_module(module_name)
                module.add_arguments(sub_parser)
            except ModuleNotFoundError as error:
                return _missing(error, f'loco-train {name}')
    args = parser.parse_args(argv)
    if args._subcommand is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(module.run(args) or 0)
    except ModuleNotFoundError as error:
        return _missing(error, f'loco-train {chosen}')


if __name__ == '__main__':
    sys.exit(main())
