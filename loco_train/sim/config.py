"""Simulator configuration: contact model, time step, solver and contact-model gains."""

from dataclasses import dataclass

CONTACT_MODELS = ('smooth', 'hard', 'soft', 'none')
"""Contact models: analytically smoothed hard contact, hard contact, penalty contact, no ground."""

ADJOINTS = ('hand', 'auto')
"""Reverse passes of a substep: hand-written kernels, or Warp's generated ones."""


@dataclass
class SimConfig:
    """How the simulator steps: all fields have working defaults for ANYmal at 50 Hz control."""

    contact: str = 'smooth'
    """Contact model, one of CONTACT_MODELS."""
    device: str = 'cpu'
    """Warp device: 'cpu' or 'cuda' (or 'cuda:N')."""
    dtype: str = 'float32'
    """Scalar type of every kernel: 'float32' (training) or 'float64' (gradient checks)."""
    control_dt: float = 0.02
    """Control period (s); one step() advances this much time."""
    substeps: int = 4
    """Physics substeps per control step: dt = control_dt / substeps (0.005 s by default)."""
    kappa: float = 1000.0
    """Sigmoid sharpness of the smooth model (1/m): weight sigmoid(-kappa * distance)."""
    contact_offset: float = 0.005
    """Smooth: distance (m) where the contact weight is 1/2; hard: activation margin (m)."""
    pgs_iterations: int = 10
    """Fixed projected Gauss-Seidel iteration count (unrolled, so the tape differentiates it)."""
    adjoint: str = 'hand'
    """Reverse pass of a substep: 'hand' (a written reverse for each forward kernel but the soft
    model's and, without impulse contact, the free velocity update; gradients to H, not its
    factor) or 'auto' (Warp's generated adjoints of the same forward kernels; a cross-check)."""
    graphs: bool = True
    """Replay step() and the torch bridge's control steps as captured launch sequences (Warp's
    CPU graphs, CUDA graphs): no Python per kernel launch. False launches every kernel directly.
    Read when the simulator is built."""
    erp: float = 0.2
    """Fraction of penetration removed per substep by the contact velocity target (hard/smooth)."""
    soft_stiffness: float = 2.0e4
    """Soft model normal stiffness (N/m)."""
    soft_damping: float = 400.0
    """Soft model normal damping (N s/m), acting only while penetrating (implicit in dt)."""
    soft_friction_velocity: float = 0.01
    """Soft model Coulomb regularisation velocity (m/s): friction = mu F_n v_t / |v_t|_eps."""
    joint_friction_velocity: float = 0.1
    """Least joint Coulomb friction smoothing velocity v_eps (rad/s): the friction torque is
    friction tanh(qd / v), v = max(v_eps, 2 dt friction / (I + armature)) with I the joint's
    effective inertia at qpos0 (~0.0145 kg m^2 for ANYmal's knees), so that the explicit step
    never chatters (v > v_eps above ~0.3 N m of knee friction without armature)."""

    @property
    def dt(self):
        """Physics time step (s)."""
        return self.control_dt / self.substeps

    def validate(self):
        """Raise ValueError on an unknown contact model, dtype or a non-positive step."""
        if self.contact not in CONTACT_MODELS:
            raise ValueError(f'contact model {self.contact!r} not in {CONTACT_MODELS}')
        if self.dtype not in ('float32', 'float64'):
            raise ValueError(f'dtype {self.dtype!r} must be float32 or float64')
        if self.adjoint not in ADJOINTS:
            raise ValueError(f'adjoint {self.adjoint!r} not in {ADJOINTS}')
        if self.substeps < 1 or self.control_dt <= 0.0 or self.pgs_iterations < 1:
            raise ValueError('substeps, pgs_iterations and control_dt must be positive')
        if not self.joint_friction_velocity > 0.0:
            raise ValueError('joint_friction_velocity must be positive')
        return self
