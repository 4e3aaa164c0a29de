"""Per-substep arrays: every substep owns fresh arrays so nothing the tape needs is overwritten.

Shared instead: partial sums that no reverse pass reads back, and (with the hand-written reverse
passes) the gradients of the intermediates, which live only during their substep's reverse pass.
"""

from types import SimpleNamespace

import warp as wp

CROSSING = ('qpos_out', 'qvel_out', 'qvel_free', 'force')
"""A substep's arrays read after its own reverse pass (next substep, torch): own gradients."""


class SharedGradients:
    """One block of memory holding the gradient of every intermediate of a substep.

    The gradient of a substep's intermediate lives only during that substep's reverse pass, so
    one set serves every recorded substep, zeroed (one memset) as each reverse pass begins; it
    stays in cache. CROSSING arrays keep their own gradients.
    """

    def __init__(self, buf, device):
        """Lay out a gradient for each array of `buf` that has one (64-byte aligned)."""
        grads = [(n, a.grad) for n, a in vars(buf).items() if a.grad is not None]
        grads = [(n, g) for n, g in grads if n not in CROSSING]
        offsets, total = [], 0
        for _, g in grads:
            offsets.append(total)
            total += -(-g.capacity // 64) * 64
        self.block = wp.zeros(total // 4, dtype=wp.float32, device=device)
        self.arrays = {
            n: wp.array(ptr=self.block.ptr + o, shape=g.shape, dtype=g.dtype, device=device)
            for (n, g), o in zip(grads, offsets)
        }

    def attach(self, buf):
        """Point the gradients of `buf`'s intermediates into this block."""
        for name, grad in self.arrays.items():
            getattr(buf, name).grad = grad
        return buf

    def zero(self):
        """Zero every shared gradient."""
        self.block.zero_()


def substep_buffers(
    spec, sp, num_envs, iterations, contact, device, requires_grad, solver_grads, shared=None
):
    """Allocate the arrays one substep writes (shapes in the kernels' comments).

    solver_grads: whether the factor, the solves' intermediates and the PGS work arrays need
    gradients too (Warp's generated adjoints; the hand-written ones never read them).
    shared: dict of partial sums that only the generated adjoints read back, shared by every
    substep that uses it (None: this substep owns its own).
    """
    n, nq, nv, nb, nu, nc = num_envs, spec.nq, spec.nv, spec.nbody, spec.nu, spec.ncontact
    Float, Vec3, Vec6, Mat33, Quat = sp.Float, sp.Vec3, sp.Vec6, sp.Mat33, sp.Quat

    def new(shape, dtype=Float, grad=requires_grad):
        return wp.zeros(shape, dtype=dtype, device=device, requires_grad=grad)

    def work(shape, dtype=Float):
        return new(shape, dtype, solver_grads)

    def partial(name, shape, dtype=Float):
        if shared is None:
            return work(shape, dtype)
        if name not in shared:
            shared[name] = new(shape, dtype, False)
        return shared[name]

    buf = SimpleNamespace(
        qmid=new((n, nq)),
        xpos=new((n, nb), Vec3),
        xquat=new((n, nb), Quat),
        cin_i=new((n, nb), Mat33),
        cin_h=new((n, nb), Vec3),
        cin_m=new((n, nb)),
        cdof=new((n, nv), Vec6),
        crb_i=new((n, nb), Mat33),
        crb_h=new((n, nb), Vec3),
        crb_m=new((n, nb)),
        H=new((n, nv, nv)),
        cvel=new((n, nb), Vec6),
        cacc=new((n, nb), Vec6),
        fbody=new((n, nb), Vec6),
        cfrc=new((n, nb), Vec6),
        bias=new((n, nv)),
        tau=new((n, max(nu, 1))),
        f=new((n, nv)),
        S=partial('S', (n, nv, nv)),
        L=work((n, nv, nv)),
        sy=partial('sy', (n, nv)),
        y=partial('y', (n, nv)),
        sx=partial('sx', (n, nv)),
        qacc=new((n, nv)),
        qvel_free=new((n, nv)),
        force=new((n, max(nc, 1)), Vec3),
        qvel_out=new((n, nv)),
        qpos_out=new((n, nq)),
    )
    if contact != 'none' and nc:
        buf.phi = new((n, nc))
        buf.J = new((n, nc, nv), Vec3)
    if contact == 'soft' and nc:
        buf.f_contact = new((n, nv))
        buf.vc = new((n, nc), Vec3)
        buf.gain = new((n, nc), Vec3)
        buf.H_soft = new((n, nv, nv))
        buf.local = new((n, nc), Vec3)
    if contact in ('hard', 'smooth') and nc:
        buf.SY = partial('SY', (n, nv, nc), Vec3)
        buf.Y = work((n, nv, nc), Vec3)
        buf.G = new((n, nc, nc), Mat33)
        buf.b = new((n, nc), Vec3)
        buf.weight = work((n, nc))
        buf.rinv = work((n, nc), Vec3)
        buf.U = work((n, iterations, nc), Vec3)
        buf.lam = new((n, iterations + 1, nc), Vec3)
        buf.sdv = partial('sdv', (n, nv))
        buf.dv = work((n, nv))
    return buf


def observe_buffers(spec, sp, num_envs, device, requires_grad):
    """Arrays of the end-of-step observation: kinematics, feet and shape clearances."""
    n, nv, nb = num_envs, spec.nv, spec.nbody
    nc, ns = max(spec.ncontact, 1), max(spec.nshape, 1)

    def new(shape, dtype=sp.Float):
        return wp.zeros(shape, dtype=dtype, device=device, requires_grad=requires_grad)

    return SimpleNamespace(
        xpos=new((n, nb), sp.Vec3),
        xquat=new((n, nb), sp.Quat),
        cin_i=new((n, nb), sp.Mat33),
        cin_h=new((n, nb), sp.Vec3),
        cin_m=new((n, nb)),
        cdof=new((n, nv), sp.Vec6),
        foot_pos=new((n, nc), sp.Vec3),
        foot_vel=new((n, nc), sp.Vec3),
        clearance=new((n, ns)),
    )
