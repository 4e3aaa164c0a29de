"""Data-parallel training under torchrun: process group, rank helpers, all-reduces, rank-0 I/O.

`torchrun --nproc-per-node K -m loco_train.cli shac|sac --num-envs N ...` starts K ranks. N is
the total: rank r steps environments [r N/K, (r+1) N/K) of one population (the environment
draws its randomness for the whole population and keeps its rows, so K ranks step exactly the
environments one process would). Gradients are combined over ranks before clipping (SHAC:
averaged; SAC: summed by each rank's share of the global batch), normaliser statistics are
merged from every rank's batch, and only rank 0 logs and writes checkpoints.

Gloo serves CPU runs and NCCL CUDA ones (rank r on cuda:LOCAL_RANK). LOCO_DIST_TIMEOUT_S bounds
how long a collective waits for a rank that has died (default 300 s). torchrun starts each rank
in its own session, so Ctrl-C reaches torchrun alone; it ends the ranks with SIGTERM, as it does
when one rank dies. A rank takes SIGTERM like Ctrl-C: it unwinds, leaves the group, exits 130.
"""

import contextlib
from dataclasses import dataclass
from datetime import timedelta
import os
import signal
import sys

import numpy as np
import torch
import torch.distributed as dist

TIMEOUT_ENV = 'LOCO_DIST_TIMEOUT_S'
"""Environment variable: seconds a collective waits before it fails."""


@dataclass(frozen=True)
class Ranks:
    """Where this process stands: rank r of world_size, on local device local_rank."""

    rank: int = 0
    """Global rank (0 logs and checkpoints)."""
    world_size: int = 1
    """Number of ranks."""
    local_rank: int = 0
    """Rank on this machine (selects cuda:local_rank)."""

    @property
    def enabled(self):
        """True when more than one rank trains."""
        return self.world_size > 1

    @property
    def is_main(self):
        """True on rank 0, the one that logs and writes files."""
        return self.rank == 0

    def shard(self, total):
        """(offset, count): this rank's rows of a population of total environments."""
        if total % self.world_size:
            raise ValueError(
                f'--num-envs {total} is the total over {self.world_size} ranks and must be a '
                'multiple of it'
            )
        count = total // self.world_size
        return self.rank * count, count

    def population(self, env, total):
        """make_env arguments of this rank's rows of one population of total environments.

        {} with one rank; several ranks need --env anymal, which steps a population's rows.
        """
        if not self.enabled:
            return {}
        if env != 'anymal':
            raise ValueError(f'data-parallel training needs --env anymal, not {env}')
        offset, _ = self.shard(total)
        return {'env_offset': offset, 'population': total}


def ranks_from_environment(environ=None):
    """Ranks as torchrun describes them in WORLD_SIZE, RANK, LOCAL_RANK (one rank without)."""
    environ = os.environ if environ is None else environ
    try:
        ranks = Ranks(
            int(environ.get('RANK', 0)),
            int(environ.get('WORLD_SIZE', 1)),
            int(environ.get('LOCAL_RANK', 0)),
        )
    except ValueError as error:
        raise ValueError(f'torchrun variables RANK, WORLD_SIZE, LOCAL_RANK: {error}') from None
    if ranks.world_size < 1 or not 0 <= ranks.rank < ranks.world_size:
        raise ValueError(f'rank {ranks.rank} of world size {ranks.world_size} is not valid')
    return ranks


@contextlib.contextmanager
def torch_threads(count, apply=True):
    """Run the block on count torch CPU threads (0, or apply False: as they are); restore after.

    The restore keeps the caller's setting where several runs share one process (the tests).
    """
    before = torch.get_num_threads()
    if apply and count > 0:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def median_after_first(values):
    """Median of values[1:] (None with fewer than two values).

    A per-iteration time without the first (kernel loading, allocator warm-up), as the runners
    report it for the scaling bench.
    """
    values = list(values)
    return float(np.median(values[1:])) if len(values) > 1 else None


def timeout_s():
    """Seconds a collective may wait (LOCO_DIST_TIMEOUT_S, default 300)."""
    value = float(os.environ.get(TIMEOUT_ENV, '300'))
    if not value > 0:
        raise ValueError(f'{TIMEOUT_ENV}={value}: must be positive')
    return value


def setup(device='cpu'):
    """Join the process group torchrun describes; return (Ranks, the device this rank uses).

    One rank (plain `python -m loco_train.cli` or torchrun with one process) starts no group.
    Each rank runs torch on one thread unless OMP_NUM_THREADS says otherwise.
    """
    ranks = ranks_from_environment()
    if not ranks.enabled:
        return ranks, device
    signal.signal(signal.SIGTERM, _interrupt)
    torch.set_num_threads(int(os.environ.get('OMP_NUM_THREADS') or 1))
    cuda = str(device).startswith('cuda')
    if cuda:
        device = f'cuda:{ranks.local_rank}'
        torch.cuda.set_device(ranks.local_rank)
    if not dist.is_initialized():
        dist.init_process_group(
            backend='nccl' if cuda else 'gloo',
            rank=ranks.rank,
            world_size=ranks.world_size,
            timeout=timedelta(seconds=timeout_s()),
        )
    return ranks, device


def _interrupt(signum, frame):
    """SIGTERM handler: unwind like Ctrl-C."""
    raise KeyboardInterrupt(f'signal {signum}')


def teardown():
    """Leave the process group (no-op without one)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def active():
    """True when a process group of more than one rank is initialised."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def comm_device() -> torch.device:
    """The device the process group communicates from: this rank's GPU under NCCL, else CPU."""
    if dist.get_backend() == 'nccl':
        return torch.device('cuda', torch.cuda.current_device())
    return torch.device('cpu')


def _all_reduce_(tensor, op):
    """all_reduce in place, staging through comm_device() (NCCL takes no CPU tensors)."""
    device = comm_device()
    if tensor.device == device:
        dist.all_reduce(tensor, op=op)
    else:
        staged = tensor.to(device)
        dist.all_reduce(staged, op=op)
        tensor.copy_(staged)
    return tensor


def all_reduce_sum_(tensor):
    """Sum tensor over ranks in place and return it (unchanged with one rank)."""
    if active():
        _all_reduce_(tensor, dist.ReduceOp.SUM)
    return tensor


def all_true(flag):
    """True when flag (a bool or 0-d tensor) is true on every rank."""
    value = torch.tensor(1.0 if bool(flag) else 0.0, dtype=torch.float64)
    if active():
        _all_reduce_(value, dist.ReduceOp.MIN)
    return bool(value > 0.5)


def reduce_gradients_(parameters, average=True):
    """Sum (average=False) or average the .grad of parameters over ranks, packed in one buffer.

    A parameter without a gradient counts as a zero gradient, so every rank reduces the same
    buffer whatever its own batch reached.
    """
    params = [p for p in parameters if p.requires_grad]
    if not active() or not params:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])  # (sum of numel,)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    if average:
        flat /= dist.get_world_size()
    start = 0
    for p in params:
        p.grad.copy_(flat[start : start + p.numel()].view_as(p.grad))
        start += p.numel()


def sum_shares_(parameters, ok, share):
    """Sum share * .grad of parameters over ranks in place, and AND the 0-d bool ok; return it.

    Each rank's gradient is that of the mean loss over its B_r transitions; weighted by its share
    B_r / B_total and summed, it becomes the gradient of the mean over the global batch, exactly
    as one process would compute it. ok travels in the same buffer (one all-reduce), so every
    rank takes or skips the optimiser step together.
    """
    params = [p for p in parameters if p.requires_grad]
    if not active():
        return ok
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flag = (~ok).to(params[0].dtype).reshape(1) if params else (~ok).float().reshape(1)
    flat = torch.cat([p.grad.reshape(-1) * share for p in params] + [flag])  # (sum numel + 1,)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    start = 0
    for p in params:
        p.grad.copy_(flat[start : start + p.numel()].view_as(p.grad))
        start += p.numel()
    return flat[-1] == 0


def broadcast_modules_(*modules):
    """Copy rank 0's parameters and buffers into every rank's modules."""
    if not active():
        return
    for module in modules:
        for tensor in list(module.parameters()) + list(module.buffers()):
            with torch.no_grad():
                dist.broadcast(tensor.data, src=0)


def broadcast_object(value):
    """Rank 0's value of a picklable object, on every rank."""
    if not active():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_lists(values):
    """Concatenate a picklable list over ranks (rank order); the list itself with one rank."""
    if not active():
        return list(values)
    boxes = [None] * dist.get_world_size()
    dist.all_gather_object(boxes, list(values))
    return [v for box in boxes for v in box]


def mean_metrics(metrics):
    """Average a dict of float metrics over ranks (every rank passes the same keys)."""
    if not active() or not metrics:
        return dict(metrics)
    keys = sorted(metrics)
    values = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
    _all_reduce_(values, dist.ReduceOp.SUM)
    values /= dist.get_world_size()
    return dict(zip(keys, values.tolist()))


def main_print(*args, **kwargs):
    """print() on rank 0 only."""
    if not active() or dist.get_rank() == 0:
        print(*args, **kwargs)


def interrupted(command, ranks):
    """Report a Ctrl-C once (rank 0) and return the shell's exit status for SIGINT."""
    if ranks.is_main:
        print(f'loco-train {command}: interrupted', file=sys.stderr, flush=True)
    return 130


def run_ranked(name, args, train):
    """Set up this rank, run train(args, ranks), tear down; the subcommand's exit status.

    A refused set-up (ValueError) is one line and exit 2; Ctrl-C or SIGTERM ends every rank.
    """
    try:
        ranks, device = setup(args.device)
    except ValueError as error:
        print(f'loco-train {name}: {error}', file=sys.stderr)
        return 2
    args.device = device
    try:
        return train(args, ranks)
    except KeyboardInterrupt:
        return interrupted(name, ranks)
    finally:
        teardown()
