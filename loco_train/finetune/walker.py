"""A simulated robot walking a repeating command schedule under the deployment Controller.

What the robot's loop runs, without ROS: MuJoCo with a perturbation, policy_node's Controller
with behaviour noise, its transition rows. The offline fine-tuning loop's robot, and the
unperturbed robot sac_finetune co-trains on (`sim_share`).
"""

import numpy as np

from loco_policy import spec
from loco_policy.tools import command_schedule


class Walker:
    """A MuJoCo robot (perturbed as given) under the deployment Controller, walking a schedule."""

    def __init__(self, policy, perturbation, exploration, seed, schedule=None):
        """Stand the robot up into WALK.

        perturbation: EvalConfig fields (payload, gain_scale, latency, sensor noise); exploration:
        behaviour noise std (action units); schedule: command_schedule text, repeated (None: every
        step is given its command).
        """
        from loco_policy.control.controller import Controller, ControllerConfig
        from loco_policy.sim.backends import make_backend, Perturbation
        from loco_train.experiments.evaluate import CommandDelay, EvalConfig

        self.eval_config = EvalConfig(**perturbation)
        c = self.eval_config
        self.backend = make_backend(
            'mujoco', Perturbation(c.payload, c.friction, c.gain_scale, c.latency)
        )
        self.delay = CommandDelay(c.latency) if c.latency > 0.0 else None
        self.rng = np.random.default_rng(seed)
        self.ctrl = Controller(
            ControllerConfig(stand_duration=0.5, exploration_std=exploration), policy
        )
        self.ctrl.noise = np.random.default_rng(seed + 1000)
        self.schedule = command_schedule.parse(schedule) if schedule is not None else None
        self.period = command_schedule.total(self.schedule) if schedule is not None else None
        self.t, self.falls = 0.0, 0
        self.stand_up()

    def _tick(self, command=None):
        from loco_train.experiments.evaluate import _control_tick

        tick = _control_tick(
            self.ctrl, self.backend, self.rng, self.eval_config, self.t, command, self.delay
        )
        self.t += spec.CONTROL_DT
        return tick

    def stand_up(self):
        """PASSIVE (or DAMP after a reset) -> STAND -> WALK on a freshly reset robot."""
        from loco_policy.control.safety import Mode

        self.backend.reset()
        if self.ctrl.fsm.mode is Mode.DAMP:
            self.ctrl.request('reset', self.t)
        for request, seconds in (('start', 0.2), ('start', 1.0)):
            for _ in range(int(round(seconds / spec.CONTROL_DT))):
                row = self._tick().row
                assert row is None or row.mode != 'WALK'
            self.ctrl.request(request, self.t)
        self.walk_start = self.t
        if self.ctrl.fsm.mode is not Mode.WALK:
            raise RuntimeError(f'the controller did not reach WALK: {self.ctrl.status(self.t)}')

    def step(self, command=None):
        """One WALK tick: its transition rows; a fall resets and stands up.

        command: (3,) vx, vy (m/s), wz (rad/s) for this tick; None: the schedule's.
        """
        from loco_policy.control.safety import Mode
        from loco_train.experiments.evaluate import tilt

        if command is None:
            if self.schedule is None:
                raise ValueError("a Walker without a schedule needs each step's command")
            at = (self.t - self.walk_start) % self.period
            _, command = command_schedule.at(self.schedule, at)
        tick = self._tick(command)
        state = self.backend.state()
        fell = state.base_pos[2] < self.eval_config.fall_height
        fell |= tilt(state.base_quat) > self.eval_config.fall_tilt
        if fell and self.ctrl.fsm.mode is Mode.WALK:
            self.ctrl.trip('fell (offline loop)', self.t)
        row = tick.row
        if self.ctrl.fsm.mode is not Mode.WALK:
            self.falls += 1
            tail = self._tick().row  # the DAMP row that ends the episode
            self.stand_up()
            return [r for r in (row, tail) if r is not None]
        return [row] if row is not None else []
