"""Copy a run's TensorBoard scalars that the comparisons read, and nothing else, for docs/data.

`python -m loco_train.experiments.keep_scalars RUN OUT` writes one event file into OUT with the
tags of `loco-train compare` (returns, env steps, iteration times, the tracking term) and the
run's `run.json` where it has one, so that a table's runs ship at a fraction of their size.
"""

import argparse
import os
import shutil
import sys

from loco_train.experiments.compare import read_scalars, TRACKING_TAGS

TAGS = (
    'train/episode_return', 'train/episode_length', 'perf/env_steps', 'perf/iteration_s',
    'perf/env_steps_per_s', 'Train/mean_reward', 'Train/mean_episode_length',
    'Perf/collection_time', 'Perf/learning_time', 'shac/actor_grad_norm', *TRACKING_TAGS,
)  # fmt: skip
"""Scalars kept: what compare, sample_efficiency and the horizon sweep read."""


def keep(run_dir, out_dir, tags=TAGS):
    """Write the scalars of `tags` found in run_dir into out_dir; return the tags written."""
    from torch.utils.tensorboard import SummaryWriter

    found = {}
    for tag in tags:
        try:
            found[tag] = read_scalars(run_dir, tag)
        except ValueError:
            continue
    if not found:
        raise ValueError(f'{run_dir}: none of the kept scalars')
    os.makedirs(out_dir, exist_ok=True)
    writer = SummaryWriter(out_dir)
    for tag, (steps, values) in found.items():
        for step, value in zip(steps, values):
            writer.add_scalar(tag, float(value), int(step))
    writer.close()
    if os.path.isfile(os.path.join(run_dir, 'run.json')):
        shutil.copyfile(os.path.join(run_dir, 'run.json'), os.path.join(out_dir, 'run.json'))
    return sorted(found)


def main(argv=None):
    """Copy the kept scalars of RUN into OUT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('run')
    parser.add_argument('out')
    args = parser.parse_args(argv)
    try:
        tags = keep(args.run, args.out)
    except ValueError as error:
        print(f'keep_scalars: {error}', file=sys.stderr)
        return 2
    print(f'{args.out}: {len(tags)} tags')
    return 0


if __name__ == '__main__':
    sys.exit(main())
