"""The `loco-train` command line: one subcommand per job, each implemented in its own module."""

import argparse
import importlib
import sys

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
}


def main(argv=None):
    """Parse `loco-train SUBCOMMAND ...` and run the subcommand; return its exit status."""
    parser = argparse.ArgumentParser(prog='loco-train', description=__doc__)
    sub = parser.add_subparsers(dest='command', metavar='SUBCOMMAND')
    for name, (module_name, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text)
        sub_parser.set_defaults(_module=module_name)
        importlib.import_module(module_name).add_arguments(sub_parser)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == '__main__':
    sys.exit(main())
