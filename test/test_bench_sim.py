"""`loco-train bench sim --profile`: per-kernel times of a forward+backward window."""

import argparse

from loco_train import bench_sim
from loco_train.sim import load_model


def test_profile_times_forward_and_adjoint_kernels_within_the_window():
    parser = argparse.ArgumentParser()
    bench_sim.add_arguments(parser)
    args = parser.parse_args(['--window', '2'])
    args.profile_windows = 1
    profile = bench_sim._warp_rates(load_model(), 2, args)
    kernels = profile['kernels']
    assert {'pgs_solve forward', 'pgs_solve adjoint', 'cholesky_factor adjoint'} <= set(kernels)
    assert all(t >= 0.0 for t in kernels.values())
    assert 0.0 < profile['kernels_s'] <= profile['window_s']
