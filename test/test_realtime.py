"""CPU placement and wake-up latency knobs of the control processes (loco_policy.realtime)."""

import os

import pytest

from loco_policy import realtime


@pytest.mark.parametrize(
    'text, cpus',
    [('', []), ('1', [1]), ('0,2', [0, 2]), ('2-4', [2, 3, 4]), (' 3 , 1-2 ', [1, 2, 3])],
)
def test_cpu_lists_parse(text, cpus):
    assert realtime.parse_cpus(text) == cpus


@pytest.mark.parametrize('text', ['x', '1-', '-1', '1;2', '0,a', '3-1'])
def test_malformed_cpu_lists_are_refused(text):
    with pytest.raises(ValueError, match='cpu_affinity'):
        realtime.parse_cpus(text)


def test_pinning_moves_every_thread_and_refuses_foreign_cpus():
    allowed = sorted(os.sched_getaffinity(0))
    try:
        message = realtime.set_cpu_affinity(str(allowed[-1]))
        assert message == f'pinned to CPUs [{allowed[-1]}]'
        for tid in os.listdir('/proc/self/task'):
            assert os.sched_getaffinity(int(tid)) == {allowed[-1]}
        with pytest.raises(ValueError, match='not within the allowed CPUs'):
            realtime.set_cpu_affinity(str(allowed[-1] + 1000))
    finally:
        for tid in os.listdir('/proc/self/task'):
            os.sched_setaffinity(int(tid), allowed)
    assert realtime.set_cpu_affinity('') == 'CPU affinity unchanged'


def test_wake_up_latency_request_says_what_happened():
    assert realtime.hold_cpu_dma_latency(-1) == 'CPU wake-up latency unchanged'
    message = realtime.hold_cpu_dma_latency(1000)  # 1 ms: harmless where it is granted
    assert message == 'CPU wake-up latency held under 1000 us' or 'refused' in message
