"""`loco-train bench NAME`: benchmark scripts, each printing one JSON object as its last line."""

import importlib

BENCHES = {
    # name: ('module', 'help'); the module provides add_arguments(parser) and run(args) -> int.
    'contention': (
        'loco_train.bench.contention',
        "a training run alone and beside a busy process, by OpenMP's wait policy",
    ),
    'distributed': ('loco_train.bench.distributed', 'data-parallel SHAC env steps/s, K vs 1 rank'),
    'finetune': (
        'loco_train.bench.finetune',
        'online fine-tuning: replay transport, learner updates/s, validation, hot-swap latency',
    ),
    'sac': ('loco_train.bench.sac', 'SAC gradient updates per second (default and ANYmal nets)'),
    'sac-sb3': ('loco_train.bench.sac_vs_sb3', 'SAC vs Stable-Baselines3: updates/s, returns'),
    'sim': ('loco_train.bench.sim', 'Warp simulator env-substeps/s (fwd, fwd+bwd) vs MuJoCo'),
}


def add_arguments(parser):
    """Add one sub-subcommand per benchmark."""
    sub = parser.add_subparsers(dest='bench', metavar='NAME', required=True)
    for name, (module_name, help_text) in BENCHES.items():
        # argparse %-formats help strings: a literal % is written %%
        bench_parser = sub.add_parser(
            name, help=help_text.replace('%', '%%'), description=help_text
        )
        bench_parser.set_defaults(_bench_module=module_name)
        importlib.import_module(module_name).add_arguments(bench_parser)


def run(args):
    """Run the chosen benchmark."""
    return importlib.import_module(args._bench_module).run(args)
