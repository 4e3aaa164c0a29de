import pytest
import torch

from loco_policy import spec
from loco_train.envs.anymal import make_vec_env
from loco_train.envs.commands import CommandConfig, CommandSampler, parse_overrides


def test_commands_stay_in_the_spec_ranges_with_a_share_of_zeros():
    gen = torch.Generator().manual_seed(0)
    sampler = CommandSampler(4000, device='cpu', generator=gen)
    for i, key in enumerate(('vx', 'vy', 'wz')):
        low, high = spec.COMMAND_RANGES[key]
        assert sampler.command[:, i].min() >= low and sampler.command[:, i].max() <= high
    still = torch.all(sampler.command == 0.0, dim=1).float().mean().item()
    assert 0.07 < still < 0.13  # zero_share 0.1
    planar = torch.linalg.norm(sampler.command[:, :2], dim=1)
    assert torch.all((planar == 0) | (planar >= 0.1))


def test_commands_are_resampled_when_their_time_is_up():
    gen = torch.Generator().manual_seed(1)
    sampler = CommandSampler(8, CommandConfig(resample_s=1.0, zero_share=0.0), generator=gen)
    first = sampler.command.clone()
    for _ in range(49):
        assert len(sampler.step(0.02)) == 0
    assert torch.equal(sampler.command, first)
    due = sampler.step(0.02)
    assert len(due) == 8 and not torch.equal(sampler.command, first)
    assert torch.all(sampler.timer == 0.0)


def test_overrides_fix_a_forward_walking_task():
    options = parse_overrides(['vx=1', 'vy=0', 'wz=-0.5:0.5', 'zero_share=0'])
    assert options['ranges'] == {'vx': (1.0, 1.0), 'vy': (0.0, 0.0), 'wz': (-0.5, 0.5)}
    sampler = CommandSampler(
        500, CommandConfig(**options), generator=torch.Generator().manual_seed(0)
    )
    assert torch.all(sampler.command[:, 0] == 1.0) and torch.all(sampler.command[:, 1] == 0.0)
    assert sampler.command[:, 2].abs().max() <= 0.5 and sampler.command[:, 2].std() > 0.1
    env = make_vec_env(4, command_overrides=['vx=1', 'vy=0', 'wz=0', 'zero_share=0'])
    assert torch.equal(env.commands.command, torch.tensor([[1.0, 0.0, 0.0]]).expand(4, 3))
    assert env.command_ranges == {'vx': [1.0, 1.0], 'vy': [0.0, 0.0], 'wz': [0.0, 0.0]}


@pytest.mark.parametrize(
    'item',
    [
        'vx',
        'vx=',
        'vx=fast',
        'vx=1:0',
        'vx=0:1:2',
        'vz=1',
        'zero_share=2',
        'axis_share=-0.1',
        'resample_s=0',
        'vx=2',
        'vx=0:1.5',
        'min_speed=-1',
    ],
)
def test_bad_overrides_are_refused_naming_them(item):
    with pytest.raises(ValueError, match='command override'):
        parse_overrides([item])


def test_a_fixed_command_slower_than_min_speed_is_refused_not_zeroed():
    with pytest.raises(ValueError, match='below min_speed'):
        parse_overrides(['vx=0.05', 'vy=0'])
    ranges = parse_overrides(['vx=0.05', 'vy=0', 'min_speed=0'])['ranges']
    sampler = CommandSampler(10, CommandConfig(ranges=ranges, zero_share=0.0, min_speed=0.0))
    assert torch.all(sampler.command[:, 0] == 0.05)
    parse_overrides(['vx=0', 'vy=0'])  # standing still on purpose is fine


def test_an_axis_share_commands_one_axis_only_and_leaves_the_default_draws_alone():
    def draw(**kwargs):
        gen = torch.Generator().manual_seed(3)
        return CommandSampler(4000, CommandConfig(**kwargs), generator=gen).command

    # without it the sampler draws exactly what it drew before the option existed: a uniform
    # (N, 3) and the standing draw (N,), nothing more
    gen = torch.Generator().manual_seed(3)
    sampler = CommandSampler(4000, CommandConfig(), generator=gen)
    by_hand = torch.Generator().manual_seed(3)
    low = torch.tensor([spec.COMMAND_RANGES[k][0] for k in ('vx', 'vy', 'wz')])
    high = torch.tensor([spec.COMMAND_RANGES[k][1] for k in ('vx', 'vy', 'wz')])
    expected = low + (high - low) * torch.rand(4000, 3, generator=by_hand)
    planar = torch.linalg.norm(expected[:, :2], dim=1, keepdim=True)
    expected[:, :2] *= (planar >= CommandConfig.min_speed).to(expected.dtype)
    expected[torch.rand(4000, generator=by_hand) < CommandConfig.zero_share] = 0.0
    assert torch.equal(sampler.command, expected)
    assert torch.equal(gen.get_state(), by_hand.get_state())
    single = draw(axis_share=1.0, zero_share=0.0)
    moving = torch.count_nonzero(single, dim=1)
    assert torch.all(moving <= 1)  # straight, sideways or turning on the spot
    shares = [(single[:, i] != 0).float().mean().item() for i in range(3)]
    assert all(0.28 < share < 0.36 for share in shares)  # each axis a third (less min_speed)
    half = draw(axis_share=0.5, zero_share=0.0)
    one_axis = (torch.count_nonzero(half, dim=1) == 1).float().mean().item()
    assert 0.45 < one_axis < 0.55  # the uniform draws almost never have a single axis
    assert parse_overrides(['axis_share=0.3'])['axis_share'] == 0.3


def test_ranks_slicing_the_population_get_the_one_process_axis_commands():
    config = CommandConfig(axis_share=0.5)
    whole = CommandSampler(8, config, generator=torch.Generator().manual_seed(4)).command
    parts = [
        CommandSampler(
            4, config, generator=torch.Generator().manual_seed(4), offset=offset, population=8
        ).command
        for offset in (0, 4)
    ]
    assert torch.equal(torch.cat(parts), whole)
