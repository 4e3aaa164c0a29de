"""The fine-tuning learner without ROS: warm start from the shipped policy, updates, export."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from loco_policy import spec
from loco_policy.control.hot_swap import action_check, contract_differences, SwapLimits
from loco_policy.policy_file import OnnxPolicy
from loco_train.finetune.ingest import empty_transitions
from loco_train.finetune.learner import FinetuneConfig, FineTuner, WarmStartError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SHIPPED = 'loco_policy/policies/anymal_c_walk.onnx'
PPO = 'loco_policy/policies/anymal_c_walk_ppo.onnx'


def held_out_observations(tuner, count=512, seed=7):
    """Observations around the policy's own normaliser statistics (never used to fit)."""
    rng = np.random.default_rng(seed)
    mean = tuner.sac.normalizer.mean.numpy()
    std = np.sqrt(tuner.sac.normalizer.var.numpy())
    return (mean + std * rng.standard_normal((count, spec.OBS_DIM))).astype(np.float32)


def fake_transitions(count, seed=0):
    """Consecutive WALK transitions of one segment with random observations and rewards."""
    rng = np.random.default_rng(seed)
    t = empty_transitions(count)
    t['seq'][:] = np.arange(count)
    t['segment'][:] = 1
    t['obs'][:] = rng.standard_normal((count, spec.OBS_DIM)) * 0.3
    t['next_obs'][:] = rng.standard_normal((count, spec.OBS_DIM)) * 0.3
    t['action'][:] = (
        spec.DEFAULT_JOINT_POS * 0 + rng.standard_normal((count, spec.ACTION_DIM)) * 0.1
    )
    t['reward'][:] = rng.standard_normal(count) * 0.01
    return t


def test_the_warm_started_actor_mean_is_the_deployed_policy():
    tuner = FineTuner.from_onnx(SHIPPED)
    deployed = OnnxPolicy(SHIPPED)
    obs = held_out_observations(tuner)
    ours = tuner.sac.act(torch.as_tensor(obs), deterministic=True).numpy()
    theirs = np.array([deployed.act(row) for row in obs])
    assert np.abs(ours - theirs).max() < 1e-5
    assert tuner.actor_frozen and tuner.version == 0


def test_a_policy_without_a_squashed_gaussian_actor_is_refused_with_the_reason():
    with pytest.raises(WarmStartError, match='checkpoint'):
        FineTuner.from_onnx(PPO)


def test_updates_follow_the_update_to_data_ratio_and_the_actor_waits_for_its_warm_up():
    cfg = FinetuneConfig(warmup_updates=30, learning_starts=64, batch_size=32)
    tuner = FineTuner.from_onnx(SHIPPED, cfg)
    actor_before = [p.detach().clone() for p in tuner.sac.actor.parameters()]
    critic_before = [p.detach().clone() for p in tuner.sac.critic.parameters()]
    assert tuner.add(fake_transitions(64)) == 64
    assert tuner.owed() == 0  # nothing owed before learning_starts
    tuner.add(fake_transitions(20, seed=1))
    assert tuner.owed() == 25  # 20 transitions x 1.25
    assert tuner.update() == 25
    assert all(torch.equal(a, b) for a, b in zip(actor_before, tuner.sac.actor.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(critic_before, tuner.sac.critic.parameters()))
    tuner.add(fake_transitions(40, seed=2))
    tuner.update()  # 50 more: the warm-up ends at 30, then the actor steps every 20th update
    assert not tuner.actor_frozen
    assert not all(torch.equal(a, b) for a, b in zip(actor_before, tuner.sac.actor.parameters()))


def test_the_anchor_bounds_the_actors_drift_from_the_warm_start():
    def drift(anchor):
        cfg = FinetuneConfig(
            warmup_updates=0, learning_starts=64, batch_size=32, actor_update_interval=1,
            actor_lr=1e-3, anchor=anchor,
        )  # fmt: skip
        tuner = FineTuner.from_onnx(SHIPPED, cfg)
        assert tuner.anchor_distance() == 0.0
        tuner.add(fake_transitions(64))
        tuner.add(fake_transitions(80, seed=1))
        assert tuner.update() == 100  # 100 actor steps at lr 1e-3
        return tuner.anchor_distance()

    free, held, pinned = drift(0.0), drift(0.05), drift(1.0)
    assert free > 0.05  # Adam moves a weight by up to about lr per step: 100 steps, ~0.1
    assert held < 0.5 * free  # lr / anchor = 0.02 per weight, reached within ~1 / anchor steps
    assert pinned == 0.0  # pulled all the way back after every step


def test_a_head_only_actor_keeps_the_warm_starts_trunk():
    cfg = FinetuneConfig(
        warmup_updates=0, learning_starts=64, batch_size=32, actor_update_interval=1,
        actor_lr=1e-3, actor_trainable='head',
    )  # fmt: skip
    tuner = FineTuner.from_onnx(SHIPPED, cfg)
    trunk = [p.detach().clone() for p in tuner.sac.actor.trunk.parameters()]
    head = [p.detach().clone() for p in tuner.sac.actor.head.parameters()]
    tuner.add(fake_transitions(64))
    tuner.add(fake_transitions(40, seed=1))
    assert tuner.update() == 50
    assert all(torch.equal(a, b) for a, b in zip(trunk, tuner.sac.actor.trunk.parameters()))
    heads = zip(head, tuner.sac.actor.head.parameters(), strict=True)
    moved = max(float((a - b).abs().max()) for a, b in heads)
    assert moved > 1e-3  # 50 Adam steps at lr 1e-3
    with pytest.raises(ValueError, match='actor_trainable'):
        FinetuneConfig(actor_trainable='trunk')


def test_nan_transitions_are_not_stored():
    tuner = FineTuner.from_onnx(SHIPPED, FinetuneConfig(learning_starts=1))
    t = fake_transitions(10)
    t['obs'][3, 5] = np.nan
    t['reward'][7] = np.inf
    assert tuner.add(t) == 8 and len(tuner.robot) == 8


def test_an_export_keeps_the_contract_and_passes_the_robot_checks(tmp_path):
    tuner = FineTuner.from_onnx(SHIPPED, FinetuneConfig(warmup_updates=0, learning_starts=32,
                                                        batch_size=32))  # fmt: skip
    tuner.add(fake_transitions(32))
    tuner.add(fake_transitions(40, seed=3))
    tuner.update()
    version, parent, metadata = tuner.export(str(tmp_path / 'v1.onnx'))
    assert (version, parent) == (1, 0)
    candidate, active = OnnxPolicy(str(tmp_path / 'v1.onnx')), OnnxPolicy(SHIPPED)
    assert contract_differences(candidate.contract, active.contract) == []
    provenance = metadata['provenance']
    assert provenance['parent_version'] == 0 and provenance['updates'] == tuner.updates
    assert provenance['robot_transitions'] == 72 and provenance['algorithm'] == 'sac_finetune'
    figures = action_check(candidate, active, held_out_observations(tuner, 64), SwapLimits())
    assert figures['deviation_max'] < 0.1  # a slow actor (lr 1e-5) barely moves in 50 updates


def test_a_restored_learner_continues_its_counters_and_weights():
    cfg = FinetuneConfig(warmup_updates=0, learning_starts=16, batch_size=16)
    tuner = FineTuner.from_onnx(SHIPPED, cfg)
    tuner.add(fake_transitions(40))
    tuner.update()
    tuner.version = 4
    blob = tuner.to_bytes()
    again = FineTuner.from_onnx(SHIPPED, cfg)
    again.load_bytes(blob)
    assert (again.updates, again.version, again.robot_transitions) == (tuner.updates, 4, 40)
    for a, b in zip(tuner.sac.critic.parameters(), again.sac.critic.parameters()):
        assert torch.equal(a, b)


def test_a_restored_learner_takes_its_configured_learning_rates_not_the_stored_ones():
    stored = FineTuner.from_onnx(SHIPPED, FinetuneConfig(actor_lr=1e-5, critic_lr=3e-4))
    cfg = FinetuneConfig(actor_lr=2e-5, critic_lr=1e-4, alpha_lr=5e-5)
    again = FineTuner.from_onnx(SHIPPED, cfg)
    again.load_bytes(stored.to_bytes())
    sac = again.sac
    for optim, lr in ((sac.actor_optim, 2e-5), (sac.critic_optim, 1e-4), (sac.alpha_optim, 5e-5)):
        assert [group['lr'] for group in optim.param_groups] == [lr] * len(optim.param_groups)


def test_exports_are_numbered_above_the_version_floor_and_name_their_true_parent():
    tuner = FineTuner.from_onnx(SHIPPED)
    tuner.version_floor = 7  # candidates 1..7 of an earlier run lie in policy_dir
    version, parent, _, extra = tuner.snapshot()
    assert (version, parent, extra['parent_version']) == (8, 0, 0)
    assert tuner.snapshot()[:2] == (9, 8)


def sac_run_checkpoint(tmp_path):
    """A checkpoint.pt and replay.pt laid out as `loco-train sac --save-replay` writes them."""
    from loco_train.policy.atomic_io import atomic_torch_save
    from loco_train.policy.export import POLICY_KEY, policy_payload
    from loco_train.sac.actor import anymal_action_bounds
    from loco_train.sac.replay_buffer import ReplayBuffer
    from loco_train.sac.sac import SAC, SACConfig

    b, c = anymal_action_bounds()
    config = SACConfig(actor_hidden=(64, 64), critic_hidden=(64, 64), gamma=0.97, n_step=5)
    sac = SAC(spec.OBS_DIM, b, c, config)
    with torch.no_grad():
        sac.log_alpha.fill_(-3.0)
    replay = ReplayBuffer(400, 4, spec.OBS_DIM, spec.ACTION_DIM)
    for _ in range(100):
        replay.add(
            torch.randn(4, spec.OBS_DIM), torch.zeros(4, spec.ACTION_DIM), torch.ones(4),
            torch.randn(4, spec.OBS_DIM), torch.zeros(4, dtype=torch.bool),
            torch.zeros(4, dtype=torch.bool),
        )  # fmt: skip
    replay.save(str(tmp_path / 'replay.pt'))
    payload = policy_payload(sac.actor, sac.actor_kwargs, sac.normalizer, 'sac', 10, 1.0)
    atomic_torch_save({'sac': sac.state_dict(), POLICY_KEY: payload}, str(tmp_path / 'ck.pt'))
    return sac


def test_a_sac_checkpoint_warm_start_brings_its_networks_temperature_and_prior(tmp_path):
    saved = sac_run_checkpoint(tmp_path)
    cfg = FinetuneConfig(batch_size=64, prior_decay_updates=100, learning_starts=8)
    assert FineTuner.from_checkpoint(str(tmp_path / 'ck.pt'), cfg).actor_frozen  # critics refit
    cfg.checkpoint_warmup_updates = 0
    tuner = FineTuner.from_checkpoint(
        str(tmp_path / 'ck.pt'), cfg, prior_replay=str(tmp_path / 'replay.pt')
    )
    for a, b in zip(saved.critic.parameters(), tuner.sac.critic.parameters()):
        assert torch.equal(a, b)
    assert float(tuner.sac.log_alpha.detach()) == -3.0 and not tuner.actor_frozen
    assert tuner.sac.actor_optim.param_groups[0]['lr'] == cfg.actor_lr
    assert (tuner.cfg.gamma, tuner.cfg.n_step) == (saved.cfg.gamma, saved.cfg.n_step)
    # a resumed store goes on with the returns its own critics were fitted to
    tuner.cfg.gamma, tuner.cfg.n_step = 0.99, 3
    resumed = FineTuner.from_checkpoint(str(tmp_path / 'ck.pt'), cfg)
    resumed.load_bytes(tuner.to_bytes())
    assert (resumed.cfg.gamma, resumed.cfg.n_step) == (0.99, 3)
    tuner.cfg.gamma, tuner.cfg.n_step = saved.cfg.gamma, saved.cfg.n_step
    assert tuner.prior_share() == 0.5
    tuner.add(fake_transitions(40))
    batch = tuner.sample()
    assert len(batch) == 64
    assert (batch.reward > 2.0).sum() >= 20  # about half from the prior (3-step return 2.97)
    tuner.updates = 100
    assert tuner.prior_share() == 0.0
    assert (tuner.sample().reward > 2.0).sum() == 0


def test_co_training_transitions_keep_their_share_beside_a_decaying_prior(tmp_path):
    # the unperturbed simulated robot's rows go to a replay of their own (beside replay.pt's,
    # laid out for 4 environments), owe no update, wait for learning_starts, and keep sim_share
    # of every batch while the prior decays
    sac_run_checkpoint(tmp_path)
    cfg = FinetuneConfig(
        batch_size=64, learning_starts=32, prior_share=0.5, prior_decay_updates=100,
        checkpoint_warmup_updates=0, sim_share=0.25,
    )  # fmt: skip
    tuner = FineTuner.from_checkpoint(
        str(tmp_path / 'ck.pt'), cfg, prior_replay=str(tmp_path / 'replay.pt')
    )
    tuner.add(fake_transitions(64))
    owed = tuner.owed()
    sim = fake_transitions(40, seed=3)
    sim['reward'][:] = -1.0  # told apart from the robot's (std 0.01) and the prior's (+1)
    sim['obs'][5, 0] = np.nan  # dropped, and the row before it ends its segment
    assert tuner.sim_share() == 0.0  # no co-training rows yet
    assert tuner.add_sim({k: v[:20] for k, v in sim.items()}) == 19
    assert tuner.sim_share() == 0.0  # 19 rows: below learning_starts
    assert tuner.add_sim({k: v[20:] for k, v in sim.items()}) == 20
    assert tuner.owed() == owed and tuner.robot_transitions == 64 and len(tuner.sim) == 39
    batch = tuner.sample()
    assert len(batch) == 64 and (batch.reward < -0.5).sum() == 16
    assert (batch.reward > 0.5).sum() == 32  # the prior's half (rewards 1: returns 1 to 2.97)
    tuner.updates = 1000  # the prior has decayed; the co-training share stays
    assert tuner.prior_share() == 0.0 and tuner.sim_share() == 0.25
    batch = tuner.sample()
    assert (batch.reward < -0.5).sum() == 16 and (batch.reward > 0.5).sum() == 0
    with pytest.raises(ValueError, match='sim_share'):
        FinetuneConfig(sim_share=1.0)
    with pytest.raises(ValueError, match='prior_share'):
        FinetuneConfig(prior_share=1.5)


def test_a_file_that_is_no_checkpoint_is_refused(tmp_path):
    bad = tmp_path / 'bad.pt'
    bad.write_bytes(b'not a checkpoint')
    with pytest.raises(WarmStartError):
        FineTuner.from_checkpoint(str(bad))
    with pytest.raises(WarmStartError):
        FineTuner.from_onnx(str(bad))


def test_the_temperature_holds_the_warm_start_policys_own_entropy():
    from loco_train.finetune.learner import policy_entropy

    tuner = FineTuner.from_onnx(SHIPPED)
    own = policy_entropy(tuner.sac.actor)
    assert tuner.sac.target_entropy == pytest.approx(own)
    assert own < -spec.ACTION_DIM  # a deployed policy is far narrower than SAC's usual -d
    fixed = FineTuner.from_onnx(SHIPPED, FinetuneConfig(target_entropy=-5.0))
    assert fixed.sac.target_entropy == -5.0


def test_an_exported_relu_actor_warm_starts_with_its_own_activation(tmp_path):
    from loco_train.policy.export import DeployedPolicy, export_policy
    from loco_train.policy.normalizer import EmpiricalNormalizer
    from loco_train.sac.actor import anymal_action_bounds, SquashedGaussianActor

    torch.manual_seed(0)
    b, c = anymal_action_bounds()
    actor = SquashedGaussianActor(spec.OBS_DIM, b, c, hidden=(32, 32), activation='relu',
                                  mean_init_std=0.3)  # fmt: skip
    normalizer = EmpiricalNormalizer(spec.OBS_DIM)
    path = str(tmp_path / 'relu.onnx')
    export_policy(DeployedPolicy(normalizer, actor), path, 'sac', 1, 0.0)
    tuner = FineTuner.from_onnx(path)  # every export has a Tanh (the squash): not the trunk's
    assert type(tuner.sac.actor.trunk[1]).__name__ == 'ReLU'
    obs = held_out_observations(tuner, 64)
    deployed = OnnxPolicy(path)
    ours = tuner.sac.act(torch.as_tensor(obs), deterministic=True).numpy()
    assert np.abs(ours - np.array([deployed.act(row) for row in obs])).max() < 1e-5


def test_stored_transitions_put_back_after_a_restart_end_their_segment():
    tuner = FineTuner.from_onnx(SHIPPED, FinetuneConfig(learning_starts=1))
    tuner.refill(fake_transitions(30))
    assert tuner.owed() == 0 and tuner.robot_transitions == 0
    assert bool(tuner.robot.truncated[29, 0]) and not tuner.robot.truncated[:29].any()
    t = fake_transitions(10)
    t['obs'][4, 0] = np.nan  # a dropped row ends the segment of the one before it
    tuner.add(t)
    assert bool(tuner.robot.truncated[30 + 3, 0])
    tuner = FineTuner.from_onnx(SHIPPED, FinetuneConfig(learning_starts=1))
    two_runs = fake_transitions(20)  # a kill -9 lost run 1's last segment end: seq jumps at 10
    two_runs['seq'][10:] += 5000
    two_runs['episode'][10:] = 3
    tuner.refill(two_runs)
    assert bool(tuner.robot.truncated[9, 0]) and bool(tuner.robot.truncated[19, 0])
    assert int(tuner.robot.truncated[:20, 0].sum()) == 2


def test_candidates_after_the_first_swap_weights_into_the_traced_graph(tmp_path):
    import onnxruntime

    from loco_train.policy.export import DeployedPolicy
    from loco_train.policy.normalizer import EmpiricalNormalizer
    from loco_train.policy.onnx_template import OnnxTemplate
    from loco_train.sac.actor import anymal_action_bounds, SquashedGaussianActor

    torch.manual_seed(0)
    b, c = anymal_action_bounds()

    def policy(hidden):
        actor = SquashedGaussianActor(spec.OBS_DIM, b, c, hidden=hidden, mean_init_std=0.3)
        normalizer = EmpiricalNormalizer(spec.OBS_DIM)
        normalizer.update(torch.randn(64, spec.OBS_DIM) * 3.0 + 1.0)  # mean, var off 0, 1
        return DeployedPolicy(normalizer, actor).eval()

    template, obs = OnnxTemplate(), np.random.default_rng(1).normal(size=(16, spec.OBS_DIM))
    obs = obs.astype(np.float32)
    for step, hidden in enumerate([(32, 32), (32, 32), (32, 32), (16, 16)]):
        module = policy(hidden)  # new weights and statistics each time
        model = template.model_for(module)
        path = tmp_path / f'p{step}.onnx'
        path.write_bytes(model.SerializeToString())
        ours = onnxruntime.InferenceSession(str(path)).run(None, {'obs': obs})[0]
        with torch.no_grad():
            theirs = module(torch.from_numpy(obs)).numpy()
        assert np.abs(ours - theirs).max() < 1e-5, step
        # one trace for the three of one architecture, a second for the other architecture
        assert template.traces == (1 if step < 3 else 2), (step, template.traces)


def test_a_gait_clock_policy_file_is_refused_naming_the_transition_rows(tmp_path):
    from loco_train.policy.export import DeployedPolicy, export_policy
    from loco_train.policy.normalizer import EmpiricalNormalizer
    from loco_train.sac.actor import SquashedGaussianActor

    width = spec.OBS_DIM + 2
    low, high = spec.ACTION_LOW, spec.ACTION_HIGH
    actor = SquashedGaussianActor(width, (high + low) / 2, (high - low) / 2, (32,), 'elu')
    path = tmp_path / 'clock.onnx'
    export_policy(DeployedPolicy(EmpiricalNormalizer(width), actor), path, 'sac', 1, 0.0,
                  layout='gait_clock')  # fmt: skip
    assert OnnxPolicy(path).contract.gait_clock
    with pytest.raises(WarmStartError, match='48-term velocity observation'):
        FineTuner.from_onnx(path)


def test_follow_puts_back_an_exported_versions_actor_and_optimiser():
    import copy

    from loco_train.finetune import learner

    tuner = FineTuner.from_onnx(SHIPPED, FinetuneConfig())
    tuner.snapshot()  # version 1 exported: its actor kept
    weights = [p.detach().clone() for p in tuner.sac.actor.parameters()]
    optim = copy.deepcopy(tuner.sac.actor_optim.state_dict())
    with torch.no_grad():
        for p in tuner.sac.actor.parameters():
            p.mul_(1.5)
    tuner.sac.actor_optim.param_groups[0]['lr'] = 1.0
    assert tuner.follow(1) and tuner.follows == 1
    assert all(torch.equal(a, b) for a, b in zip(weights, tuner.sac.actor.parameters()))
    assert tuner.sac.actor_optim.param_groups[0]['lr'] == optim['param_groups'][0]['lr']
    assert not tuner.follow(7) and tuner.follows == 1  # never exported
    for _ in range(learner.KEPT_ACTOR_STATES + 1):  # refused one by one, v1 still running
        tuner.snapshot()
        assert tuner.follow(1)
    assert len(tuner.actor_states) == learner.KEPT_ACTOR_STATES
    for _ in range(learner.KEPT_ACTOR_STATES):  # 16 newer exports and no refusal: v1 let go
        tuner.snapshot()
    assert not tuner.follow(1)


def test_follow_reads_a_version_no_longer_kept_back_from_its_policy_file(tmp_path):
    from loco_policy.policy_file import OnnxPolicy

    tuner = FineTuner.from_onnx(SHIPPED, FinetuneConfig())
    assert tuner.follow(0)  # the warm start is kept: the robot runs it before any candidate
    with torch.no_grad():
        for p in tuner.sac.actor.parameters():
            p.mul_(0.9)
    path = str(tmp_path / 'v1.onnx')
    tuner.export(path)  # version 1, as written for the robot
    restarted = FineTuner.from_onnx(SHIPPED, FinetuneConfig())  # e.g. after a restart
    restarted.load_bytes(tuner.to_bytes())
    with torch.no_grad():
        for p in restarted.sac.actor.parameters():
            p.mul_(1.2)
    assert not restarted.follow(1)  # not kept, no file given
    assert not restarted.follow(1, str(tmp_path / 'missing.onnx'))
    assert restarted.follow(1, path) and restarted.follows == 1
    obs = np.random.default_rng(0).normal(size=(64, spec.OBS_DIM)).astype(np.float32)
    ours = restarted.sac.act(torch.as_tensor(obs), deterministic=True).numpy()
    deployed = OnnxPolicy(path)
    assert np.abs(ours - np.array([deployed.act(row) for row in obs])).max() < 1e-5
    assert not restarted.sac.actor_optim.state  # that version's Adam moments were not kept
    assert restarted.follow(1)  # and it is kept from now on
    # a file of another lineage (its normaliser differs) is not taken for a version of ours
    foreign = FineTuner.from_onnx(SHIPPED, FinetuneConfig())
    with torch.no_grad():
        foreign.sac.normalizer.mean.add_(0.5)
    other = str(tmp_path / 'foreign.onnx')
    foreign.export(other)
    before = [p.detach().clone() for p in restarted.sac.actor.parameters()]
    assert not restarted.follow(7, other)
    assert all(torch.equal(a, b) for a, b in zip(before, restarted.sac.actor.parameters()))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason='needs two CPUs to tell them apart')
def test_the_exporters_check_keeps_every_thread_on_the_pinned_cpu():
    # An onnxruntime session with default options pins a pool thread to a CPU of its own choice
    # whatever the process's affinity; the sidecar's exports must stay off the control core.
    cpu = min(os.sched_getaffinity(0))
    script = f"""
import glob, os
os.sched_setaffinity(0, {{{cpu}}})
import onnxruntime
import torch
from loco_policy import spec
from loco_train.policy.export import DeployedPolicy
from loco_train.policy.normalizer import EmpiricalNormalizer
from loco_train.policy.onnx_template import OnnxTemplate
from loco_train.sac.actor import anymal_action_bounds, SquashedGaussianActor
seen = []
class Session(onnxruntime.InferenceSession):  # the CPUs of every thread while a session lives
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for task in glob.glob('/proc/self/task/*/status'):
            seen.extend(l.split()[-1] for l in open(task) if l.startswith('Cpus_allowed_list'))
onnxruntime.InferenceSession = Session
b, c = anymal_action_bounds()
actor = SquashedGaussianActor(spec.OBS_DIM, b, c, hidden=(16, 16), mean_init_std=0.3)
normalizer = EmpiricalNormalizer(spec.OBS_DIM)
normalizer.update(torch.randn(64, spec.OBS_DIM) * 3.0 + 1.0)  # every initializer distinct
template = OnnxTemplate()
for _ in range(2):  # the second copy of the template is checked with onnxruntime
    template.model_for(DeployedPolicy(normalizer, actor).eval())
assert template.traces == 1
print(*seen)
"""
    out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                         timeout=120, cwd=REPO)  # fmt: skip
    assert out.returncode == 0, out.stderr
    allowed = out.stdout.split()
    assert allowed and set(allowed) == {str(cpu)}, allowed
