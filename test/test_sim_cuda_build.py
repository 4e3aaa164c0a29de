"""The simulator's kernels compile for CUDA (sm_90, an H200) through NVRTC, without a GPU.

CPU and CUDA run the same kernels; this machine has no GPU, so this is the CUDA check it can
make: every kernel of the module, forward and adjoint, builds to PTX.
"""

import re

import pytest
import warp as wp

from loco_train.sim.kernels import kernel_set

ARCH = 90
"""Hopper (H100/H200), the GPU the CUDA benchmark targets."""


def _nvrtc_archs():
    wp.init()
    return set(wp.get_cuda_supported_archs() or ())


@pytest.mark.skipif(
    ARCH not in _nvrtc_archs(), reason='this Warp build cannot compile CUDA (no NVRTC for sm_90)'
)
@pytest.mark.parametrize('dtype', ['float32', 'float64'])
def test_every_kernel_compiles_to_ptx_for_sm90(dtype, tmp_path):
    kernels = kernel_set(dtype)
    paths = wp.compile_aot_module(kernels.module, arch=ARCH, use_ptx=True, module_dir=tmp_path)
    assert len(paths) == 1 and paths[0].suffix == '.ptx'
    entries = set(re.findall(r'\.entry (\w+)', paths[0].read_text()))
    module = wp.get_module(kernels.module)
    assert len(module.kernels) >= 20
    for key, kernel in module.kernels.items():  # forward, and backward where it is enabled
        found = {e.rsplit('_cuda_kernel_', 1)[1] for e in entries if e.startswith(key + '_')}
        wanted = {'forward'} | (
            {'backward'} if kernel.options.get('enable_backward', True) else set()
        )
        assert found == wanted, (key, found)
