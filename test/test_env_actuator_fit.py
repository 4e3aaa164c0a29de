"""Training on a fitted actuator model: `--actuator FILE.yaml`, the randomisation around the fit,
the file's sha256 in the exported policy."""

import contextlib
import hashlib
import io
import json
import time

import numpy as np
import pytest

from loco_policy import spec
from loco_policy.nodes.policy_node import actuator_line
from loco_policy.policy_file import OnnxPolicy
from loco_train.actuator.model import ActuatorParams, to_document
from loco_train.cli import main
from loco_train.envs import actuator_fit, randomization
from loco_train.envs.anymal import AnymalEnv, AnymalEnvConfig
from loco_train.envs.randomization import RandomizationConfig
from test.helpers.deploy_fixtures import ros_env, start_node, stop_process

FIT = ActuatorParams(
    kp_scale=np.linspace(0.9, 1.1, 12),
    kd_scale=1.2,
    armature=0.02,  # kg m^2
    friction=np.tile([0.3, 0.2, 0.1], 4),  # N m
    damping=0.6,  # N m s/rad
    delay=0.0113,  # s
)


def write_fit(path, params=FIT):
    """The YAML fit-actuator writes: 95 % intervals narrow but for LF_HAA's kp (+-30 %)."""
    from ruamel.yaml import YAML

    realised = {
        'kp': params.kp_scale * spec.KP,
        'kd': params.kd_scale * spec.KD,
        'armature': params.armature,
        'friction': params.friction,
        'damping': params.damping,
    }
    intervals = {k: np.stack([v * 0.99, v * 1.01], axis=1) for k, v in realised.items()}
    intervals['kp'][0] = [0.7 * realised['kp'][0], 1.3 * realised['kp'][0]]
    intervals['delay'] = np.array([params.delay - 0.0005, params.delay + 0.0005])
    document = {'robot': 'anymal_c', **to_document(params, spec.KP, spec.KD, intervals)}
    with open(path, 'w') as stream:
        YAML(typ='safe').dump(document, stream)
    return str(path)


def test_ranges_are_centred_on_the_fit_with_the_least_widths(tmp_path):
    fit = actuator_fit.read_fit(write_fit(tmp_path / 'fit.yaml'))
    assert fit.params.delay == pytest.approx(FIT.delay)
    bounds = actuator_fit.ranges(fit, RandomizationConfig(), max_delay=0.04)
    for name in actuator_fit.FIELDS:
        low, high = bounds[name]
        np.testing.assert_allclose(0.5 * (low + high), getattr(FIT, name), rtol=1e-12)
    kp_low, kp_high = bounds['kp_scale']
    assert kp_high[0] == pytest.approx(1.3 * FIT.kp_scale[0])  # the interval: wider than 10 %
    np.testing.assert_allclose(kp_high[1:], 1.1 * FIT.kp_scale[1:])  # the least width
    np.testing.assert_allclose(bounds['friction'][1], 1.2 * FIT.friction)
    assert bounds['delay'] == pytest.approx((FIT.delay - 0.002, FIT.delay + 0.002))


def test_env_drives_follow_the_fit_and_are_randomised_around_it(tmp_path):
    path = write_fit(tmp_path / 'fit.yaml')
    env = AnymalEnv(256, AnymalEnvConfig(actuator_file=path))
    p = {name: env.sim.params[name].numpy().astype(np.float64) for name in env.sim.params}
    bounds = actuator_fit.ranges(env.actuator, env.cfg.randomization, env.max_delay)
    for name, gain in (('kp_scale', spec.KP), ('kd_scale', spec.KD)):
        key = name[:2]
        assert np.all(p[key] >= gain * bounds[name][0] - 1e-4), name
        assert np.all(p[key] <= gain * bounds[name][1] + 1e-4), name
        # centred: the mean over 256 envs within 2 % of the fit
        np.testing.assert_allclose(p[key].mean(0), gain * getattr(FIT, name), rtol=0.02)
    for name in ('armature', 'friction', 'damping'):
        assert np.all(p[name] >= bounds[name][0] - 1e-6) and np.all(p[name] <= bounds[name][1])
        np.testing.assert_allclose(p[name].mean(0), getattr(FIT, name), rtol=0.05)
    assert np.all(np.abs(p['delay'] - FIT.delay) <= 0.002 + 1e-6)
    assert p['delay'].std() > 0.0005  # randomised
    assert env.provenance['actuator_sha256'] == hashlib.sha256(open(path, 'rb').read()).hexdigest()
    off = AnymalEnv(2, AnymalEnvConfig(actuator_file=path, randomization=_disabled()))
    np.testing.assert_allclose(
        off.sim.params['kp'].numpy(), np.tile(FIT.kp_scale * spec.KP, (2, 1))
    )
    np.testing.assert_allclose(off.sim.params['delay'].numpy(), FIT.delay, rtol=1e-6)


def test_gradients_reach_the_previous_action_through_the_delay(tmp_path):
    import torch

    path = write_fit(tmp_path / 'fit.yaml')
    grads = {}
    for name, actuator in (('delayed', path), ('spec drives', '')):
        config = AnymalEnvConfig(
            differentiable=True, actuator_file=actuator, randomization=_disabled()
        )
        env = AnymalEnv(2, config)
        first = torch.full((2, 12), 0.3, requires_grad=True)
        env.step(first)
        env.qpos, env.qvel = env.qpos.detach(), env.qvel.detach()  # only the history is left
        env.step(torch.zeros(2, 12))
        env.qpos[:, 7:].sum().backward()
        grads[name] = first.grad.abs().max().item()
    assert grads['delayed'] > 1e-4 and grads['spec drives'] == 0.0, grads


def test_without_actuator_the_drives_are_the_spec_pd_as_before():
    params = randomization.sample_params(8, RandomizationConfig(), _generator())
    assert sorted(params) == ['kd', 'kp', 'mass_offset', 'mu']  # the same draws as before
    env = AnymalEnv(2)
    assert env.provenance == {} and env.actuator is None
    assert (
        not env.sim.params['friction'].numpy().any() and not env.sim.params['delay'].numpy().any()
    )
    np.testing.assert_array_equal(env.sim.params['damping'].numpy(), 1.0)  # the description's


def test_bad_actuator_file_stops_the_trainer_with_its_reason(tmp_path, capsys):
    (tmp_path / 'bad.yaml').write_text('joints: {LF_HAA: {kp: 1}}\n')
    argv = ['shac', '--actuator', str(tmp_path / 'bad.yaml'), '--num-envs', '2']
    argv += ['--iterations', '1', '--log-dir', str(tmp_path), '--no-progress']
    assert main(argv) == 2
    assert 'joints missing' in capsys.readouterr().err


def test_shac_with_actuator_exports_a_policy_naming_the_file_sha256(tmp_path, request):
    path = write_fit(tmp_path / 'fit.yaml')
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        argv = ['shac', '--actuator', path, '--num-envs', '4', '--iterations', '1']
        argv += ['--horizon', '4', '--log-dir', str(tmp_path / 'run'), '--no-progress']
        assert main(argv) == 0
        summary = json.loads(out.getvalue().strip().splitlines()[-1])
        onnx_path = str(tmp_path / 'policy.onnx')
        assert main(['export', summary['checkpoint'], '-o', onnx_path]) == 0
    provenance = OnnxPolicy(onnx_path).contract.provenance
    digest = hashlib.sha256(open(path, 'rb').read()).hexdigest()
    assert provenance['actuator_sha256'] == digest
    assert provenance['actuator_file'] == 'fit.yaml'
    assert actuator_line({'algorithm': 'shac'}) is None
    # policy_node names the file and its sha256 when it loads the policy
    log_path = tmp_path / 'policy_node.log'
    node = start_node('policy_node', ['-p', f'policy:={onnx_path}'], ros_env(request.node.name),
                      log_path)  # fmt: skip
    try:
        deadline = time.monotonic() + 30.0
        while actuator_line(provenance) not in log_path.read_text() and node.poll() is None:
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
    finally:
        stop_process(node)
    text = log_path.read_text()
    assert f'fit.yaml, sha256 {digest}' in text, text


def _disabled():
    return RandomizationConfig(enabled=False)


def _generator():
    import torch

    return torch.Generator().manual_seed(0)
