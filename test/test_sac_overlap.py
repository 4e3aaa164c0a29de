"""The SAC runner's learner thread: same update count, deterministic, metrics read per interval."""

import pytest
import torch

from loco_train.envs.vec_env import make_env
from loco_train.runners.sac import RunnerConfig, SACRunner


class RecordingRunner(SACRunner):
    """SACRunner that notes when update metrics are read (the one host read per interval)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reads = []

    def _mean_metrics(self, sums, count):
        assert all(isinstance(v, torch.Tensor) for v in sums.values())  # still not read
        self.reads.append((self.steps, count))
        return super()._mean_metrics(sums, count)


def train(tmp_path, overlap: bool, name: str) -> RecordingRunner:
    torch.manual_seed(0)
    cfg = RunnerConfig(
        env='gymnasium:Pendulum-v1',
        total_steps=1_200,
        learning_starts=200,
        log_interval=400,
        checkpoint_interval=0,
        eval_episodes=2,
        progress=False,
        overlap=overlap,
        log_dir=str(tmp_path / name),
    )
    cfg.sac.actor_hidden = cfg.sac.critic_hidden = (32, 32)
    cfg.sac.batch_size = 64
    cfg.sac.utd_ratio = 0.5
    env = make_env(cfg.env, cfg.num_envs, seed=cfg.seed)
    runner = RecordingRunner(env, cfg)
    try:
        runner.summary_result = runner.learn()
    finally:
        env.close()
    return runner


def test_overlapped_learner_is_deterministic_and_does_the_same_updates(tmp_path):
    first = train(tmp_path, True, 'a')
    second = train(tmp_path, True, 'b')
    serial = train(tmp_path, False, 'c')
    # 1000 transitions past learning_starts at utd 0.5: 500 updates either way, none skipped.
    for runner in (first, second, serial):
        assert runner.sac.num_updates == 500 and runner.sac.num_skipped == 0
        assert runner.summary_result['eval_return'] < 0  # Pendulum's returns are negative
        # Metrics were read at the three log intervals only, holding every update since.
        assert runner.reads == [(400, 100), (800, 200), (1200, 200)]
    for a, b in zip(first.sac.actor.parameters(), second.sac.actor.parameters()):
        assert torch.equal(a, b)  # its own random stream: the same run twice
    # The overlapped updates see the buffer one step behind, so the runs differ, a little.
    assert any(
        not torch.equal(a, b)
        for a, b in zip(first.sac.actor.parameters(), serial.sac.actor.parameters())
    )


def test_a_failing_update_round_reaches_the_caller(tmp_path):
    cfg = RunnerConfig(
        total_steps=400, learning_starts=100, eval_episodes=0, progress=False,
        checkpoint_interval=0, overlap=True, log_dir=str(tmp_path),
    )  # fmt: skip
    cfg.sac.n_step = 0  # the replay buffer refuses it inside the learner thread
    env = make_env(cfg.env, cfg.num_envs, seed=0)
    runner = SACRunner(env, cfg)
    try:
        with pytest.raises(ValueError, match='n_step must be at least 1'):
            runner.learn()
    finally:
        env.close()


def test_the_learner_thread_uses_the_callers_torch_threads():
    from loco_train.sac.background import BackgroundUpdates

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        learner = BackgroundUpdates()
        learner.submit(torch.get_num_threads)
        assert learner.wait() == 1
        learner.close()
        # Its own count (RunnerConfig.learner_threads) while the caller keeps one.
        learner = BackgroundUpdates(2)
        learner.submit(torch.get_num_threads)
        assert learner.wait() == 2 and torch.get_num_threads() == 1
        learner.close()
    finally:
        torch.set_num_threads(threads)
