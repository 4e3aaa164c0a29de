"""The one torch <-> Warp autograd bridge: differentiable control steps of a Simulator.

A torch loss on states after T control steps backpropagates through T `ControlStep` nodes to the
initial state, to every step's joint targets (through the command delay also to the targets of
the steps before it) and to the per-environment parameters. Each node
records its substeps on its own warp.Tape with its own arrays, so nothing a tape needs is ever
overwritten; the arrays return to a pool only after that node's backward pass.
Cutting gradients between windows is one explicit call: `TorchSim.cut_gradients()`.
"""

from dataclasses import dataclass

import torch
import warp as wp

from loco_train.sim.actuator import HISTORY
from loco_train.sim.simulator import PARAMS, PER_ENV

_TORCH_DTYPES = {'float32': torch.float32, 'float64': torch.float64}


@dataclass
class StepOutput:
    """Differentiable result of one control step (torch tensors, N environments)."""

    qpos: torch.Tensor
    """(N, nq) generalised positions, MuJoCo order."""
    qvel: torch.Tensor
    """(N, nv) generalised velocities, MuJoCo order."""
    foot_pos: torch.Tensor
    """(N, nc, 3) contact-sphere centres, world (m)."""
    foot_vel: torch.Tensor
    """(N, nc, 3) contact-sphere centre velocities, world (m/s)."""
    contact_force: torch.Tensor
    """(N, nc, 3) contact forces, world (N), mean over the control step."""


class _ModelTape(wp.Tape):
    """A warp.Tape that builds the model-data adjoint once and skips the shared gradients.

    The struct holds no array with a gradient, so its mirror is all empty and can be shared;
    building it field by field for each of a step's ~90 adjoint launches cost ~5 % of a window.
    The simulator's shared intermediate gradients are zeroed by the substeps, not on reset.
    """

    def __init__(self, sim):
        super().__init__()
        self._md = sim.md
        self._sim = sim

    def zero(self):
        """Zero the gradients this tape used, except the shared ones (zeroed per substep)."""
        held = self._sim.shared_grads
        shared = {id(g) for g in held.arrays.values()} if held is not None else set()
        for a, g in list(self.gradients.items()):
            if id(g) in shared:
                del self.gradients[a]
        super().zero()

    def get_adjoint(self, a):
        if a is not self._md:
            return super().get_adjoint(a)
        mirror = self._sim.__dict__.get('_md_adjoint')
        if mirror is None:
            mirror = self._sim.__dict__['_md_adjoint'] = super().get_adjoint(a)
        return mirror


class _Slot:
    """A control step's arrays in the bridge's pool: inputs, substeps, observation, tape, graphs.

    Inputs are copied into fixed arrays, so every launch of the step sees the same pointers and
    the step, its reverse pass and the zeroing of its gradients replay as captured graphs.
    """

    def __init__(self, sim, record, index):
        n, spec, Float = sim.num_envs, sim.spec, sim.sp.Float
        nu = max(spec.nu, 1)
        shapes = [(n, spec.nq), (n, spec.nv), (n, nu), (n, HISTORY, nu), (n, nu)]
        shapes += [(n,) if name in PER_ENV else (n, nu) for name in PARAMS]
        self.inputs = [
            wp.zeros(shape, dtype=Float, device=sim.device, requires_grad=record)
            for shape in shapes
        ]
        self.views = [wp.to_torch(a) for a in self.inputs]  # torch views, made once
        self.grad_views = [wp.to_torch(a.grad) for a in self.inputs] if record else None
        self.bufs = sim.substep_buffers(requires_grad=record)
        self.obs = sim.observe_buffers(requires_grad=record)
        self.record, self.index = record, index
        self.tape = None
        self.generation = 0  # of the tape: backward and zero graphs belong to one tape
        self.outputs = None  # (qpos, qvel, foot_pos, foot_vel, *substep forces): warp arrays
        self.out_views = self.out_grad_views = None  # their torch views and their gradients

    def run(self, sim, stage, launches):
        """Run one stage ('forward', 'backward', 'zero') of this slot from its graph."""
        tag = ('bridge', self.index, self.record, stage)
        values = sim.graph_values()
        if stage != 'forward':  # the forward's current tape, whatever the config is now
            values = (self.generation,)
        return sim.graphs.run(tag, launches, values)

    def forward(self, sim):
        """Run (replay) the control step and the observation on the inputs; return the outputs."""
        aq, av, at, ap, aff = self.inputs[:5]
        values = dict(zip(PARAMS, self.inputs[5:]))

        def launches():
            if not self.record:
                q, v, forces = sim.control_step(
                    aq, av, at, ap, aff, sim.zeros_nv, values, self.bufs
                )
                sim.observe(q, v, values, self.obs, clearance=False)
                return [q, v, self.obs.foot_pos, self.obs.foot_vel] + forces
            self.tape = _ModelTape(sim)  # every run of the launches records its tape afresh
            self.generation += 1
            with self.tape:  # clearances are not differentiable: kept off the tape
                q, v, forces = sim.control_step(
                    aq, av, at, ap, aff, sim.zeros_nv, values, self.bufs
                )
                sim.observe(q, v, values, self.obs, clearance=False)
            return [q, v, self.obs.foot_pos, self.obs.foot_vel] + forces

        outputs = self.run(sim, 'forward', launches)
        if outputs is not self.outputs:  # the same arrays on every replay
            self.outputs = outputs
            self.out_views = [wp.to_torch(a) for a in outputs]
            if self.record:
                self.out_grad_views = [wp.to_torch(a.grad) for a in outputs]
        return self.out_views

    def backward(self, sim, seeds):
        """Reverse pass from output gradients `seeds` (torch, None = 0); return input gradients."""
        for view, g in zip(self.out_grad_views, seeds):
            if g is None:
                view.zero_()
            else:
                view[:, : g.shape[1]] = g
        self.run(sim, 'backward', self.tape.backward)
        grads = [_finite_rows(view.clone()) for view in self.grad_views]
        # pooled arrays start from zero when reused
        self.run(sim, 'zero', self.tape.zero)
        return grads


def _take_slot(sim, record):
    """A control step's slot from the simulator's pool (with gradients when recording)."""
    pools = sim.__dict__.setdefault('_bridge_pool', {True: [], False: []})
    if pools[record]:
        return pools[record].pop()
    count = sim.__dict__['_bridge_slots'] = sim.__dict__.get('_bridge_slots', 0) + 1
    return _Slot(sim, record, count)


def _give_back(sim, slot):
    """Return a slot to the pool once no tape needs it (after backward, or unrecorded)."""
    sim.__dict__['_bridge_pool'][slot.record].append(slot)


class _Lease:
    """A recorded slot held by an autograd node, returned to the pool exactly once.

    After the node's backward pass, or when the node is freed without one (a step whose outputs
    never reach a loss).
    """

    def __init__(self, sim, slot):
        self.sim, self.slot = sim, slot

    def release(self):
        """Return the slot once; later calls do nothing."""
        if self.slot is not None:
            _give_back(self.sim, self.slot)
            self.slot = None

    def __del__(self):
        self.release()


def _finite_rows(grad):
    """Zero the rows (environments) of a gradient that are not finite.

    A diverged environment then contributes no gradient instead of poisoning the whole update.
    """
    if grad.dim() == 0:
        return grad
    ok = torch.isfinite(grad.reshape(grad.shape[0], -1)).all(dim=1)
    if bool(ok.all()):
        return grad
    return torch.where(ok.reshape((-1,) + (1,) * (grad.dim() - 1)), grad, torch.zeros_like(grad))


class ControlStep(torch.autograd.Function):
    """One control step of `sim` as a torch autograd node (Warp tape inside)."""

    @staticmethod
    def forward(ctx, sim, qpos, qvel, target, previous, tau_ff, *params):
        """Run the substeps (on a tape when recording); return qpos, qvel, feet, forces."""
        record = any(ctx.needs_input_grad)
        slot = _take_slot(sim, record)
        for view, t in zip(slot.views, (qpos, qvel, target, previous, tau_ff, *params)):
            view.copy_(t.detach())
        views = slot.forward(sim)
        nc = sim.spec.ncontact
        result = [v.clone() for v in views[:4]]
        result[2], result[3] = result[2][:, :nc], result[3][:, :nc]
        force = torch.stack(views[4:])[:, :, :nc]  # stack copies
        ctx.sim, ctx.slot = sim, slot
        if record:
            ctx.lease = _Lease(sim, slot)
        else:
            _give_back(sim, slot)
        return (*result, force)

    @staticmethod
    def backward(ctx, g_qpos, g_qvel, g_foot_pos, g_foot_vel, g_force):
        """Seed the tape with the output gradients and read the input gradients."""
        sim, slot = ctx.sim, ctx.slot
        forces = [None] * (len(slot.outputs) - 4) if g_force is None else g_force.unbind(0)
        if not sim.spec.ncontact:
            g_foot_pos = g_foot_vel = None
            forces = [None] * len(forces)
        result = slot.backward(sim, [g_qpos, g_qvel, g_foot_pos, g_foot_vel, *forces])
        ctx.lease.release()
        ctx.slot = ctx.lease = None
        return (None, *result)


class TorchSim:
    """Torch front end of a Simulator: differentiable steps, state held between calls."""

    def __init__(self, sim):
        """Wrap `sim`; tensors live on the simulator's device in its dtype."""
        self.sim = sim
        self.dtype = _TORCH_DTYPES[sim.config.dtype]
        self.device = wp.device_to_torch(sim.device)
        self.qpos = self.qvel = None
        self.previous = None
        """(N, HISTORY, nu) targets of the last steps, newest first (None: none yet)."""
        # views of the simulator's parameters (set_params writes them in place)
        self._param_views = {name: wp.to_torch(sim.params[name]) for name in PARAMS}

    def tensor(self, x):
        """Anything array-like as a tensor of the simulator's dtype and device."""
        return torch.as_tensor(x, dtype=self.dtype, device=self.device)

    def params(self):
        """The simulator's current per-env parameters as tensors (no grad): name -> tensor."""
        return {name: view.clone() for name, view in self._param_views.items()}

    def reset(self, qpos, qvel, previous=None):
        """Start from (qpos (N, nq), qvel (N, nv)).

        Pass tensors with requires_grad to get gradients with respect to the initial state.
        previous (N, HISTORY, nu): targets held before the start, newest first (None: the first
        step's targets).
        """
        self.qpos, self.qvel = self.tensor(qpos), self.tensor(qvel)
        self.previous = None if previous is None else self.tensor(previous)
        if not (torch.isfinite(self.qpos).all() and torch.isfinite(self.qvel).all()):
            raise ValueError('reset: qpos/qvel contain NaN or inf')

    def step(self, targets, params=None, tau_ff=None):
        """One control step with joint targets (N, nu) from the held state; return a StepOutput.

        params: dict of (N, nu) or (N,) tensors overriding the simulator's parameters.
        """
        targets = self.tensor(targets).expand(self.sim.num_envs, max(self.sim.spec.nu, 1))
        out = self.step_from(self.qpos, self.qvel, targets, params, tau_ff, self.previous)
        self.qpos, self.qvel = out.qpos, out.qvel
        self.previous = shift_history(targets, self.previous)
        return out

    def step_from(self, qpos, qvel, targets, params=None, tau_ff=None, previous=None):
        """Functional control step from an explicit state; returns a StepOutput.

        previous (N, HISTORY, nu): the targets of the last control steps, newest first, seen by
        the delayed drives (gradients reach them); None: this step's targets (held before it).
        """
        sim = self.sim
        n, nu = sim.num_envs, max(sim.spec.nu, 1)
        targets = self.tensor(targets).expand(n, nu)
        if not torch.isfinite(targets).all():
            bad = (~torch.isfinite(targets)).any(1).nonzero().flatten().tolist()
            raise ValueError(f'step: joint targets are not finite in environments {bad}')
        if previous is None:
            previous = targets[:, None].expand(n, HISTORY, nu)
        previous = self.tensor(previous).expand(n, HISTORY, nu)
        if not torch.isfinite(previous).all():
            raise ValueError('step: previous joint targets are not finite')
        if tau_ff is None:
            tau_ff = torch.zeros(n, nu, dtype=self.dtype, device=self.device)
        else:
            tau_ff = self.tensor(tau_ff)
        values = dict(self._param_views)  # copied into the step's own arrays when it runs
        for name, value in (params or {}).items():
            value = self.tensor(value).expand_as(values[name])
            if not torch.isfinite(value).all():
                raise ValueError(f'parameter {name!r} is not finite')
            values[name] = value
        q, v, foot_pos, foot_vel, force = ControlStep.apply(
            sim, qpos, qvel, targets, previous, tau_ff, *[values[name] for name in PARAMS]
        )
        return StepOutput(q, v, foot_pos, foot_vel, force.mean(0))

    def invalid(self):
        """(N,) bool: environments whose current state is non-finite (terminate them)."""
        bad = ~torch.isfinite(self.qpos).all(1) | ~torch.isfinite(self.qvel).all(1)
        return bad | (self.qpos.abs() > 1.0e6).any(1) | (self.qvel.abs() > 1.0e6).any(1)

    def cut_gradients(self):
        """Detach the held state and targets: the next window's gradients stop here."""
        self.qpos, self.qvel = self.qpos.detach(), self.qvel.detach()
        if self.previous is not None:
            self.previous = self.previous.detach()


def shift_history(targets, previous=None):
    """(N, HISTORY, nu) history after a step with targets (N, nu): targets first, oldest dropped.

    previous None: the history before was targets held (every slot targets).
    """
    if previous is None:
        return targets[:, None].expand(-1, HISTORY, -1)
    return torch.cat([targets[:, None], previous[:, :-1]], dim=1)
