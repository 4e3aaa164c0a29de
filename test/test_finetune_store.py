"""The transition store survives SIGKILL and disk errors: real files, real processes."""

import json
import os
import random
import resource
import signal
import subprocess
import sys
import threading
import time

import numpy as np

from loco_train.finetune.ingest import empty_transitions
from loco_train.finetune.store import CHECKPOINT_NAME, INDEX_NAME, TransitionStore

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def batch(first, size):
    """size transitions whose every field is a function of its sequence number."""
    t = empty_transitions(size)
    seq = np.arange(first, first + size)
    t['seq'][:] = seq
    t['episode'][:] = seq // 100
    t['segment'][:] = seq // 50
    t['obs'][:] = (seq % 4096)[:, None] + np.arange(48) / 64.0
    t['next_obs'][:] = t['obs'] + 1.0
    t['action'][:] = (seq % 7)[:, None] * 0.25
    t['reward'][:] = seq * 0.5
    t['terminated'][:] = seq % 100 == 99
    return t


def assert_rows(loaded, count):
    """loaded holds exactly seq 0..count-1, every field as batch() wrote it."""
    expected = batch(0, count)
    assert len(loaded['seq']) == count
    for name in expected:
        assert np.array_equal(loaded[name], expected[name]), name


def test_round_trip_chunks_index_and_reopen_appends_after(tmp_path):
    store = TransitionStore(tmp_path, rows_per_chunk=64, flush_rows=1000, flush_interval=60)
    store.append(batch(0, 150))
    assert store.pending_rows == 150 and store.rows_stored == 0
    assert store.flush() and store.healthy and store.pending_rows == 0
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    assert [c['rows'] for c in index['chunks']] == [64, 64]  # the third chunk is still open
    assert_rows(store.load()[0], 150)
    store.append(batch(150, 10))
    store.flush()
    del store  # no close: the open chunk is recovered by scanning
    again = TransitionStore(tmp_path, rows_per_chunk=64)
    assert again.rows_stored == 160 and again.recovered_bytes == 0
    again.append(batch(160, 40))
    assert again.close()
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    assert [c['rows'] for c in index['chunks']] == [64, 64, 32, 40]
    loaded, checkpoint = TransitionStore(tmp_path).load()
    assert_rows(loaded, 200) and checkpoint is None


def test_append_flushes_on_size_and_on_age(tmp_path):
    store = TransitionStore(tmp_path, flush_rows=50, flush_interval=60)
    store.append(batch(0, 30))
    assert store.rows_stored == 0
    store.append(batch(30, 30))
    assert store.rows_stored == 60 and store.pending_rows == 0
    aging = TransitionStore(tmp_path / 'aging', flush_rows=10**6, flush_interval=0.2)
    aging.append(batch(0, 5))
    time.sleep(0.25)
    aging.append(batch(5, 5))
    assert aging.rows_stored == 10 and aging.pending_rows == 0


def test_checkpoint_slot_is_atomic_and_checked(tmp_path):
    store = TransitionStore(tmp_path)
    assert store.save_checkpoint(b'first')
    source = tmp_path / 'learner.pt'
    source.write_bytes(os.urandom(5000))
    assert store.save_checkpoint(str(source))
    assert TransitionStore(tmp_path).load()[1] == source.read_bytes()
    data = bytearray((tmp_path / CHECKPOINT_NAME).read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / CHECKPOINT_NAME).write_bytes(bytes(data))
    reopened = TransitionStore(tmp_path)
    assert reopened.load()[1] is None  # a damaged checkpoint is not returned, and not lost:
    assert (tmp_path / f'{CHECKPOINT_NAME}.corrupt').read_bytes() == bytes(data)
    assert 'crc32' in reopened.checkpoint_error and reopened.stats()['checkpoint_error']
    assert not (tmp_path / CHECKPOINT_NAME).exists()


def test_a_torn_last_block_is_cut_off_and_appends_continue(tmp_path):
    store = TransitionStore(tmp_path)
    store.append(batch(0, 20))
    store.flush()
    store.append(batch(20, 20))
    store.flush()
    chunk = tmp_path / 'chunk_000001.bin'
    size = chunk.stat().st_size
    with open(chunk, 'r+b') as f:  # half of the second block: a write cut by a kill
        f.truncate(size - 300)
    with open(chunk, 'ab') as f:
        f.write(b'\x00' * 7)
    again = TransitionStore(tmp_path)
    assert again.rows_stored == 20 and again.recovered_bytes > 0
    again.append(batch(20, 5))
    again.flush()
    assert_rows(TransitionStore(tmp_path).load()[0], 25)


CHILD = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from test.test_finetune_store import batch
from loco_train.finetune.store import TransitionStore

store = TransitionStore(sys.argv[1], rows_per_chunk=53, flush_rows=10**6, max_pending=10**6)
seq = store.rows_stored
print('start', seq, flush=True)
rng = np.random.default_rng(seq)
while True:
    n = int(rng.integers(1, 40))
    store.append(batch(seq, n))
    seq += n
    if store.flush():
        print('flushed', seq, flush=True)
    if rng.random() < 0.3 and store.save_checkpoint(str(seq).encode()):
        print('checkpoint', seq, flush=True)
"""


def run_and_kill(path, expected_start):
    """Start an appending child, SIGKILL it at a random moment; return its flushed rows."""
    child = subprocess.Popen(
        [sys.executable, '-c', CHILD, str(path), REPO], stdout=subprocess.PIPE, text=True
    )
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(child.stdout), daemon=True)
    first = child.stdout.readline().split()
    assert first == ['start', str(expected_start)]
    reader.start()
    time.sleep(random.uniform(0.05, 0.5))
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL
    reader.join(timeout=10)
    # a line the kill cut short (no newline) may lack its number: only whole lines count
    whole = [line for line in lines if line.endswith('\n')]
    flushed = [int(line.split()[1]) for line in whole if line.startswith('flushed')]
    return max(flushed, default=expected_start)


def test_sigkill_at_random_moments_loses_no_flushed_row_and_corrupts_nothing(tmp_path):
    random.seed(1)
    stored = 0
    for _ in range(6):
        flushed = run_and_kill(tmp_path, stored)
        store = TransitionStore(tmp_path, rows_per_chunk=53)
        loaded, checkpoint = store.load()
        stored = len(loaded['seq'])
        assert stored >= flushed > 0
        assert_rows(loaded, stored)  # every row intact, none twice, none missing
        assert checkpoint is None or int(checkpoint) <= stored
    assert stored > 100


def test_a_full_disk_keeps_rows_in_memory_until_it_has_room(tmp_path):
    store = TransitionStore(tmp_path, flush_rows=10**6, flush_interval=60)
    store.append(batch(0, 10))
    assert store.flush()
    used = (tmp_path / 'chunk_000001.bin').stat().st_size
    store.append(batch(10, 100))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:  # a file-size limit: the kernel refuses writes past it (EFBIG), as a full disk does
        resource.setrlimit(resource.RLIMIT_FSIZE, (used + 20_000, hard))
        assert store.flush() is False
        assert store.save_checkpoint(b'x' * 30_000) is False
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    assert not store.healthy and 'File too large' in store.last_error and store.errors >= 2
    assert store.pending_rows == 100 and store.rows_stored == 10
    assert os.path.getsize(tmp_path / 'chunk_000001.bin') > used  # a torn block was written
    assert store.flush() and store.healthy and store.pending_rows == 0
    loaded, checkpoint = TransitionStore(tmp_path).load()
    assert_rows(loaded, 110) and checkpoint == b'x' * 30_000


def test_an_unwritable_directory_raises_nothing_and_the_next_flush_writes(tmp_path):
    path = tmp_path / 'store'
    store = TransitionStore(path, rows_per_chunk=16, flush_rows=10**6, flush_interval=60)
    store.append(batch(0, 10))
    assert store.flush()
    away = tmp_path / 'away'
    os.rename(path, away)
    path.write_text('not a directory')  # every create and rename in the store now fails
    try:
        store.append(batch(10, 30))  # fills the open chunk, then needs a new chunk and index
        assert store.flush() is False and not store.healthy
        assert 'NotADirectoryError' in store.last_error or 'FileNotFound' in store.last_error
        assert store.save_checkpoint(b'state') is False
        store.append(batch(40, 5))
        assert store.pending_rows > 0
    finally:
        path.unlink()
        os.rename(away, path)
    assert store.flush() and store.healthy and store.pending_rows == 0
    assert store.close()
    loaded, checkpoint = TransitionStore(path).load()
    assert_rows(loaded, 45) and checkpoint == b'state'


def test_rows_beyond_max_pending_drop_oldest_first_and_are_counted(tmp_path):
    path = tmp_path / 'store'
    store = TransitionStore(path, flush_rows=10**6, flush_interval=60, max_pending=50)
    os.rmdir(path)
    path.write_text('not a directory')
    try:
        for first in range(0, 80, 20):
            store.append(batch(first, 20))
        assert store.flush() is False
    finally:
        path.unlink()
        path.mkdir()
    assert store.dropped == 30 and store.pending_rows == 50
    assert store.flush() and store.stats()['rows_stored'] == 50
    loaded, _ = TransitionStore(path).load()
    assert list(loaded['seq']) == list(range(30, 80))


def test_load_last_reads_only_the_newest_rows_across_chunks(tmp_path):
    store = TransitionStore(tmp_path, rows_per_chunk=16, flush_rows=7)
    for first in range(0, 100, 10):
        store.append(batch(first, 10))
    store.flush()
    everything = store.load()[0]
    assert_rows(everything, 100)
    for last in (0, 1, 16, 30, 99, 100, 500):
        newest = store.load(last=last)[0]
        for name in everything:
            assert np.array_equal(newest[name], everything[name][100 - min(last, 100) :]), name


def test_a_failing_disk_is_retried_once_per_interval_not_at_every_append(tmp_path):
    path = tmp_path / 'store'
    store = TransitionStore(path, rows_per_chunk=5, flush_rows=5, flush_interval=60)
    store.append(batch(0, 5))  # flushed (the size threshold); the next rows need a new chunk
    assert store.rows_stored == 5
    os.rename(path, tmp_path / 'away')
    path.write_text('not a directory')
    try:
        for first in range(5, 205, 10):
            store.append(batch(first, 10))  # each past flush_rows, but the disk is failing
        assert store.errors == 1 and not store.healthy and store.pending_rows == 200
    finally:
        path.unlink()
        os.rename(tmp_path / 'away', path)
    assert store.flush() and store.pending_rows == 0
    assert_rows(TransitionStore(path).load()[0], 205)


def test_a_read_only_store_with_an_empty_chunk_opens_and_reports(tmp_path, monkeypatch):
    import errno

    from loco_train.finetune import store as store_module

    store = TransitionStore(tmp_path, rows_per_chunk=10)
    store.append(batch(0, 10))
    store.flush()  # chunk 1 full and listed
    (tmp_path / store_module.chunk_name(2)).write_bytes(b'')  # a kill right after opening it
    real_open = os.open

    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), args[0] if args else None)

    def read_only_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            refuse(path)
        return real_open(path, flags, *args, **kwargs)

    for name in ('remove', 'truncate', 'replace'):
        monkeypatch.setattr(os, name, refuse)
    monkeypatch.setattr(os, 'open', read_only_open)
    opened = TransitionStore(tmp_path)  # raised out of the constructor before
    assert not opened.healthy and 'Read-only' in opened.last_error
    assert_rows(opened.load()[0], 10)
    monkeypatch.undo()
    assert opened.flush() and opened.healthy
