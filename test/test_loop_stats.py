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


def test_the_sleep_loop_baseline_ticks_once_per_period_and_prints_its_jitter(capsys):
    import json

    from loco_policy.tools import sleep_loop

    stats = sleep_loop.sleep_loop(0.2, 50.0)  # deadlines 20 ms apart for 0.2 s
    assert stats.ticks == 10 and 40.0 < stats.rate(recent=False) < 60.0
    assert sleep_loop.main(['--seconds', '0.1', '--rate', '100']) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line['ticks'] == 10 and 0.0 <= line['jitter_ms']['p50'] <= line['jitter_ms']['max']
