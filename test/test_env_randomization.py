import numpy as np
import pytest
import torch

from loco_policy import spec
from loco_train.envs.randomization import (
    add_observation_noise,
    noise_scale,
    parse_overrides,
    push_mask,
    RandomizationConfig,
    sample_params,
)


def test_parameters_are_in_their_ranges_and_off_means_nominal():
    cfg = RandomizationConfig()
    params = sample_params(500, cfg, torch.Generator().manual_seed(0))
    assert params['kp'].shape == (500, 12) and params['mu'].shape == (500,)
    ratio = params['kp'] / spec.KP
    assert ratio.min() >= 0.9 and ratio.max() <= 1.1 and ratio.std() > 0.03
    assert params['mass_offset'].min() >= -2.0 and params['mass_offset'].max() <= 5.0
    assert params['mu'].min() >= 0.4 and params['mu'].max() <= 1.2
    off = sample_params(3, RandomizationConfig(enabled=False))
    np.testing.assert_array_equal(off['kp'], np.tile(spec.KP, (3, 1)))
    np.testing.assert_array_equal(off['mass_offset'], 0.0)


def test_observation_noise_respects_the_per_term_widths():
    cfg = RandomizationConfig()
    scale = torch.as_tensor(noise_scale(cfg))
    slices = spec.observation_slices()
    assert torch.all(scale[slices['command']] == 0) and torch.all(
        scale[slices['last_action']] == 0
    )
    # joint velocity noise 1.5 rad/s times the 0.05 observation scale
    assert torch.allclose(scale[slices['joint_vel']], torch.tensor(0.075, dtype=scale.dtype))
    obs = torch.zeros(2000, 48, dtype=torch.float64)
    noisy = add_observation_noise(obs, scale, torch.Generator().manual_seed(1))
    assert torch.all(noisy.abs() <= scale + 1e-12)
    assert noisy[:, slices['joint_vel']].abs().max() > 0.07
    assert np.all(noise_scale(RandomizationConfig(enabled=False)) == 0)


def test_push_rate_matches_the_interval():
    cfg = RandomizationConfig(push_interval_s=2.0)
    gen = torch.Generator().manual_seed(2)
    rate = np.mean([push_mask(1000, 0.02, cfg, gen).float().mean().item() for _ in range(50)])
    assert abs(rate - 0.01) < 0.002
    assert not push_mask(10, 0.02, RandomizationConfig(enabled=False)).any()


def test_randomize_overrides_widen_the_ranges_and_draw_a_command_delay():
    items = ['mass_offset=-2:15', 'delay=0:0.02', 'gain_scale=0.7:1.3']
    cfg = RandomizationConfig(**parse_overrides(items))
    assert cfg.mass_offset == (-2.0, 15.0) and cfg.delay == (0.0, 0.02)
    params = sample_params(400, cfg, torch.Generator().manual_seed(0), max_delay=0.04)
    ratio = params['kp'] / spec.KP  # per joint 0.9-1.1 times one 0.7-1.3 per environment
    assert ratio.min() >= 0.63 and ratio.max() <= 1.43 and ratio.mean(axis=1).std() > 0.1
    np.testing.assert_allclose(  # the common factor moves kd with kp
        (params['kd'] / spec.KD).mean(axis=1) / ratio.mean(axis=1), 1.0, atol=0.15
    )
    assert params['delay'].min() >= 0.0 and params['delay'].max() <= 0.02
    assert params['delay'].std() > 0.004 and params['mass_offset'].max() > 10.0
    assert 'delay' not in sample_params(4, RandomizationConfig())  # default: the drives' own
    with pytest.raises(ValueError, match='beyond the drives'):
        sample_params(4, RandomizationConfig(delay=(0.0, 0.05)), max_delay=0.04)
    with pytest.raises(ValueError, match='the fit'):  # a fitted model's widths set the drives'
        parse_overrides(['delay=0:0.02'], actuator=True)
    assert parse_overrides(['gain_scale=0.8:1.2'], actuator=True) == {'gain_scale': (0.8, 1.2)}
    for bad in ('delay=0.02:0', 'friction=-1:1', 'kp_scale=1', 'sigma=0:1', 'delay=0:nan'):
        with pytest.raises(ValueError, match='randomize'):
            parse_overrides([bad])
