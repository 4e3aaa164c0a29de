"""atomic_write: the old or the new content, never a part, with the mode open() would give."""

import os
import stat

import pytest

from loco_train.policy.atomic_io import atomic_write


def test_written_file_is_readable_by_others_under_the_usual_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / 'policy.onnx'
        atomic_write(path, lambda handle: handle.write(b'abc'))
    finally:
        os.umask(old)
    assert path.read_bytes() == b'abc'
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # a robot user can read a shipped policy


def test_a_failing_writer_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / 'state.pt'
    path.write_bytes(b'old')

    def fail(handle):
        handle.write(b'partial')
        raise RuntimeError('killed mid-write')

    with pytest.raises(RuntimeError):
        atomic_write(path, fail)
    assert path.read_bytes() == b'old' and os.listdir(tmp_path) == ['state.pt']


def test_json_lines_survive_a_torn_line_and_end_it_before_the_next_row(tmp_path):
    from loco_train.policy.atomic_io import append_json_line, read_json_lines

    path = tmp_path / 'runs.jsonl'
    assert read_json_lines(path) == []
    append_json_line(path, {'a': 1})
    append_json_line(path, {'a': 0})
    assert path.read_text() == '{"a": 1}\n{"a": 0}\n'  # no blank line between whole rows
    with open(path, 'a') as handle:
        handle.write('{"a": 2, "b"')  # killed mid-write
    append_json_line(path, {'a': 3})
    assert read_json_lines(path) == [{'a': 1}, {'a': 0}, {'a': 3}]
    assert path.read_text().count('\n') == 4
