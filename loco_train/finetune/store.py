"""A crash-safe transition store: append-only chunk files, an atomic index, a checkpoint slot.

Layout of the store directory:

    chunk_000001.bin ...   blocks: header (magic, rows, crc32 of the payload) + rows records
    index.json             the complete chunks and their row counts (replaced atomically)
    checkpoint.bin         the learner's last checkpoint: header (magic, length, crc32) + bytes

Each flush() appends one block per chunk it touches and fsyncs the file, so after a kill at any
moment every flushed row is on disk; a torn block at a chunk's end (a kill or a full disk
mid-write) fails its length or CRC check and is cut off when the store is opened again. The
chunk being written is not in the index; opening the store scans it (and any chunk a kill left
out of the index), truncates it to its last whole block, lists it, and appends to a new chunk.

A disk error (full, read-only, missing directory) never raises out of append, flush or
save_checkpoint: the store records it (healthy, last_error, errors), keeps the rows and the
checkpoint in memory, and the next flush writes them once the disk accepts writes again; while
it fails, appends retry it once per flush_interval. A checkpoint that fails its CRC is set aside
as checkpoint.bin.corrupt and reported, never silently taken for a missing one.
"""

import functools
import json
import os
import struct
import threading
import time
import zlib

import numpy as np

from loco_policy.tools.durable import write_all
from loco_train.finetune.ingest import TRANSITION_DTYPE

FORMAT = 1
"""Version of the directory layout (index.json 'format')."""

BLOCK = struct.Struct('<4sII')
"""Block header: magic, rows, crc32 of the payload (little-endian)."""
BLOCK_MAGIC = b'LTB1'

CHECKPOINT = struct.Struct('<4sQI')
"""Checkpoint header: magic, payload length in bytes, crc32 of the payload."""
CHECKPOINT_MAGIC = b'LCK1'

INDEX_NAME = 'index.json'
CHECKPOINT_NAME = 'checkpoint.bin'


def chunk_name(number):
    """File name of chunk number (1, 2, ...)."""
    return f'chunk_{number:06d}.bin'


def chunk_number(name):
    """Chunk number of a chunk file name, or None for any other name."""
    stem, _, ext = name.partition('.')
    if ext != 'bin' or not stem.startswith('chunk_') or not stem[6:].isdigit():
        return None
    return int(stem[6:])


def fsync_dir(path):
    """Make a directory's entries (created, renamed files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path, data):
    """Write bytes to path atomically: temp file, fsync, rename, fsync the directory."""
    tmp = f'{path}.tmp'
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def scan_chunk(data, dtype):
    """Whole blocks at the start of a chunk's bytes: (list of record arrays, valid length)."""
    blocks, offset = [], 0
    while offset + BLOCK.size <= len(data):
        magic, rows, crc = BLOCK.unpack_from(data, offset)
        end = offset + BLOCK.size + rows * dtype.itemsize
        if magic != BLOCK_MAGIC or rows == 0 or end > len(data):
            break
        payload = data[offset + BLOCK.size : end]
        if zlib.crc32(payload) != crc:
            break
        blocks.append(np.frombuffer(payload, dtype=dtype))
        offset = end
    return blocks, offset


class TransitionStore:
    """An append-only store of transitions (TRANSITION_DTYPE records) in a directory."""

    def __init__(
        self, path, rows_per_chunk=50_000, flush_rows=250, flush_interval=1.0, max_pending=200_000
    ):
        """Open (recovering) or create the store at path; see the module docstring.

        append() flushes once flush_rows rows wait or flush_interval s passed since the last
        flush; the node's timer calls flush() too. Thread-safe (one lock).
        """
        if min(rows_per_chunk, flush_rows, max_pending) < 1 or not flush_interval > 0.0:
            raise ValueError('rows_per_chunk, flush_rows, max_pending >= 1, flush_interval > 0')
        self.path = os.path.abspath(path)
        self.dtype = TRANSITION_DTYPE
        self.rows_per_chunk, self.flush_rows, self.max_pending = (
            rows_per_chunk, flush_rows, max_pending,
        )  # fmt: skip
        self.flush_interval = flush_interval  # s
        self._last_flush = time.monotonic()
        self._lock = threading.RLock()
        self.healthy = True  # False from a disk error until a flush succeeds
        self.last_error = ''  # the last disk error, kept after recovery for the log
        self.errors = 0  # disk errors so far
        self.dropped = 0  # rows dropped because max_pending rows waited for the disk
        self.recovered_bytes = 0  # torn bytes cut off chunk ends when opening
        self.checkpoint_error = ''  # why a stored checkpoint could not be used (kept aside)
        self._pending = []  # record arrays not yet on disk, oldest first
        self._pending_rows = 0
        self._checkpoint = None  # checkpoint bytes not yet on disk
        self._chunks = []  # complete chunks: {'name', 'rows', 'bytes'}
        self._open = None  # the chunk being appended: {'name', 'rows', 'bytes'} (bytes synced)
        self._fd = None
        self._index_dirty = False
        os.makedirs(self.path, exist_ok=True)
        self._recover()

    # ---- opening ------------------------------------------------------------------------

    def _file(self, name):
        return os.path.join(self.path, name)

    def _recover(self):
        """Read the index, cut torn tails off unlisted chunks and list them; write the index."""
        listed = {}
        try:
            with open(self._file(INDEX_NAME)) as f:
                index = json.load(f)
            if index.get('format') != FORMAT or index.get('dtype') != str(self.dtype.descr):
                raise ValueError(f'{self.path}: index format or record layout does not match')
            listed = {chunk['name']: chunk for chunk in index['chunks']}
        except FileNotFoundError:
            pass
        except json.JSONDecodeError:  # not written by atomic_write: rebuild from the chunks
            self._index_dirty = True
        numbers = sorted(n for n in map(chunk_number, os.listdir(self.path)) if n is not None)
        self._next = (numbers[-1] + 1) if numbers else 1
        for number in numbers:
            name = chunk_name(number)
            if name in listed:
                self._chunks.append(listed[name])
                continue
            with open(self._file(name), 'rb') as f:
                data = f.read()
            blocks, valid = scan_chunk(data, self.dtype)
            self.recovered_bytes += len(data) - valid
            if valid < len(data):
                try:  # a torn tail left in place is harmless: reads stop at 'bytes'
                    os.truncate(self._file(name), valid)
                except OSError as error:
                    self.last_error = f'{type(error).__name__}: {error}'
            if blocks:
                rows = sum(len(b) for b in blocks)
                self._chunks.append({'name': name, 'rows': rows, 'bytes': valid})
            else:  # an empty chunk is left in place on a read-only disk: it lists nothing
                self._try(functools.partial(os.remove, self._file(name)))
            self._index_dirty = True
        if self._index_dirty:
            self._try(self._write_index)

    def _write_index(self):
        """Replace index.json atomically with the complete chunks."""
        index = {'format': FORMAT, 'dtype': str(self.dtype.descr), 'chunks': self._chunks}
        atomic_write(self._file(INDEX_NAME), json.dumps(index, indent=1).encode())
        self._index_dirty = False

    # ---- writing ------------------------------------------------------------------------

    @property
    def rows_stored(self):
        """Rows on disk (complete chunks and the synced part of the open one)."""
        return sum(c['rows'] for c in self._chunks) + (self._open['rows'] if self._open else 0)

    @property
    def pending_rows(self):
        """Rows appended but not yet on disk."""
        return self._pending_rows

    def append(self, transitions):
        """Queue transitions (drain()'s dict or a TRANSITION_DTYPE array); flush on size or age."""
        table = self._records(transitions)
        with self._lock:
            self._queue(table)
            due = time.monotonic() - self._last_flush >= self.flush_interval
            # a failing disk is retried once per flush_interval, not at every message
            full = self._pending_rows >= self.flush_rows and self.healthy
            if self._pending_rows and (full or due):
                self.flush()

    def _queue(self, table):
        """Add records to the pending ones, dropping the oldest beyond max_pending."""
        if len(table):
            self._pending.append(table)
            self._pending_rows += len(table)
        excess = self._pending_rows - self.max_pending
        while excess > 0:  # the disk has been failing for long: keep the newest rows
            head = self._pending[0]
            cut = min(excess, len(head))
            self._pending[0] = head[cut:]
            if not len(self._pending[0]):
                self._pending.pop(0)
            self._pending_rows -= cut
            self.dropped += cut
            excess -= cut

    def _records(self, transitions):
        """A TRANSITION_DTYPE array of the input; ValueError naming a missing or bad field."""
        if isinstance(transitions, np.ndarray) and transitions.dtype == self.dtype:
            return transitions.copy()
        names = self.dtype.names
        missing = [name for name in names if name not in transitions]
        if missing:
            raise ValueError(f'transitions lack the fields {missing}')
        size = len(transitions['obs'])
        table = np.zeros(size, dtype=self.dtype)
        for name in names:
            value = np.asarray(transitions[name])
            if value.shape != table[name].shape:
                raise ValueError(f'transition field {name} has shape {value.shape}')
            table[name] = value
        return table

    def flush(self):
        """Write the pending rows, index and checkpoint, fsynced; True when all are on disk."""
        with self._lock:
            self._last_flush = time.monotonic()
            done = True
            while done and self._pending_rows:
                done = self._try(self._write_block)
            if self._index_dirty:
                done = self._try(self._write_index) and done
            if self._checkpoint is not None:
                done = self._try(self._write_checkpoint) and done
            self.healthy = done
            return done

    def _try(self, write):
        """Run a disk write; on an OSError record it, drop the file handle, return False."""
        try:
            write()
            return True
        except OSError as error:
            self.healthy = False
            self.errors += 1
            self.last_error = f'{type(error).__name__}: {error}'
            if self._fd is not None:
                try:
                    os.close(self._fd)
                except OSError:
                    pass
                self._fd = None
            return False

    def _open_chunk(self):
        """Open the chunk being appended (a new one, or the one a failed write left torn)."""
        if self._open is None:
            self._open = {'name': chunk_name(self._next), 'rows': 0, 'bytes': 0}
            self._next += 1
        fd = os.open(self._file(self._open['name']), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, self._open['bytes'])  # cut what a failed write left behind
            os.fsync(fd)
            fsync_dir(self.path)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd

    def _write_block(self):
        """Append one block of the oldest pending rows (up to the chunk's room) and fsync."""
        if self._fd is None:
            self._open_chunk()
        room = self.rows_per_chunk - self._open['rows']
        count, taken = 0, 0  # the oldest pending arrays that fill the room, no more
        while taken < len(self._pending) and count < room:
            count += len(self._pending[taken])
            taken += 1
        head = self._pending[:taken]
        table = np.concatenate(head) if taken > 1 else head[0]
        block, rest = table[:room], table[room:]
        payload = block.tobytes()
        header = BLOCK.pack(BLOCK_MAGIC, len(block), zlib.crc32(payload))
        write_all(self._fd, header + payload, self._open['bytes'])
        os.fsync(self._fd)
        self._open['rows'] += len(block)
        self._open['bytes'] += len(header) + len(payload)
        self._pending = ([rest] if len(rest) else []) + self._pending[taken:]
        self._pending_rows -= len(block)
        if self._open['rows'] >= self.rows_per_chunk:
            self._close_chunk()

    def _close_chunk(self):
        """List the full open chunk in the index; the next block starts a new chunk."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        # cleared before it is listed: a KeyboardInterrupt between the two leaves the chunk
        # unlisted (the next open recovers and lists it), never listed twice
        full, self._open = self._open, None
        self._chunks.append(full)
        self._index_dirty = True
        self._write_index()

    # ---- checkpoint ---------------------------------------------------------------------

    def save_checkpoint(self, data):
        """Store the learner's checkpoint (bytes or a file path) atomically; True when on disk.

        On a disk error the bytes wait in memory and the next flush writes them.
        """
        if isinstance(data, (str, os.PathLike)):
            with open(data, 'rb') as f:
                data = f.read()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f'checkpoint must be bytes or a file path, got {type(data).__name__}')
        with self._lock:
            self._checkpoint = bytes(data)
            return self._try(self._write_checkpoint)

    def _write_checkpoint(self):
        payload = self._checkpoint
        header = CHECKPOINT.pack(CHECKPOINT_MAGIC, len(payload), zlib.crc32(payload))
        atomic_write(self._file(CHECKPOINT_NAME), header + payload)
        self._checkpoint = None

    def _read_checkpoint(self):
        """The stored checkpoint bytes, or None when there is none.

        A checkpoint that fails its check (only a damaged disk makes one: it is written
        atomically) is renamed checkpoint.bin.corrupt, kept for inspection, and reported in
        checkpoint_error and last_error; the caller then starts afresh.
        """
        path = self._file(CHECKPOINT_NAME)
        try:
            with open(path, 'rb') as f:
                data = f.read()
        except FileNotFoundError:
            return None
        fault = ''
        if len(data) < CHECKPOINT.size:
            fault = f'{len(data)} bytes, shorter than its header'
        else:
            magic, length, crc = CHECKPOINT.unpack_from(data)
            payload = data[CHECKPOINT.size :]
            if magic != CHECKPOINT_MAGIC:
                fault = f'magic {magic!r} is not {CHECKPOINT_MAGIC!r}'
            elif len(payload) != length:
                fault = f'{len(payload)} payload bytes, header says {length}'
            elif zlib.crc32(payload) != crc:
                fault = 'crc32 mismatch'
        if not fault:
            return payload
        kept = f'{path}.corrupt'
        if not self._try(lambda: os.replace(path, kept)):
            kept = path
        self.checkpoint_error = f'{CHECKPOINT_NAME} is damaged ({fault}); kept as {kept}'
        self.last_error = self.checkpoint_error
        return None

    # ---- reading ------------------------------------------------------------------------

    def load(self, last=None):
        """Return (the newest `last` transitions on disk, checkpoint bytes or None).

        Transitions: a dict of (B, ...) arrays, oldest first, all of them when last is None.
        Chunks are read newest first until `last` rows are in, so a long store costs no more
        than the rows kept.
        """
        with self._lock:
            chunks = [dict(c) for c in self._chunks + ([self._open] if self._open else [])]
            checkpoint = self._read_checkpoint()
        tables, rows = [], 0
        for chunk in reversed(chunks):
            if last is not None and rows >= last:
                break
            with open(self._file(chunk['name']), 'rb') as f:
                data = f.read(chunk['bytes'])
            blocks, _ = scan_chunk(data, self.dtype)
            if sum(len(b) for b in blocks) != chunk['rows']:
                raise ValueError(f'{chunk["name"]}: fewer whole blocks than its listed rows')
            tables[:0] = blocks
            rows += chunk['rows']
        table = np.concatenate(tables) if tables else np.zeros(0, dtype=self.dtype)
        if last is not None:
            table = table[max(len(table) - int(last), 0) :]
        return {name: table[name].copy() for name in self.dtype.names}, checkpoint

    def stats(self):
        """Health and sizes, for /diagnostics."""
        return {
            'healthy': self.healthy,
            'last_error': self.last_error,
            'errors': self.errors,
            'rows_stored': self.rows_stored,
            'pending_rows': self.pending_rows,
            'dropped': self.dropped,
            'checkpoint_error': self.checkpoint_error,
            'chunks': len(self._chunks) + (self._open is not None),
        }

    def close(self):
        """Flush, list the open chunk as complete, release the file; True when all is on disk."""
        with self._lock:
            done = self.flush()
            if done and self._open is not None and self._open['rows']:
                done = self._try(self._close_chunk)
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            return done
