"""`loco-train bench sim --profile`: per-kernel times of a forward+backward window."""

import argparse

import pytest

from loco_train.bench import sim as bench_sim
from loco_train.sim import load_model


@pytest.mark.parametrize(
    'adjoint, expected, absent',
    [
        ('hand', {'pgs_solve forward', 'pgs_adjoint', 'delassus_adjoint', 'free_solve_adjoint'},
         {'pgs_solve adjoint', 'cholesky_factor adjoint'}),
        ('auto', {'pgs_solve forward', 'pgs_solve adjoint', 'cholesky_factor adjoint'},
         {'pgs_adjoint'}),
    ],
)  # fmt: skip
def test_profile_times_forward_and_adjoint_kernels_within_the_window(adjoint, expected, absent):
    parser = argparse.ArgumentParser()
    bench_sim.add_arguments(parser)
    args = parser.parse_args(['--window', '2', '--adjoint', adjoint])
    args.profile_windows = 1
    profile = bench_sim._warp_rates(load_model(), 2, args)
    kernels = profile['kernels']
    assert expected <= set(kernels)
    assert not absent & set(kernels)  # the factor has no reverse pass with hand adjoints
    assert all(t >= 0.0 for t in kernels.values())
    assert 0.0 < profile['forward_kernels_s'] < profile['kernels_s'] <= profile['window_s']
