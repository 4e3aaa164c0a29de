import numpy as np
import pytest

from loco_policy.control.loop_stats import LoopStats, percentiles


def test_jitter_rate_and_percentiles():
    stats = LoopStats(period=0.02, window=3)
    for t in (0.0, 0.02, 0.041, 0.06, 0.08):
        stats.tick(t)
    stats.add('inference', 0.0001)
    recent, total = stats.summary(recent=True), stats.summary(recent=False)
    assert total['ticks'] == 5 and abs(total['loop_rate_hz'] - 50.0) < 1e-6
    assert abs(total['jitter_max_ms'] - 1.0) < 1e-6 and recent['inference_p50_ms'] == 0.1
    assert percentiles([]) == {'p50': 0.0, 'p99': 0.0, 'max': 0.0}
    assert 'cpu_percent' in total
    stats.restart_totals()
    stats.tick(0.1)
    stats.tick(0.12)
    assert stats.summary(recent=False)['ticks'] == 2
    assert abs(stats.totals['period'][0] - 0.02) < 1e-9


def test_the_run_samples_stay_bounded_and_an_even_subsample_of_the_run():
    stats = LoopStats(period=0.02, max_total=1000)
    rng = np.random.default_rng(0)
    samples = list(rng.gamma(4.0, 2.5e-4, 50_000))  # a day's worth, in miniature (s)
    for value in samples:
        stats.add('inference', value)
    kept = stats.totals['inference']
    assert len(kept) < 1000 and len(stats.series['inference']) == 500
    run = stats.summary(recent=False)
    every = percentiles(samples)
    for key in ('p50', 'p99'):
        assert abs(run[f'inference_{key}_ms'] / (1e3 * every[key]) - 1.0) < 0.05, key


def test_the_sleep_loop_baseline_ticks_once_per_period_and_prints_its_jitter(capsys):
    import json

    from loco_policy.tools import sleep_loop

    stats = sleep_loop.sleep_loop(0.2, 50.0)  # deadlines 20 ms apart for 0.2 s
    assert stats.ticks == 10 and abs(sum(stats.totals['period']) - 0.18) < 0.1  # 9 periods
    assert sleep_loop.main(['--seconds', '0.1', '--rate', '100']) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line['ticks'] == 10 and 0.0 <= line['jitter_ms']['p50'] <= line['jitter_ms']['max']


@pytest.mark.ros
def test_the_bench_runs_the_sleep_loop_beside_a_real_sim_robot_and_stops_both(
    request, tmp_path, monkeypatch
):
    from types import SimpleNamespace

    from loco_policy.tools import bench
    from test.helpers.deploy_fixtures import ros_env

    for key, value in ros_env(request.node.name).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(bench, 'BARE_SETTLE', 2.0)
    figures = bench.sleep_loop_jitter(SimpleNamespace(seconds=1.0, rt_priority=0), str(tmp_path))
    assert set(figures) == {'jitter_ms', 'cpu_percent_sim_robot', 'goal_met'}, figures
    assert figures['cpu_percent_sim_robot'] > 0.0  # sim_robot stepped beside the loop
    assert 0.0 <= figures['jitter_ms']['p50'] <= figures['jitter_ms']['max']
    # a loop that fails is reported, not raised
    monkeypatch.setattr(bench, 'BARE_SECONDS', 1.0)
    monkeypatch.setattr(
        bench, 'beside_sim', lambda *a, **k: (0.0, 0.0, '')
    )  # what a crashed loop leaves: no stdout
    assert 'error' in bench.sleep_loop_jitter(
        SimpleNamespace(seconds=1.0, rt_priority=0), str(tmp_path)
    )
