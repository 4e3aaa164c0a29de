"""CPU placement and wake-up latency knobs of the control processes (control.realtime)."""

import os

import pytest

from loco_policy.control import realtime


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


def _threads():
    """Thread ids of this process (one may end while a test walks them)."""
    return [int(t) for t in os.listdir('/proc/self/task')]


def test_pinning_moves_every_thread_and_refuses_foreign_cpus():
    allowed = sorted(os.sched_getaffinity(0))
    try:
        message = realtime.set_cpu_affinity(str(allowed[-1]))
        assert message == f'pinned to CPUs [{allowed[-1]}]'
        for tid in _threads():
            try:
                assert os.sched_getaffinity(tid) == {allowed[-1]}
            except ProcessLookupError:  # ended meanwhile
                pass
        with pytest.raises(ValueError, match='not within the allowed CPUs'):
            realtime.set_cpu_affinity(str(allowed[-1] + 1000))
    finally:
        for tid in _threads():
            try:
                os.sched_setaffinity(tid, allowed)
            except ProcessLookupError:
                pass
    assert realtime.set_cpu_affinity('') == 'CPU affinity unchanged'


def test_wake_up_latency_request_is_written_held_and_released(tmp_path):
    device = tmp_path / 'cpu_dma_latency'  # a plain file stands in for the PM QoS device
    device.write_bytes(b'')
    assert realtime.hold_cpu_dma_latency(-1, device) == 'CPU wake-up latency unchanged'
    try:
        message = realtime.hold_cpu_dma_latency(1000, device)
        assert message == 'CPU wake-up latency held under 1000 us'
        assert device.read_bytes() == (1000).to_bytes(4, 'little')
        assert realtime._DMA_LATENCY_FD is not None  # held open: the request lasts while open
        with pytest.raises(ValueError, match='cpu_dma_latency'):
            realtime.hold_cpu_dma_latency(2**31, device)
        missing = realtime.hold_cpu_dma_latency(0, tmp_path / 'absent' / 'x')
        assert 'refused' in missing and realtime._DMA_LATENCY_FD is not None  # earlier one kept
    finally:
        realtime.release_cpu_dma_latency()
    assert realtime._DMA_LATENCY_FD is None
