"""ANYmal C flat-ground velocity tracking on the Warp simulator, as a batched torch VecEnv.

obs (N, 48) is the spec's observation; actions (N, 12) are bounded by the joint range around the
default pose (q* = q_default + ACTION_SCALE a, held over the control step's substeps; a drive
with a command delay still sees the previous steps' targets for part of the step). Episodes
terminate on a low or touching base, truncate at 20 s (extras['time_outs'], with the pre-reset
observation in extras['final_obs']). Rewards are RewardConfig's named terms. Implements the
interface of loco_train.envs.vec_env (SAC, SHAC) and, wrapped by rsl_rl_env, rsl-rl-lib's VecEnv.
"""

from dataclasses import dataclass, field
import math

import numpy as np
import torch

from loco_policy import description, spec
from loco_train.envs import actuator_fit, adjoint_clip, randomization
from loco_train.envs.commands import CommandConfig, CommandSampler
from loco_train.envs.commands import parse_overrides as parse_command_overrides
from loco_train.envs.observations import (
    build_observation,
    projected_gravity,
    quat_rotate_inverse,
)
from loco_train.envs.randomization import RandomizationConfig
from loco_train.envs.rewards import (
    compute_reward,
    FeetAirTime,
    parse_overrides,
    RewardConfig,
    RewardInputs,
)

FOOT_RADIUS = 0.03
"""Foot sphere radius (m), checked against the description at construction."""


PRIVILEGED = {'height': 1, 'dynamics': 5}
"""AnymalEnvConfig.privileged choices -> entries of AnymalEnv.privileged()."""


@dataclass
class AnymalEnvConfig:
    """The task: episode length, termination, reset spread, and its parts' configs."""

    contact: str = 'smooth'
    """Simulator contact model: 'smooth', 'hard' or 'soft'."""
    observation: str = 'velocity'
    """Observation layout (spec.LAYOUTS): 'velocity' (48) or 'gait_clock' (50: the clock of
    the episode's control steps last, as policy_node counts WALK's ticks)."""
    privileged: str = 'height'
    """What privileged() gives a critic that sees it: 'height' (1 entry: the base height) or
    'dynamics' (5: also the drawn drive gain scale, payload, ground friction and command delay,
    the randomisation the 48-term observation cannot see)."""
    differentiable: bool = False
    """Step through the torch bridge so rewards and observations carry gradients (SHAC)."""
    episode_s: float = 20.0
    """Episode length (s) before truncation."""
    min_base_height: float = 0.25
    """Base height (m) below which an episode terminates."""
    reset_joint_noise: float = 0.1
    """Uniform half-width (rad) of joint positions around the default pose at reset."""
    reset_base_velocity: float = 0.2
    """Uniform half-width (m/s, rad/s) of the base velocity at reset."""
    adjoint_clip: float = 10.0
    """Differentiable stepping: each control step's state adjoint rows are clipped to this many
    times their median norm (envs/adjoint_clip.py); 0 disables."""
    soft_stiffness: float = 2.0e4
    """Normal stiffness (N/m) of the 'soft' contact model (SimConfig.soft_stiffness); about
    8e3 sinks a standing ANYmal's feet as deep as MuJoCo's description (~17 mm)."""
    contact_threshold: float = 0.005
    """A shape or foot within this height (m) of the ground counts as touching it."""
    env_offset: int = 0
    """Index of the first of these environments in the whole population (data-parallel rank r
    holds rows [env_offset, env_offset + num_envs) of it)."""
    population: int = 0
    """Environments in the whole population over all ranks; 0: num_envs (one process). Every
    random draw is made for the whole population and sliced, so a rank's environments equal the
    same rows of a one-process run with the same seed."""
    commands: CommandConfig = field(default_factory=CommandConfig)
    """Command sampling."""
    rewards: RewardConfig = field(default_factory=RewardConfig)
    """Reward weights."""
    randomization: RandomizationConfig = field(default_factory=RandomizationConfig)
    """Domain randomisation (on by default)."""
    actuator_file: str = ''
    """Fitted actuator model YAML (loco-train fit-actuator): the drives are set to it and
    randomised around it (randomization's actuator_* widths); '' keeps the spec's PD drives
    (the description's damping, no joint friction, no delay)."""


class AnymalEnv:
    """N ANYmal environments on the Warp simulator, stepped and reset together."""

    name = 'anymal'

    def __init__(self, num_envs=64, config=None, device='cpu', seed=0):
        """Build the simulator for num_envs environments and reset them all."""
        from loco_train.sim import SimConfig, Simulator
        from loco_train.sim.actuator import HISTORY
        from loco_train.sim.torch_bridge import TorchSim

        self.cfg = config or AnymalEnvConfig()
        self.num_envs, self.device = int(num_envs), torch.device(device)
        self.layout_name = self.cfg.observation
        if self.cfg.privileged not in PRIVILEGED:
            raise ValueError(f'privileged {self.cfg.privileged!r}: one of {sorted(PRIVILEGED)}')
        self.privileged_dim = PRIVILEGED[self.cfg.privileged]
        self.layout = spec.layout_named(self.layout_name)
        self.gait_clock = self.layout_name == 'gait_clock'
        if self.gait_clock and abs(self.cfg.rewards.gait_period - spec.GAIT_PERIOD) > 1e-9:
            raise ValueError(
                f'gait_period {self.cfg.rewards.gait_period} s of the reward differs from the '
                f'gait clock the policy sees ({spec.GAIT_PERIOD} s, spec.GAIT_PERIOD)'
            )
        self.obs_dim = sum(term.dim for term in self.layout)
        self.action_dim = spec.ACTION_DIM
        self.action_low, self.action_high = spec.ACTION_LOW, spec.ACTION_HIGH  # (12,) each
        self.offset = int(self.cfg.env_offset)
        self.population = int(self.cfg.population) or self.num_envs
        if self.offset < 0 or self.offset + self.num_envs > self.population:
            raise ValueError(
                f'environments [{self.offset}, {self.offset + self.num_envs}) do not lie in a '
                f'population of {self.population}'
            )
        self.rows = slice(self.offset, self.offset + self.num_envs)  # this env's population rows
        # one stream drawn identically every step; resets and command resamples happen only where
        # an episode ends, so they draw from a second generator keyed per step from the first
        self.generator = torch.Generator().manual_seed(seed)
        self.event_generator = torch.Generator().manual_seed(seed + 1)
        model = description.load_model()
        sim_config = SimConfig(
            contact=self.cfg.contact,
            control_dt=spec.CONTROL_DT,
            device=str(self.device),
            soft_stiffness=self.cfg.soft_stiffness,
        )
        self.sim = Simulator(model, self.num_envs, sim_config)
        self.torch_sim = TorchSim(self.sim)
        self.actuator = None
        """The ActuatorFit the drives follow, or None."""
        if self.cfg.actuator_file:
            self.actuator = actuator_fit.read_fit(self.cfg.actuator_file)
        self.provenance = self.actuator.provenance() if self.actuator else {}
        """Keys the exported policy's provenance records (the actuator file's sha256)."""
        self.adjoint_stats = adjoint_clip.AdjointStats()  # read by SHAC after each backward
        self.dt = self.sim.config.control_dt
        self.max_delay = HISTORY * self.dt  # s: the longest command delay the drives hold
        self.max_episode_length = int(round(self.cfg.episode_s / self.dt))
        names = self.sim.shape_names
        self.base_shapes = [i for i, n in enumerate(names) if n.startswith(spec.BASE_BODY)]
        self.undesired_shapes = [
            i
            for i, n in enumerate(names)
            if n.startswith(spec.BASE_BODY) or 'thigh' in n or 'knee' in n
        ]
        self.foot_index = [self.sim.contact_names.index(f) for f in spec.FOOT_NAMES]
        radius = float(model.geom_size[model.geom(spec.FOOT_NAMES[0]).id][0])
        assert math.isclose(radius, FOOT_RADIUS), radius
        self.commands = CommandSampler(
            self.num_envs,
            self.cfg.commands,
            self.device,
            self.event_generator,
            offset=self.offset,
            population=self.population,
        )
        self.air_time = FeetAirTime(self.num_envs, device=self.device)
        noise = randomization.noise_scale(self.cfg.randomization)  # (48,); the clock has none
        self.noise = torch.as_tensor(
            np.pad(noise, (0, self.obs_dim - noise.size)), dtype=torch.float32, device=self.device
        )
        self.kp = torch.zeros(self.num_envs, spec.NUM_JOINTS, device=self.device)
        self.kd = torch.zeros_like(self.kp)
        self.default = torch.as_tensor(
            spec.DEFAULT_JOINT_POS, dtype=torch.float32, device=self.device
        )
        self.torque_limit = torch.as_tensor(
            spec.TORQUE_LIMIT, dtype=torch.float32, device=self.device
        )
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.last_action = torch.zeros(self.num_envs, spec.ACTION_DIM, device=self.device)
        self.target_history = self.default.repeat(self.num_envs, HISTORY, 1)
        """(N, HISTORY, 12) joint targets of the last control steps, newest first (rad)."""
        self.qpos, self.qvel = self._state()  # (N, 19), (N, 18): the state, torch-held
        self.obs = None
        self.reset()

    # -- state helpers ------------------------------------------------------------------------
    @property
    def command_ranges(self):
        """vx, vy, wz: [low, high] the commands are drawn from; the exported contract's ranges."""
        return {k: [float(v) for v in r] for k, r in self.cfg.commands.ranges.items()}

    def _state(self):
        """(qpos (N, 19), qvel (N, 18)) of the simulator as float32 torch tensors."""
        qpos, qvel = self.sim.get_state()
        return self._tensor(qpos), self._tensor(qvel)

    def _tensor(self, array):
        """A numpy array as a float32 tensor on the env's device."""
        return torch.as_tensor(array, dtype=torch.float32, device=self.device)

    def _uniform(self, rows, *tail):
        """Uniform [0, 1) float64 numpy samples (len(rows), *tail): population rows' draws."""
        shape = (self.population, *tail)
        return torch.rand(shape, generator=self.event_generator, dtype=torch.float64).numpy()[rows]

    def _key_events(self, key, event):
        """Seed the event generator for one kind of conditional draw (1: commands, 2: resets)."""
        self.event_generator.manual_seed(key + event)

    def _next_key(self):
        """A seed for this step's conditional draws, from the stream every rank draws alike."""
        return int(torch.randint(0, 2**60, (1,), generator=self.generator)) * 4

    def _observe(self, qpos, qvel, generator=None):
        """Noisy scaled observation (N, obs_dim) of a state; noise from generator or the env's."""
        quat = qpos[:, 3:7]
        obs = build_observation(
            quat,
            quat_rotate_inverse(quat, qvel[:, :3]),
            qvel[:, 3:6],
            qpos[:, 7:],
            qvel[:, 6:],
            self.commands.command,
            self.last_action,
        )
        if self.gait_clock:  # (N, 2): sin, cos of the episode's control steps, as on the robot
            sin, cos = spec.gait_clock(self.episode_length_buf.cpu().numpy())
            clock = torch.as_tensor(np.stack([sin, cos], axis=1), dtype=obs.dtype)
            obs = torch.cat([obs, clock.to(obs.device)], dim=1)
        zeros = torch.zeros(self.population, obs.shape[1])  # noise drawn for the whole population
        noise = randomization.add_observation_noise(zeros, self.noise, generator or self.generator)
        return obs + noise[self.rows].to(obs)

    privileged_dim = 1
    """Entries of privileged(): state the policy does not observe, for a critic that may."""

    def privileged(self, qpos=None):
        """Privileged state (N, privileged_dim) of the held (or given) state, noise-free.

        The base height above the flat ground, (h - 0.5 m) / 0.1 m (differentiable); with
        config.privileged 'dynamics' also the episode's drawn parameters (self.dynamics).
        """
        qpos = self.qpos if qpos is None else qpos
        height = (qpos[:, 2:3] - 0.5) / 0.1
        if self.privileged_dim == 1:
            return height
        return torch.cat([height, self.dynamics], dim=1)

    def _hold_dynamics(self):
        """Set self.dynamics (N, 4) from the simulator's parameters, each about in [-1, 1].

        (gain scale - 1) / 0.3, payload / 10 kg, (friction - 0.8) / 0.4, delay / 0.02 s.
        """
        p = {
            k: self.sim.params[k].numpy().astype(np.float64)
            for k in ('kp', 'mass_offset', 'mu', 'delay')
        }
        gain = np.mean(p['kp'] / np.asarray(spec.KP), axis=1)  # (N,) mean over joints
        columns = (
            (gain - 1.0) / 0.3,
            p['mass_offset'] / 10.0,
            (p['mu'] - 0.8) / 0.4,
            p['delay'] / 0.02,
        )
        self.dynamics = torch.as_tensor(
            np.stack(columns, axis=1), dtype=torch.float32, device=self.device
        )

    def _reset_envs(self, ids):
        """Draw new initial states, parameters and commands for environments ids."""
        n = len(ids)
        if n == 0:
            return
        ids_np = ids.cpu().numpy()
        rows = ids_np + self.offset
        u = self._uniform
        qpos = np.tile(description.default_qpos(), (n, 1))
        yaw = (2.0 * u(rows) - 1.0) * math.pi
        qpos[:, 3], qpos[:, 6] = np.cos(yaw / 2), np.sin(yaw / 2)
        qpos[:, 7:] += (2.0 * u(rows, 12) - 1.0) * self.cfg.reset_joint_noise
        qvel = np.zeros((n, self.sim.spec.nv))
        qvel[:, :6] = (2.0 * u(rows, 6) - 1.0) * self.cfg.reset_base_velocity
        mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        mask[ids] = True
        fresh_q, fresh_v = self.qpos.detach().clone(), self.qvel.detach().clone()
        fresh_q[ids], fresh_v[ids] = self._tensor(qpos), self._tensor(qvel)
        # torch.where keeps the graph of the environments that go on (SHAC)
        self.qpos = torch.where(mask[:, None], fresh_q, self.qpos)
        self.qvel = torch.where(mask[:, None], fresh_v, self.qvel)
        params = randomization.sample_params(
            self.population, self.cfg.randomization, self.event_generator, self.actuator,
            self.max_delay,
        )  # fmt: skip
        current = {k: self.sim.params[k].numpy().astype(np.float64) for k in params}
        for key, value in params.items():
            current[key][ids_np] = value[self.rows][ids_np]
        current['tau_max'] = np.tile(spec.TORQUE_LIMIT, (self.num_envs, 1))
        self.sim.set_params(**current)
        self.kp = torch.as_tensor(current['kp'], dtype=torch.float32, device=self.device)
        self.kd = torch.as_tensor(current['kd'], dtype=torch.float32, device=self.device)
        if self.privileged_dim > 1:
            self._hold_dynamics()
        self.commands.resample(ids)
        self.air_time.reset(ids)
        self.episode_length_buf[ids] = 0
        self.last_action = torch.where(
            mask[:, None], torch.zeros_like(self.last_action), self.last_action
        )
        # before an episode the drives held the default pose (the zero action's targets)
        self.target_history = torch.where(
            mask[:, None, None], self.default.expand_as(self.target_history), self.target_history
        )

    # -- VecEnv -------------------------------------------------------------------------------
    def reset(self, seed=None):
        """Reset every environment; return obs (N, 48)."""
        if seed is not None:
            self.generator.manual_seed(seed)
        self._key_events(self._next_key(), 2)
        self._reset_envs(torch.arange(self.num_envs, device=self.device))
        self.obs = self._observe(self.qpos, self.qvel)
        return self.obs

    def step(self, actions):
        """Apply actions (N, 12) for one control step; see the module docstring for outputs."""
        actions = torch.as_tensor(actions, dtype=torch.float32, device=self.device)
        if not self.cfg.differentiable:
            actions = actions.detach()
        low = torch.as_tensor(self.action_low, dtype=torch.float32, device=self.device)
        high = torch.as_tensor(self.action_high, dtype=torch.float32, device=self.device)
        actions = torch.where(torch.isfinite(actions), actions, torch.zeros_like(actions))
        actions = torch.minimum(torch.maximum(actions, low), high)
        if self.cfg.differentiable:  # the action adjoint too: one step's Jacobian can explode
            actions = adjoint_clip.attach(actions, self.cfg.adjoint_clip, self.adjoint_stats)
        targets = self.default + spec.ACTION_SCALE * actions
        key = self._next_key()
        qvel_before = self.qvel
        self._push()
        foot_pos, foot_vel = self._physics(targets)  # updates qpos, qvel; (N, 4, 3) each
        qpos, qvel = self.qpos, self.qvel
        self.episode_length_buf += 1

        quat = qpos[:, 3:7]
        lin_vel = quat_rotate_inverse(quat, qvel[:, :3])
        q, qd = qpos[:, 7:], qvel[:, 6:]
        torque = torch.clamp(
            self.kp * (targets - q) - self.kd * qd, -self.torque_limit, self.torque_limit
        )
        foot_height = foot_pos[:, self.foot_index, 2] - FOOT_RADIUS
        clearance = self._tensor(self.sim.shape_clearance())  # (N, nshape) m, no gradient
        touching = clearance < self.cfg.contact_threshold
        foot_contact = foot_height.detach() < self.cfg.contact_threshold
        phase = self.episode_length_buf.float() * self.dt
        inputs = RewardInputs(
            command=self.commands.command,
            base_lin_vel=lin_vel,
            base_ang_vel=qvel[:, 3:6],
            torque=torque,
            joint_acc=(qd - qvel_before[:, 6:]) / self.dt,
            action=actions,
            last_action=self.last_action,
            foot_height=foot_height,
            undesired_contact=touching[:, self.undesired_shapes].float().sum(dim=1),
            phase_time=phase,
            feet_air_time=self.air_time.update(foot_contact, self.commands.command, self.dt),
            projected_gravity=projected_gravity(quat),
            foot_vel=foot_vel[:, self.foot_index],
            base_height=qpos[:, 2],  # flat ground at z = 0
            joint_pos_offset=q - self.default,
        )
        reward, terms = compute_reward(inputs, self.cfg.rewards, self.dt)
        self._key_events(key, 1)
        self.commands.step(self.dt)  # after the reward: it scores the command the action saw

        state = torch.cat([qpos, qvel], dim=1).detach()
        invalid = ~torch.isfinite(state).all(dim=1) | (state.abs() > 1.0e6).any(dim=1)
        invalid |= torch.as_tensor(self.sim.invalid, device=self.device)
        terminated = (qpos[:, 2].detach() < self.cfg.min_base_height) | invalid
        terminated |= touching[:, self.base_shapes].any(dim=1)
        truncated = (self.episode_length_buf >= self.max_episode_length) & ~terminated
        reward = torch.where(invalid, torch.zeros_like(reward), reward)
        self.last_action = actions
        final_obs = self._observe(qpos, qvel)
        final_privileged = self.privileged(qpos)  # (N, P) pre-reset: the ending episode's
        done = terminated | truncated
        if bool(done.any()):
            self._key_events(key, 2)
            self._reset_envs(torch.nonzero(done).flatten())
            fresh = self._observe(self.qpos, self.qvel, self.event_generator)
            obs = torch.where(done[:, None], fresh, final_obs)
        else:
            obs = final_obs
        self.obs = obs
        log = {f'reward/{name}': float(value.detach().mean()) for name, value in terms.items()}
        log['episode/base_height'] = float(qpos[:, 2].detach().mean())
        extras = {
            'final_obs': final_obs,
            'final_privileged': final_privileged,
            'time_outs': truncated,
            'log': log,
        }
        return obs, reward, terminated, truncated, extras

    def _physics(self, targets):
        """Advance the held state one control step; return foot-sphere centres and velocities.

        Both (N, nc, 3), m and m/s, world frame.
        """
        previous = self.target_history  # the delayed drives still see these
        self.target_history = torch.cat([targets[:, None], previous[:, :-1]], dim=1)
        if self.cfg.differentiable:  # gradients reach this step's and the previous actions
            out = self.torch_sim.step_from(self.qpos, self.qvel, targets, previous=previous)
            clip, stats = self.cfg.adjoint_clip, self.adjoint_stats
            self.qpos = adjoint_clip.attach(out.qpos, clip, stats)
            self.qvel = adjoint_clip.attach(out.qvel, clip, stats)
            self.sim.set_state(self._finite(self.qpos), self._finite(self.qvel))  # clearances
            return out.foot_pos, out.foot_vel
        with torch.no_grad():
            self.sim.set_state(self._finite(self.qpos), self._finite(self.qvel))
            self.sim.step(targets.cpu().numpy(), previous=previous.cpu().numpy())
            self.qpos, self.qvel = self._state()
            feet = self.sim.foot_positions(), self.sim.foot_velocities()
            return tuple(self._tensor(f) for f in feet)

    @staticmethod
    def _finite(x):
        """A detached copy with non-finite entries zeroed (the env terminates those rows)."""
        x = x.detach()
        return torch.where(torch.isfinite(x), x, torch.zeros_like(x)).cpu().numpy()

    def detach(self):
        """Cut the gradient history of the held state (SHAC's window boundary)."""
        self.qpos, self.qvel = self.qpos.detach(), self.qvel.detach()
        self.last_action = self.last_action.detach()
        self.target_history = self.target_history.detach()

    def _push(self):
        """Kick the planar base velocity of randomly chosen environments."""
        mask = randomization.push_mask(
            self.population, self.dt, self.cfg.randomization, self.generator
        )
        if not bool(mask.any()):  # the population's mask: every rank draws the kicks alike
            return
        velocity = randomization.push_velocity(
            self.population, self.cfg.randomization, self.generator
        )
        mask = mask[self.rows]
        kick = torch.zeros_like(self.qvel)
        kick[:, :2] = velocity[self.rows].to(kick)
        self.qvel = self.qvel + kick * mask[:, None].to(kick)  # mask drawn on the CPU

    def close(self):
        """Nothing to release."""


def make_vec_env(num_envs, device='cpu', seed=0, **overrides):
    """The factory loco_train.envs.vec_env.make_env calls for --env anymal."""
    weights = overrides.pop('reward_overrides', None)
    if weights:  # NAME=VALUE strings from the trainers' --reward options
        overrides['rewards'] = RewardConfig(**parse_overrides(weights))
    actuator = overrides.pop('actuator', None)
    if actuator:  # the trainers' --actuator FILE.yaml
        overrides['actuator_file'] = actuator
    commands = overrides.pop('command_overrides', None)
    if commands:  # NAME=VALUE strings from the trainers' --command options
        overrides['commands'] = CommandConfig(**parse_command_overrides(commands))
    ranges = overrides.pop('randomization_overrides', None)
    if ranges:  # NAME=LOW:HIGH strings from the trainers' --randomize options
        fitted = bool(overrides.get('actuator_file'))
        parsed = randomization.parse_overrides(ranges, actuator=fitted)
        overrides['randomization'] = RandomizationConfig(**parsed)
    config = AnymalEnvConfig(**overrides)
    return AnymalEnv(num_envs, config, device, seed)
