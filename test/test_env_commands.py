import torch

from loco_policy import spec
from loco_train.envs.commands import CommandConfig, CommandSampler


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
