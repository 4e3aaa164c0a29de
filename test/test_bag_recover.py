"""bag-recover: torn or stale MCAP splits rewritten as complete bags; complete ones left alone."""

import json
import os
from pathlib import Path
import shutil
import subprocess
import sys

import pytest
from rosbags.typesys import get_typestore
from ruamel.yaml import YAML

from loco_policy.tools.bag_recover import recover_split, recover_tree, scan_mcap
from loco_policy.tools.bag_writer import list_splits, SplitBagWriter, TYPESTORE
from test.test_bag_writer import mcap_of, read_positions, write_seq

REPO = Path(__file__).resolve().parent.parent


def load_info(split):
    text = (Path(split) / 'metadata.yaml').read_text()
    return YAML(typ='safe').load(text)['rosbag2_bagfile_information']


def new_writer(root, **kwargs):
    writer = SplitBagWriter(root, **{'split_size': 0, 'flush_period': 0, **kwargs})
    writer.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
    return writer


def killed_copy(tmp_path):
    """A bag root as a killed writer leaves it: split 0 closed (0..99), split 1 flushed to 129."""
    typestore = get_typestore(TYPESTORE)
    writer = new_writer(tmp_path / 'live' / 'bag', split_duration=1.0)
    write_seq(writer, typestore, 0, 130)
    writer.flush()
    write_seq(writer, typestore, 130, 150)  # not flushed: not on disk
    copy = tmp_path / 'killed' / 'bag'
    shutil.copytree(writer.root, copy)  # the files as they are on disk now
    writer.close()
    return copy


def closed_reference(tmp_path, count):
    """metadata.yaml of a split bag_0000 closed on messages 0..count-1."""
    writer = new_writer(tmp_path / 'reference' / 'bag', split_duration=0)
    write_seq(writer, get_typestore(TYPESTORE), 0, count)
    writer.close()
    return load_info(writer.closed_splits[0])


def flushed_states(tmp_path):
    """(MCAP bytes, metadata.yaml text) of one open split flushed at 40, then at 80 messages."""
    typestore = get_typestore(TYPESTORE)
    writer = new_writer(tmp_path / 'live' / 'bag', split_duration=0)
    states = []
    for last in (40, 80):
        write_seq(writer, typestore, last - 40, last)
        writer.flush()
        meta = Path(writer.path) / 'metadata.yaml'
        states.append((mcap_of(writer.path).read_bytes(), meta.read_text()))
    writer.close()
    return states


def torn_split(tmp_path, name, mcap, metadata):
    """A split bag_0000 holding the given MCAP bytes and metadata.yaml text."""
    split = tmp_path / name / 'bag' / 'bag_0000'
    split.mkdir(parents=True)
    mcap_of(split).write_bytes(mcap)
    (split / 'metadata.yaml').write_text(metadata)
    return split


def test_a_killed_writers_splits_need_no_recovery(tmp_path):
    root = killed_copy(tmp_path)
    before = {p: p.read_bytes() for p in sorted(root.rglob('*')) if p.is_file()}
    reports = recover_tree(root)
    assert [(os.path.basename(r['split']), r['action'], r['messages']) for r in reports] == [
        ('bag_0000', 'complete', 100), ('bag_0001', 'complete', 30),
    ]  # fmt: skip
    assert {p: p.read_bytes() for p in sorted(root.rglob('*')) if p.is_file()} == before
    # a recorder restarting on the root looks at its last split only (the one left open)
    for split in ('bag_0000', 'bag_0001'):
        os.unlink(root / split / 'metadata.yaml')
    reports = recover_tree(root, last_only=True)
    assert [(os.path.basename(r['split']), r['action']) for r in reports] == [
        ('bag_0001', 'recovered'),
    ]  # fmt: skip
    assert not (root / 'bag_0000' / 'metadata.yaml').exists()
    assert [r['action'] for r in recover_tree(root)] == ['recovered', 'complete']


def test_metadata_one_flush_behind_is_regenerated_as_closing_would_write_it(tmp_path):
    (first, metadata), (second, _) = flushed_states(tmp_path)
    # killed between the MCAP's fsync and the rename of metadata.yaml
    split = torn_split(tmp_path, 'stale', second, metadata)
    report = recover_split(split)
    assert report['action'] == 'recovered' and 'metadata.yaml counts' in report['reason']
    assert report['messages'] == 80 and report['torn_bytes'] == 0
    assert read_positions(split) == list(range(80))
    assert load_info(split) == closed_reference(tmp_path, 80)  # field for field
    assert recover_split(split)['action'] == 'complete'
    assert not [p for p in os.listdir(split.parent) if p.startswith('.')]  # no staging left


@pytest.mark.parametrize('fill', ['old', 'zeros', 'short'])
def test_a_flush_torn_by_the_kill_is_cut_off(tmp_path, fill):
    (first, metadata), (second, _) = flushed_states(tmp_path)
    # the second flush wrote over the first one's metadata record and summary, from `base`
    base = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    assert second[base] == 0x06 and first[base] == 0x0C  # a chunk over a metadata record
    chunk_end = base + 9 + int.from_bytes(second[base + 1 : base + 9], 'little')
    for k, cut in enumerate([base + 5, base + 9, base + 300, chunk_end, len(second) - 3]):
        # a kill inside the second flush's write: its start on disk, then the old bytes; a
        # power cut: zeros or nothing
        tail = {
            'old': first[cut:], 'zeros': bytes(max(0, len(second) - cut)), 'short': b'',
        }[fill]  # fmt: skip
        split = torn_split(tmp_path, f'torn{k}', second[:cut] + tail, metadata)
        report = recover_split(split)
        expected = list(range(80 if cut >= chunk_end else 40))  # whole chunks only
        assert report['action'] == 'recovered', report
        assert report['messages'] == len(expected), (cut, report)
        assert read_positions(split) == expected
        assert load_info(split)['message_count'] == len(expected)
        if cut < chunk_end:  # the torn chunk and all after it cut off
            assert report['torn_bytes'] == len(second[:cut] + tail) - base, report
        assert recover_split(split)['action'] == 'complete'


def test_a_corrupt_chunk_fails_its_crc_and_is_dropped(tmp_path):
    (first, metadata), (second, _) = flushed_states(tmp_path)
    base = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    flipped = bytearray(second)
    flipped[base + 500] ^= 0x01  # one bit in the second chunk's records
    split = torn_split(tmp_path, 'flipped', bytes(flipped), metadata)
    assert 'checksum' in scan_mcap(mcap_of(split)).problem
    report = recover_split(split)
    assert report['action'] == 'recovered' and report['messages'] == 40
    assert read_positions(split) == list(range(40))


def test_split_of_a_running_writer_is_skipped_and_empty_files_become_empty_bags(tmp_path):
    typestore = get_typestore(TYPESTORE)
    writer = new_writer(tmp_path / 'bag', split_duration=0)
    write_seq(writer, typestore, 0, 10)
    report = recover_split(writer.path)
    assert report['action'] == 'skipped' and 'locked' in report['reason']
    writer.close()
    assert recover_split(writer.closed_splits[0])['action'] == 'complete'
    # killed before its first flush: an empty MCAP file, no metadata.yaml
    split = tmp_path / 'empty' / 'empty_0000'
    split.mkdir(parents=True)
    mcap_of(split).write_bytes(b'')
    report = recover_split(split)
    assert report['action'] == 'recovered' and report['reason'] == 'empty file'
    assert list_splits(str(split.parent)) == [str(split)] and read_positions(split) == []
    assert recover_tree(split.parent)[0]['action'] == 'complete'


def test_bag_recover_command_prints_each_split_and_a_json_summary(tmp_path):
    root = killed_copy(tmp_path)
    os.unlink(root / 'bag_0001' / 'metadata.yaml')  # killed before its first metadata.yaml
    command = [sys.executable, '-m', 'loco_policy.tools.bag_recover']
    dry = subprocess.run(
        [*command, '--dry-run', str(root)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert dry.returncode == 0 and 'recovered 30 messages' in dry.stdout, dry.stderr
    assert not (root / 'bag_0001' / 'metadata.yaml').exists()  # a dry run changes nothing
    result = subprocess.run(
        [*command, str(root)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert 'bag_0000: complete' in lines[0], lines
    assert 'bag_0001: recovered 30 messages' in lines[1] and 'metadata.yaml missing' in lines[1]
    assert json.loads(lines[-1]) == {
        'directory': str(root), 'splits': 2, 'complete': 1, 'recovered': 1, 'messages': 130,
    }  # fmt: skip
    assert read_positions(root / 'bag_0001') == list(range(100, 130))
    missing = subprocess.run(
        [*command, str(tmp_path / 'nope')], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert missing.returncode == 2 and 'is not a directory' in missing.stderr
    # the robot PC has no torch: the command must not need it
    probe = 'import sys, loco_policy.tools.bag_recover; print("torch" in sys.modules)'
    imported = subprocess.run(
        [sys.executable, '-c', probe], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert imported.stdout.strip() == 'False', imported.stderr
