"""Mixed precision of the SAC update: bfloat16 matrix products where the CPU has units for them.

On a CPU with AVX512-BF16 or AMX the hidden layers' matrix products run 2.3-4x faster in
bfloat16 (float32 accumulation) than in float32, and they are most of an update's time. The
hand-written reverse passes (loco_train.sac.reverse) give those products bfloat16 operands;
on autograd the autocast of `matmul_autocast` does. Either way the weights, their gradients as
the optimisers see them, Adam's moments, the output heads, log-probabilities, targets and
losses stay float32. Acting and the exported policy are float32 throughout.
"""

import contextlib
import sys

import torch

CHOICES = ('auto', 'float32', 'bfloat16')
"""SACConfig.matmul_dtype values (default float32); 'auto' is bfloat16 on a CPU with native
units, else float32."""


def native_bf16_cpu() -> bool:
    """True on a CPU whose flags include AVX512-BF16 or AMX-BF16 (Linux; False elsewhere)."""
    if not sys.platform.startswith('linux'):
        return False
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('flags'):
                    flags = set(line.split(':', 1)[1].split())
                    return bool(flags & {'avx512_bf16', 'amx_bf16'})
    except OSError:
        pass
    return False


def resolve(name: str, device) -> torch.dtype:
    """The matmul dtype that `name` (one of CHOICES) means on `device`."""
    if name not in CHOICES:
        raise ValueError(f'matmul_dtype must be one of {CHOICES}, got {name!r}')
    if name == 'float32':
        return torch.float32
    if name == 'bfloat16':
        return torch.bfloat16
    cpu = torch.device(device).type == 'cpu'
    return torch.bfloat16 if cpu and native_bf16_cpu() else torch.float32


def matmul_autocast(dtype: torch.dtype, device):
    """A context computing matrix products in `dtype` (nothing for float32)."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)
