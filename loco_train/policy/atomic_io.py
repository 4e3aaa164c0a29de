"""Files that survive a kill mid-write: whole files by rename, JSON lines by append and fsync."""

import json
import os
import secrets

import torch


def atomic_write(path: str, write) -> None:
    """Call write(handle) on a temporary file beside path, fsync, then rename it onto path.

    path holds either the old or the new content, never a part, even if the process is killed.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # Same directory, so os.replace is a rename on one file system (atomic on POSIX).
    # a fresh name, created exclusively with the mode open() gives (0666 less the umask)
    tmp = os.path.join(directory, f'.{os.path.basename(path)}.{secrets.token_hex(8)}.tmp')
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, 'wb') as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    # Persist the rename itself (the directory entry); best effort where directories can't sync.
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def atomic_torch_save(obj, path: str) -> None:
    """torch.save obj to path so that path holds either the old or the new file, never a part."""
    atomic_write(path, lambda handle: torch.save(obj, handle))


def torch_load(path: str, map_location=None):
    """Load a file written by atomic_torch_save (tensors and plain containers only)."""
    return torch.load(os.fspath(path), map_location=map_location, weights_only=True)


def append_json_line(path: str, row: dict) -> None:
    """Append row to a JSON-lines file and fsync it: a kill loses at most the line being written.

    A torn last line (a kill mid-write) is ended first, so the new row starts on a line of its own.
    """
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'a+b') as handle:
        torn = False
        if handle.seek(0, os.SEEK_END) > 0:
            handle.seek(-1, os.SEEK_END)
            torn = handle.read(1) != b'\n'
        handle.write((b'\n' if torn else b'') + json.dumps(row).encode() + b'\n')
        handle.flush()
        os.fsync(handle.fileno())


def read_json_lines(path: str) -> list[dict]:
    """The rows of a JSON-lines file (none if it is absent); blank and torn lines are skipped."""
    rows = []
    if os.path.exists(path):
        with open(path) as handle:
            for line in handle:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict):
                    rows.append(row)
    return rows
