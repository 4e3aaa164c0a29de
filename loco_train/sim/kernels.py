"""All kernels for one (model topology, scalar type): one Warp module, compiled once and cached."""

import functools
from types import SimpleNamespace

import warp as wp

from loco_train.sim import (
    actuator,
    bias_forces,
    cholesky,
    contact,
    integrator,
    kinematics,
    linear_adjoint,
    mass_matrix,
    pgs,
    soft_contact,
)
from loco_train.sim.spatial import spatial

DTYPES = {'float32': wp.float32, 'float64': wp.float64}
"""Scalar types by name."""


@functools.lru_cache(maxsize=None)
def kernel_set(dtype):
    """Every kernel in scalar type `dtype` ('float32' or 'float64'): one Warp module, any model."""
    sp = spatial(DTYPES[dtype])
    module = f'loco_sim_{dtype}'
    merged = {}
    for part in (kinematics, mass_matrix, bias_forces, cholesky, actuator, integrator, contact):
        merged.update(vars(part.build(sp, module)))
    for part in (pgs, soft_contact):
        merged.update(vars(part.build(sp, module)))
    merged.update(vars(linear_adjoint.build(sp, module, merged['Drive'], merged['drive_adjoint'])))
    return SimpleNamespace(sp=sp, module=module, **merged)
