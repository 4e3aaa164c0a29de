import torch

from loco_train.policy.export import load_policy
from loco_train.runners.shac import ShacRunConfig, ShacRunner
from loco_train.shac import SHACConfig
from test.helpers.toy_env import PointMassEnv


def config(tmp_path, iterations):
    shac = SHACConfig(horizon=8, actor_hidden=(16,), critic_hidden=(16,), critic_iterations=2)
    return ShacRunConfig(
        env='toy',
        num_envs=8,
        iterations=iterations,
        log_dir=str(tmp_path),
        checkpoint_interval=3,
        progress=False,
        shac=shac,
    )


def test_smoke_run_checkpoints_resumes_and_exports(tmp_path):
    torch.manual_seed(0)
    runner = ShacRunner(PointMassEnv(num_envs=8, episode_steps=10), config(tmp_path, 6))
    summary = runner.learn()
    assert summary['iterations'] == 6 and summary['env_steps'] == 6 * 8 * 8
    assert summary['final_return'] is not None and summary['skipped_windows'] == 0
    assert (tmp_path / 'checkpoint.pt').is_file()
    assert any(p.name.startswith('events.out.tfevents') for p in tmp_path.iterdir())

    resumed = ShacRunner(PointMassEnv(num_envs=8, episode_steps=10), config(tmp_path, 8))
    resumed.load(str(tmp_path / 'checkpoint.pt'))
    assert resumed.shac.iterations == 6 and resumed.env_steps == 6 * 64
    obs = torch.randn(3, 4)
    before = runner.shac.actor(runner.shac.normalize(obs))
    torch.testing.assert_close(resumed.shac.actor(resumed.shac.normalize(obs)), before)
    assert resumed.learn()['iterations'] == 8

    policy, info = load_policy(str(tmp_path / 'checkpoint.pt'))
    assert info['algorithm'] == 'shac' and info['iterations'] == 8
    expected = resumed.shac.actor(resumed.shac.normalize(obs))
    torch.testing.assert_close(policy(obs), expected)


def test_a_run_started_from_a_policy_file_acts_as_it_until_its_actor_warmup_ends(tmp_path):
    import numpy as np
    import pytest

    from loco_policy.nodes.policy_node import SHIPPED_POLICY
    from loco_policy.policy_file import file_sha256, OnnxPolicy
    from loco_train.envs.vec_env import make_env

    def runner(hidden=(256, 128, 64), activation='elu'):
        shac = SHACConfig(horizon=4, critic_iterations=1, actor_warmup=1, actor_hidden=hidden,
                          activation=activation)  # fmt: skip
        cfg = ShacRunConfig(num_envs=8, iterations=1, log_dir=str(tmp_path), progress=False,
                            checkpoint_interval=0, init_policy=SHIPPED_POLICY,
                            shac=shac)  # fmt: skip
        return ShacRunner(make_env('anymal', 8, seed=0, differentiable=True), cfg)

    run = runner()
    shipped = OnnxPolicy(SHIPPED_POLICY, warmup=0)
    obs = np.random.default_rng(0).normal(size=(16, 48)) * 0.5

    def gap():
        with torch.no_grad():
            ours = run.shac.actor(run.shac.normalize(torch.as_tensor(obs, dtype=torch.float32)))
        return float(np.abs(ours.numpy() - np.array([shipped.act(o) for o in obs])).max())

    assert gap() < 1e-5
    run.learn()  # the warm-up iteration: critic only, the normaliser barely moves
    assert gap() < 1e-3
    run.cfg.iterations = 2
    run.learn()  # the actor's first step
    assert gap() > 1e-6
    assert run.provenance()['init_policy_sha256'] == file_sha256(SHIPPED_POLICY)
    run.env.close()
    with pytest.raises(ValueError, match='hidden'):
        runner(hidden=(64,))
    with pytest.raises(ValueError, match='activation elu here tanh'):
        runner(activation='tanh')


def test_a_resumed_run_keeps_the_policy_it_started_from_and_both_flags_are_refused(tmp_path):
    import subprocess
    import sys

    from loco_policy.nodes.policy_node import SHIPPED_POLICY
    from loco_policy.policy_file import file_sha256
    from loco_train.envs.vec_env import make_env

    shac = SHACConfig(horizon=2, critic_iterations=1, actor_warmup=1)
    cfg = ShacRunConfig(num_envs=4, iterations=1, log_dir=str(tmp_path), progress=False,
                        checkpoint_interval=0, init_policy=SHIPPED_POLICY, shac=shac)  # fmt: skip
    run = ShacRunner(make_env('anymal', 4, seed=0, differentiable=True), cfg)
    run.learn()
    run.env.close()
    cfg = ShacRunConfig(num_envs=4, iterations=1, log_dir=str(tmp_path), progress=False,
                        checkpoint_interval=0, shac=SHACConfig(horizon=2))  # fmt: skip
    fresh = ShacRunner(make_env('anymal', 4, seed=0, differentiable=True), cfg)
    fresh.load(str(tmp_path / 'checkpoint.pt'))
    assert fresh.provenance()['init_policy_sha256'] == file_sha256(SHIPPED_POLICY)
    fresh.env.close()
    argv = [sys.executable, '-m', 'loco_train.cli', 'shac', '--iterations', '1', '--resume',
            str(tmp_path / 'checkpoint.pt'), '--init-policy', SHIPPED_POLICY]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and 'not both' in done.stderr


def test_a_gait_clock_run_starts_from_the_velocity_policy_and_exports_its_layout(tmp_path):
    import numpy as np

    from loco_policy import spec
    from loco_policy.nodes.policy_node import SHIPPED_POLICY
    from loco_policy.policy_file import OnnxPolicy
    from loco_train.envs.vec_env import make_env
    from loco_train.policy.export import export_policy, load_policy

    env = make_env('anymal', 8, seed=0, differentiable=True, observation='gait_clock',
                   reward_overrides=['foot_height=0.5'])  # fmt: skip
    obs = env.reset()
    assert obs.shape == (8, 50)
    np.testing.assert_allclose(obs[:, -2:].numpy(), [[0.0, 1.0]] * 8, atol=1e-6)  # tick 0
    shac = SHACConfig(horizon=4, critic_iterations=1, actor_warmup=1)
    cfg = ShacRunConfig(num_envs=8, iterations=1, log_dir=str(tmp_path), progress=False,
                        checkpoint_interval=0, init_policy=SHIPPED_POLICY, shac=shac)  # fmt: skip
    run = ShacRunner(env, cfg)
    shipped = OnnxPolicy(SHIPPED_POLICY, warmup=0)
    base = np.random.default_rng(0).normal(size=(8, 48)) * 0.5
    clock = np.stack(spec.gait_clock(np.arange(8)), axis=1)  # any clock: zero weights at start
    with torch.no_grad():
        x = torch.as_tensor(np.concatenate([base, clock], 1), dtype=torch.float32)
        ours = run.shac.actor(run.shac.normalize(x)).numpy()
    np.testing.assert_allclose(ours, [shipped.act(o) for o in base], atol=1e-5)
    run.learn()
    policy, info = load_policy(run.save())
    assert info['observation_layout'] == 'gait_clock'
    path = tmp_path / 'clock.onnx'
    meta = export_policy(policy, path, 'shac', 1, 0.0, layout=info['observation_layout'])
    assert (
        meta['gait_period'] == spec.GAIT_PERIOD and meta['observation'][-1]['name'] == 'gait_clock'
    )
    exported = OnnxPolicy(path)
    assert exported.contract.gait_clock and exported.contract.obs_dim == 50
    run.env.close()


def test_a_layer_norm_run_exports_a_file_that_reads_back_and_is_refused_where_unsupported(
    tmp_path,
):
    import numpy as np
    import pytest

    from loco_policy.policy_file import OnnxPolicy
    from loco_train.envs.vec_env import make_env
    from loco_train.finetune.learner import FineTuner, WarmStartError
    from loco_train.policy.export import export_policy
    from loco_train.policy.onnx_import import actor_from_onnx

    def runner(log_dir, layer_norm, init_policy=None):
        shac = SHACConfig(horizon=4, critic_iterations=1, layer_norm=layer_norm)
        cfg = ShacRunConfig(num_envs=8, iterations=2, log_dir=str(log_dir), progress=False,
                            checkpoint_interval=0, init_policy=init_policy,
                            shac=shac)  # fmt: skip
        return ShacRunner(make_env('anymal', 8, seed=0, differentiable=True), cfg)

    run = runner(tmp_path / 'a', True)
    for net, hidden in ((run.shac.actor.trunk, 3), (run.shac.critic.net[0], 2)):
        assert sum(isinstance(m, torch.nn.LayerNorm) for m in net) == hidden
    run.learn()
    policy, info = load_policy(run.save())
    path = tmp_path / 'ln.onnx'
    export_policy(policy, path, 'shac', 2, 0.0, layout=info['observation_layout'])
    obs = np.random.default_rng(0).normal(size=(16, 48)) * 0.5
    obs = torch.as_tensor(obs, dtype=torch.float32)
    with torch.no_grad():
        ours = run.shac.actor(run.shac.normalize(obs)).numpy()
    exported = OnnxPolicy(path, warmup=0)
    np.testing.assert_allclose([exported.act(o) for o in obs.numpy()], ours, atol=1e-5)
    actor, _ = actor_from_onnx(path)  # checks itself against the file
    assert any(isinstance(m, torch.nn.LayerNorm) for m in actor.trunk)
    run.env.close()

    resumed = runner(tmp_path / 'b', True, init_policy=str(path))  # the same network: accepted
    resumed.env.close()
    with pytest.raises(ValueError, match='layer_norm True here False'):
        runner(tmp_path / 'c', False, init_policy=str(path))
    with pytest.raises(WarmStartError, match='LayerNorm'):
        FineTuner.from_onnx(str(path))


def test_privileged_without_a_privileged_critic_is_refused(tmp_path, capsys):
    from loco_train.cli import main

    argv = ['shac', '--privileged', 'dynamics', '--iterations', '1', '--num-envs', '2',
            '--horizon', '2', '--no-progress', '--log-dir', str(tmp_path)]  # fmt: skip
    assert main(argv) == 2
    assert 'give both' in capsys.readouterr().err
    assert not (tmp_path / 'checkpoint.pt').exists()
