"""Velocity commands (vx, vy, wz) sampled per environment and resampled every few seconds."""

from dataclasses import dataclass, field
import math

import torch

from loco_policy import spec


@dataclass
class CommandConfig:
    """How commands are drawn."""

    ranges: dict = field(default_factory=lambda: dict(spec.COMMAND_RANGES))
    """{'vx': (low, high) m/s, 'vy': (low, high) m/s, 'wz': (low, high) rad/s}."""
    zero_share: float = 0.1
    """Share of environments commanded to stand still (all three commands 0)."""
    axis_share: float = 0.0
    """Share of environments commanded along one axis only (vx, vy or wz, the other two 0), as
    an operator's single stick: walking straight, sideways and turning on the spot, which
    independent uniform draws almost never give (a single planar axis below min_speed stands)."""
    resample_s: float = 5.0
    """Seconds between resamples of an environment's command."""
    min_speed: float = 0.1
    """Planar commands below this norm (m/s) are set to 0, so 'moving' means moving."""


class CommandSampler:
    """Holds the (N, 3) command and a per-environment resample timer."""

    def __init__(
        self, num_envs, config=None, device='cpu', generator=None, offset=0, population=None
    ):
        """Allocate commands for num_envs environments and draw the first ones.

        They are rows [offset, offset + num_envs) of a population (default num_envs): draws are
        made for the whole population and sliced, so data-parallel ranks match one process.
        """
        self.config = config or CommandConfig()
        self.generator = generator
        self.offset, self.population = int(offset), int(population or num_envs)
        self.device = torch.device(device)
        self.command = torch.zeros(num_envs, 3, device=self.device)  # vx, vy, wz
        self.timer = torch.zeros(num_envs, device=self.device)  # s since last resample
        low = [self.config.ranges[k][0] for k in ('vx', 'vy', 'wz')]
        high = [self.config.ranges[k][1] for k in ('vx', 'vy', 'wz')]
        self.low = torch.tensor(low, device=self.device)
        self.high = torch.tensor(high, device=self.device)
        self.resample(torch.arange(num_envs, device=self.device))

    def resample(self, env_ids):
        """Draw new commands for the given environments and restart their timers."""
        n = len(env_ids)
        if n == 0:
            return
        # draw on the CPU generator, then move: a CPU generator cannot fill a CUDA tensor
        rows = torch.as_tensor(env_ids).cpu() + self.offset
        u = torch.rand(self.population, 3, generator=self.generator)[rows].to(self.device)
        command = self.low + (self.high - self.low) * u
        still = (
            torch.rand(self.population, generator=self.generator)[rows] < self.config.zero_share
        )
        still = still.to(self.device)
        if self.config.axis_share > 0.0:  # drawn only when asked for: default runs keep streams
            single = torch.rand(self.population, generator=self.generator)[rows]
            axis = torch.randint(3, (self.population,), generator=self.generator)[rows]
            keep = torch.nn.functional.one_hot(axis, 3).to(command)  # (n, 3) the kept axis
            single = (single < self.config.axis_share).to(self.device)
            command = torch.where(single[:, None], command * keep.to(self.device), command)
        planar = torch.linalg.norm(command[:, :2], dim=1, keepdim=True)
        command[:, :2] *= (planar >= self.config.min_speed).to(command.dtype)
        command[still] = 0.0
        self.command[env_ids] = command
        self.timer[env_ids] = 0.0

    def step(self, dt):
        """Advance timers by dt seconds and resample environments whose time is up."""
        self.timer += dt
        due = torch.nonzero(self.timer >= self.config.resample_s - 1e-6).flatten()  # float sums
        self.resample(due)
        return due


def add_command_argument(parser):
    """Add the trainers' repeatable `--command NAME=VALUE` option (parsed by parse_overrides)."""
    parser.add_argument(
        '--command',
        action='append',
        default=[],
        metavar='NAME=VALUE',
        help='override the anymal env commands (repeatable): vx, vy, wz as LOW:HIGH or one value, '
        'zero_share, axis_share, resample_s, min_speed; e.g. --command vx=1 --command vy=0 '
        '--command wz=0',
    )


def parse_overrides(items):
    """CommandConfig keyword overrides from 'name=value' strings; ValueError naming a bad one.

    vx, vy, wz take 'LOW:HIGH' or a single value (a fixed command); the other fields a number.
    """
    ranges = dict(spec.COMMAND_RANGES)
    out = {}
    for item in items or ():
        name, sep, value = (part.strip() for part in item.partition('='))
        try:
            numbers = [float(v) for v in value.split(':')]
        except ValueError:
            numbers = []
        if not sep or not numbers or not all(math.isfinite(v) for v in numbers):
            raise ValueError(f'command override {item!r}: expected NAME=NUMBER or NAME=LOW:HIGH')
        if name in ranges:
            if len(numbers) > 2 or numbers[0] > numbers[-1]:
                raise ValueError(f'command override {item!r}: {name} takes LOW:HIGH, LOW <= HIGH')
            s_low, s_high = spec.COMMAND_RANGES[name]
            if not s_low <= numbers[0] <= numbers[-1] <= s_high:  # the policy file would refuse it
                raise ValueError(
                    f'command override {item!r}: {name} must lie within the robot command range '
                    f'[{s_low}, {s_high}]'
                )
            ranges[name] = (numbers[0], numbers[-1])
        elif name in ('zero_share', 'axis_share', 'resample_s', 'min_speed') and len(numbers) == 1:
            out[name] = numbers[0]
        else:
            raise ValueError(
                f'command override {item!r}: NAME is one of vx, vy, wz (LOW:HIGH), zero_share, '
                'axis_share, resample_s, min_speed'
            )
    shares_ok = all(0.0 <= out.get(name, 0.0) <= 1.0 for name in ('zero_share', 'axis_share'))
    if not shares_ok or out.get('resample_s', 1.0) <= 0.0:
        raise ValueError(
            'command overrides: zero_share and axis_share must be in [0, 1], resample_s positive'
        )
    min_speed = out.get('min_speed', CommandConfig.min_speed)
    if min_speed < 0.0:
        raise ValueError(f'command override min_speed={min_speed}: must be >= 0')
    # the sampler zeroes planar commands below min_speed: a fixed slow command would train on 0
    fastest = math.hypot(*(max(abs(v) for v in ranges[k]) for k in ('vx', 'vy')))
    if 0.0 < fastest < min_speed:
        raise ValueError(
            f'command overrides: every planar command is below min_speed {min_speed} m/s and '
            'would be replaced by 0 (lower min_speed, e.g. --command min_speed=0)'
        )
    out['ranges'] = ranges
    return out
