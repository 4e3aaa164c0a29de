import numpy as np

from loco_policy.tools import demo_metrics


def test_segment_errors_skip_the_settling_time():
    samples = [(t, 'fwd', np.array([0.5, 0, 0]), np.array([0.0 if t < 1 else 0.4, 0, 0]))
               for t in np.arange(0, 3, 0.05)]  # fmt: skip
    (row,) = demo_metrics.segment_errors(samples, ['fwd', 'absent'])
    assert row['segment'] == 'fwd' and abs(row['rms_error_xy'] - 0.1) < 1e-6
    assert row['rms_error_wz'] == 0.0


def test_falls_loop_check_and_table():
    assert demo_metrics.falls([0.5, 0.5], []) == 0
    assert demo_metrics.falls([0.5, 0.2], []) == 1
    assert demo_metrics.falls([0.5], [{'to': 'DAMP', 'reason': 'base tilt roll 1.2 rad'}]) == 1
    assert demo_metrics.falls([0.5], [{'to': 'DAMP', 'reason': 'watchdog: stale /imu'}]) == 0
    history = [
        {'t': 1.0, 'to': 'DAMP', 'reason': 'watchdog: stale /imu'},
        {'t': 2.0, 'to': 'PASSIVE', 'reason': 'reset'},
        {'t': 3.0, 'to': 'DAMP', 'reason': 'estop requested'},
        {'t': 4.0, 'to': 'DAMP', 'reason': 'policy produced non-finite actions'},
    ]
    assert demo_metrics.faults(history) == [history[0]['reason'], history[3]['reason']]
    assert demo_metrics.faults(history, since=1.5) == [history[3]['reason']]
    assert demo_metrics.loop_ok({'loop_rate_hz': 49.9}, 50.0)
    assert not demo_metrics.loop_ok({'loop_rate_hz': 40.0}, 50.0)
    text = demo_metrics.table([{'a': 1, 'b': 'xyz'}], ['a', 'b'])
    assert text.splitlines()[0].split() == ['a', 'b'] and 'xyz' in text


def test_tracking_verdict():
    def row(cmd, meas):
        return {'command': cmd, 'mean_measured': meas}

    assert demo_metrics.tracks([row([0, 0, 0], [0.1, 0, 0])]) is None
    assert demo_metrics.tracks([row([0.6, 0, 0], [0.5, 0.1, 0]), row([0, 0, -0.6], [0, 0, -0.4])])
    assert not demo_metrics.tracks([row([0.6, 0, 0], [0.0, 0, 0])])
    assert not demo_metrics.tracks([row([0, 0.4, 0], [0, -0.4, 0])])
