"""The record of rolled-back policy files, kept beside them so that it outlives policy_node.

A policy update's signature covers the file's bytes, not the version announced with them, so a
recorded announcement sent again would bring back a file the robot rolled back. policy_node
refuses such a file while it runs (hot_swap.PolicySwitch.rolled_back); this record makes the
refusal survive a restart. Each rollback appends one JSON line {sha256, version, reason, file,
time} to `rolled_back.jsonl` in the rolled-back file's directory (the policy_dir the sidecar
exports to), and a candidate whose sha256 is listed in its own directory's record is refused.
"""

import json
import os
import time

LOG_NAME = 'rolled_back.jsonl'
"""The record's file name, in the directory of the files it lists."""

MAX_LOG_BYTES = 4 * 1024 * 1024
"""Largest record read (about 20,000 rollbacks); beyond it the newest part is read."""


def log_path(policy_path: str) -> str:
    """The record that lists rollbacks of files in policy_path's directory."""
    return os.path.join(os.path.dirname(os.path.abspath(policy_path)), LOG_NAME)


def record(policy_path: str, sha256: str, version: int, reason: str) -> str:
    """Append a rollback of the file at policy_path; returns the record's path.

    One write of one line with O_APPEND, then fsync: a crash leaves at most a torn last line,
    which find() skips. Raises OSError where the directory is not writable.
    """
    path = log_path(policy_path)
    line = json.dumps({
        'sha256': sha256.lower(),
        'version': int(version),
        'reason': str(reason),
        'file': os.path.basename(policy_path),
        'time': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
    }) + '\n'  # fmt: skip
    data = line.encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        if written != len(data):  # a full disk: the torn line is skipped by find()
            raise OSError(f'{written} of {len(data)} bytes written')
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def find(policy_path: str, sha256: str) -> dict | None:
    """The newest record entry for sha256 in policy_path's directory, or None.

    A missing record lists nothing; lines that do not parse (a torn last line) are skipped. A
    record that exists and cannot be read raises OSError: the caller refuses the file.
    """
    sha256 = sha256.lower()
    try:
        with open(log_path(policy_path), 'rb') as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - MAX_LOG_BYTES))
            text = handle.read().decode(errors='replace')
    except FileNotFoundError:
        return None
    found = None
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):  # torn, or nested beyond the parser's depth
            continue
        if isinstance(entry, dict) and entry.get('sha256') == sha256:
            found = entry
    return found
