"""bag-recover: make every MCAP split under a directory a complete rosbag2 bag again (ROS-free).

A split left by a killed writer (see loco_policy.tools.bag_writer) is complete as it is, as if
closed at its last flush, unless the kill landed inside a flush's write (a torn tail) or
between the MCAP's fsync and the rename of metadata.yaml (counts one flush behind). Recovery
scans the MCAP file record by record, checks each chunk (its length, its CRC-32 when written,
the records inside), keeps every intact record up to the first incomplete or invalid one (the
tail is cut there), and rewrites the split in place through rosbags' Writer: a complete MCAP
with summary and a metadata.yaml with the true message counts, in the form rosbags writes for
a closed split (what ``ros2 bag info`` reads). Splits whose records, summary and metadata.yaml
agree are left untouched; splits whose MCAP file is locked by a running writer are skipped.

Usage: ``loco-bag-recover DIR`` or ``loco-train bag-recover DIR`` (DIR: a bag root holding
split directories, or one split); one line per split, then one JSON object as the last line.
"""

import argparse
import fcntl
import json
import os
from pathlib import Path
import shutil
import struct
import sys

from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.rosbag2.metadata import parse_qos
from rosbags.rosbag2.storage_mcap import decompress, McapReader
from rosbags.typesys import get_typestore
from ruamel.yaml import YAML

from loco_policy.tools.bag_writer import BAG_VERSION, fsync_path, MAGIC, TYPESTORE

RECORD_NAMES = {
    0x01: 'header', 0x02: 'footer', 0x03: 'schema', 0x04: 'channel', 0x05: 'message',
    0x06: 'chunk', 0x07: 'message index', 0x08: 'chunk index', 0x09: 'attachment',
    0x0A: 'attachment index', 0x0B: 'statistics', 0x0C: 'metadata', 0x0D: 'metadata index',
    0x0E: 'summary offset', 0x0F: 'data end',
}  # fmt: skip
"""MCAP record opcodes; any other opcode (a zero-filled or garbled tail) ends the scan."""


class McapScan:
    """What an MCAP file holds, read record by record up to the first torn or invalid record."""

    def __init__(self, size):
        """Empty scan of a file of `size` bytes."""
        self.size = size
        self.schemas = {}
        """Schema id -> (name 'pkg/msg/Type', encoding, definition text)."""
        self.channels = {}
        """Channel id -> (schema id, topic, message encoding, metadata {key: value})."""
        self.messages = []
        """(channel id, log time ns, serialized data) in file order."""
        self.end = 0
        """Offset just after the last intact record before the footer (bytes)."""
        self.footer = False
        """Whether the scan reached a footer record."""
        self.summary = False
        """Whether that footer points at a summary section (the file was closed)."""
        self.problem = ''
        """Why the scan stopped before a footer ('' when it reached one)."""


def _u16(view, at):
    return struct.unpack_from('<H', view, at)[0], at + 2


def _u32(view, at):
    return struct.unpack_from('<I', view, at)[0], at + 4


def _u64(view, at):
    return struct.unpack_from('<Q', view, at)[0], at + 8


def _bytes(view, at):
    """A uint32-length-prefixed byte string; raises ValueError past the end."""
    length, at = _u32(view, at)
    if at + length > len(view):
        raise ValueError('string runs past its record')
    return view[at : at + length], at + length


def _string(view, at):
    data, at = _bytes(view, at)
    return bytes(data).decode(), at


def _records(view, start, end):
    """Yield (opcode, record start, body) of the records in view[start:end]; stop at a torn one.

    Raises ValueError for a record that does not fit or an unknown opcode.
    """
    at = start
    while at < end:
        if at + 9 > end:
            raise ValueError(f'truncated record header at offset {at}')
        op = view[at]
        (length,) = struct.unpack_from('<Q', view, at + 1)
        if op not in RECORD_NAMES:
            raise ValueError(f'invalid record opcode {op:#04x} at offset {at}')
        if at + 9 + length > end:
            raise ValueError(f'truncated {RECORD_NAMES[op]} record at offset {at}')
        body = view[at + 9 : at + 9 + length]
        if op == 0x06 and not any(body[:64]) and not any(body):  # a power cut's zero fill
            raise ValueError(f'zero-filled chunk record at offset {at}')
        yield op, at, body
        at += 9 + length


def _parse(op, body, scan, schemas, channels, messages):
    """Add one schema, channel or message record to the given dicts and list (others skipped)."""
    if op == 0x03:
        key, at = _u16(body, 0)
        name, at = _string(body, at)
        encoding, at = _string(body, at)
        data, at = _bytes(body, at)
        schemas[key] = (name, encoding, bytes(data).decode())
    elif op == 0x04:
        key, at = _u16(body, 0)
        schema_id, at = _u16(body, at)
        topic, at = _string(body, at)
        encoding, at = _string(body, at)
        table, at = _bytes(body, at)
        metadata, inner = {}, 0
        while inner < len(table):
            name, inner = _string(table, inner)
            metadata[name], inner = _string(table, inner)
        channels[key] = (schema_id, topic, encoding, metadata)
    elif op == 0x05:
        if len(body) < 22:
            raise ValueError('message record too short')
        channel_id, _ = _u16(body, 0)
        if channel_id not in channels and channel_id not in scan.channels:
            raise ValueError(f'message on undeclared channel {channel_id}')
        log_time, _ = _u64(body, 6)  # after the channel id (2) and sequence (4)
        messages.append((channel_id, log_time, body[22:]))


def _chunk(body, scan):
    """Parse a chunk record whole into scan, or raise ValueError and leave scan as it was."""
    _, at = _u64(body, 0)  # message start time
    _, at = _u64(body, at)  # message end time
    uncompressed_size, at = _u64(body, at)
    crc, at = _u32(body, at)
    compression, at = _string(body, at)
    compressed_size, at = _u64(body, at)
    if at + compressed_size > len(body):
        raise ValueError('chunk data runs past its record')
    try:
        raw = decompress(
            bytes(body[at : at + compressed_size]), compression, uncompressed_size, crc
        )
    except Exception as error:  # a torn or garbled chunk, whatever the codec says
        raise ValueError(f'chunk does not decode: {error}') from None
    view = memoryview(raw)
    schemas, channels, messages = {}, {}, []
    for op, _, inner in _records(view, 0, len(view)):
        _parse(op, inner, scan, schemas, channels, messages)
    scan.schemas.update(schemas)
    scan.channels.update(channels)
    scan.messages.extend(messages)


def scan_mcap(path):
    """Read an MCAP file record by record into a McapScan, stopping at the first bad record."""
    data = Path(path).read_bytes()
    scan = McapScan(len(data))
    view = memoryview(data)
    if data[:8] != MAGIC:
        scan.problem = 'no MCAP magic' if data else 'empty file'
        return scan
    scan.end = 8
    try:
        for op, start, body in _records(view, 8, len(data)):
            if op == 0x02:
                scan.footer = True
                scan.summary = _u64(body, 0)[0] != 0
                return scan
            if op == 0x06:
                try:
                    _chunk(body, scan)
                except (ValueError, struct.error, UnicodeDecodeError) as error:
                    raise ValueError(f'bad chunk at offset {start} ({error})') from None
            else:
                _parse(op, body, scan, scan.schemas, scan.channels, scan.messages)
            scan.end = start + 9 + len(body)
    except (ValueError, struct.error, UnicodeDecodeError) as error:
        scan.problem = str(error)
        return scan
    scan.problem = 'no footer'
    return scan


def _load_metadata(split):
    """The rosbag2_bagfile_information mapping of split/metadata.yaml, or None if unreadable."""
    try:
        text = (Path(split) / 'metadata.yaml').read_text()
        info = YAML(typ='safe').load(text)['rosbag2_bagfile_information']
        return info if isinstance(info, dict) else None
    except Exception:  # missing, torn or not a bag's metadata: recovery regenerates it
        return None


def scan_counts(scan):
    """{topic: message count} of what a scan found (topics with messages only)."""
    counts = {}
    for channel_id, _, _ in scan.messages:
        topic = scan.channels[channel_id][1]
        counts[topic] = counts.get(topic, 0) + 1
    return counts


def _incomplete(split, mcap, scan):
    """Return '' when the split is a closed bag that agrees with its scan, else why not.

    Closed: every record intact up to a footer that points at a summary; the summary's
    statistics and metadata.yaml's counts equal the messages the scan found.
    """
    if scan.problem:
        return scan.problem
    if not scan.summary:
        return 'no summary (left open)'
    info = _load_metadata(split)
    if info is None:
        return 'metadata.yaml missing or unreadable'
    found = scan_counts(scan)
    try:
        storage = McapReader(Path(mcap))
        storage.open()
        try:
            indexed = {c.topic: c.msgcount for c in storage.connections if c.msgcount}
        finally:
            storage.close()
        topics = info['topics_with_message_count']
        listed = {t['topic_metadata']['name']: t['message_count'] for t in topics}
        with Reader(split):
            pass  # the directory as rosbags reads it: file list, storage, version
    except Exception as error:
        return f'unreadable: {error}'
    if indexed != found:
        return f'summary counts {indexed} differ from the records {found}'
    if {t: n for t, n in listed.items() if n} != found:
        return f'metadata.yaml counts {listed} differ from the records {found}'
    if info.get('message_count') != len(scan.messages):
        return f'metadata.yaml message_count {info.get("message_count")} != {len(scan.messages)}'
    return ''


def _rewrite(split, mcap, scan, info, typestore):
    """Write scan's content as a complete bag beside split, then move it into split's place."""
    split = Path(split)
    staging = split.parent / f'.{split.name}.recovering'
    shutil.rmtree(staging, ignore_errors=True)
    writer = Writer(staging / split.name, version=BAG_VERSION, storage_plugin=StoragePlugin.MCAP)
    writer.open()
    try:
        listed = info.get('topics_with_message_count', []) if info else []
        hashes = {
            t['topic_metadata']['name']: t['topic_metadata'].get('type_description_hash', '')
            for t in listed
        }
        for key, value in ((info or {}).get('custom_data') or {}).items():
            writer.set_custom_data(str(key), str(value))
        connections = {}
        for cid, (schema_id, topic, encoding, metadata) in sorted(scan.channels.items()):
            if schema_id not in scan.schemas:
                continue  # untyped channel: its messages cannot be written to a rosbag2 bag
            msgtype, _, msgdef = scan.schemas[schema_id]
            rihs01 = hashes.get(topic) or _type_hash(typestore, msgtype)
            connections[cid] = writer.add_connection(
                topic, msgtype, msgdef=msgdef, rihs01=rihs01, serialization_format=encoding,
                offered_qos_profiles=parse_qos(metadata.get('offered_qos_profiles', '')),
            )  # fmt: skip
        present = {c.topic for c in connections.values()}
        for entry in listed:  # declared topics whose channel never reached the disk
            meta = entry['topic_metadata']
            if meta['name'] not in present and meta['type'] in typestore.types:
                writer.add_connection(
                    meta['name'], meta['type'], typestore=typestore,
                    serialization_format=meta.get('serialization_format', 'cdr'),
                    offered_qos_profiles=parse_qos(meta.get('offered_qos_profiles', [])),
                )  # fmt: skip
        for cid, log_time, data in scan.messages:
            if cid in connections:
                writer.write(connections[cid], log_time, data)
        writer.close()
    except BaseException:
        try:
            writer.abort()
        finally:  # a full disk fails the abort too: the staging copy must still go
            shutil.rmtree(staging, ignore_errors=True)
        raise
    new_mcap = staging / split.name / f'{split.name}.mcap'
    new_meta = staging / split.name / 'metadata.yaml'
    for path in (new_mcap, new_meta):
        fsync_path(path)
    target = split / f'{split.name}.mcap'
    os.replace(new_mcap, target)
    os.replace(new_meta, split / 'metadata.yaml')
    if Path(mcap) != target:
        os.unlink(mcap)
    for leftover in (split / 'metadata.yaml.tmp',):
        if leftover.exists():
            leftover.unlink()
    fsync_path(split)
    shutil.rmtree(staging, ignore_errors=True)
    fsync_path(split.parent)
    return {c.topic: writer.counts[c.id] for c in writer.connections}  # topic -> messages written


def _type_hash(typestore, msgtype):
    """RIHS01 hash of a message type known to the typestore; ValueError otherwise."""
    if msgtype not in typestore.types:
        raise ValueError(f'no type hash for {msgtype}: not in metadata.yaml nor the typestore')
    return typestore.hash_rihs01(msgtype)


def recover_split(split, typestore=None, dry_run=False):
    """Recover one split directory in place; return a report dict (split, action, ...).

    action: 'complete' (left as it is), 'recovered' (rewritten; dry_run: would be), 'skipped'
    (no single MCAP file, or locked by a running writer) or 'failed' (reason says why).
    """
    split = os.path.abspath(split)
    report = {'split': split, 'action': 'skipped', 'reason': '', 'messages': 0, 'topics': {}}
    mcaps = sorted(p for p in os.listdir(split) if p.endswith('.mcap'))
    if len(mcaps) != 1:
        report['reason'] = f'{len(mcaps)} MCAP files (one expected)'
        return report
    mcap = os.path.join(split, mcaps[0])
    with open(mcap, 'rb') as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report['reason'] = 'being written (its MCAP file is locked)'
            return report
        try:
            scan = scan_mcap(mcap)
            report['reason'] = _incomplete(split, mcap, scan)
            report['topics'], report['messages'] = scan_counts(scan), len(scan.messages)
            if not report['reason']:
                report['action'] = 'complete'
                return report
            report['action'] = 'recovered'
            report['torn_bytes'] = scan.size - scan.end if scan.problem else 0
            if dry_run:
                return report
            typestore = typestore or get_typestore(TYPESTORE)
            report['topics'] = _rewrite(split, mcap, scan, _load_metadata(split), typestore)
            report['messages'] = sum(report['topics'].values())
        except Exception as error:  # report it and go on with the other splits
            report['action'], report['reason'] = 'failed', f'{type(error).__name__}: {error}'
    return report


def split_directories(directory):
    """The split directories of a bag root (or [directory] when it is a split itself), sorted."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f'bag-recover: {directory} is not a directory')
    if any(name.endswith('.mcap') for name in os.listdir(directory)):
        return [os.path.abspath(directory)]
    subdirs = (
        os.path.join(directory, name)
        for name in sorted(os.listdir(directory))
        if not name.startswith('.')
    )
    return [
        os.path.abspath(path)
        for path in subdirs
        if os.path.isdir(path) and any(name.endswith('.mcap') for name in os.listdir(path))
    ]


def recover_tree(directory, dry_run=False, last_only=False):
    """Recover every split under directory (a bag root or one split); return their reports.

    last_only: only the last split, the one a writer that numbers its splits in order (see
    bag_writer) can have left open, so that a restart on a long recording stays quick.
    """
    splits = split_directories(directory)
    if last_only:
        splits = splits[-1:]
    typestore = get_typestore(TYPESTORE)
    return [recover_split(split, typestore, dry_run) for split in splits]


def describe(report):
    """One line saying what recovery did to a split."""
    topics = ', '.join(f'{t} {n}' for t, n in sorted(report['topics'].items()))
    action = report['action']
    if action == 'complete':
        return f'{report["split"]}: complete, left as it is ({report["messages"]} messages)'
    if action == 'recovered':
        torn = report.get('torn_bytes', 0)
        cut = f'; cut {torn} torn bytes' if torn else ''
        detail = f' ({topics})' if topics else ''
        return (
            f'{report["split"]}: recovered {report["messages"]} messages{detail}{cut}'
            f' [{report["reason"]}]'
        )
    return f'{report["split"]}: {action}: {report["reason"]}'


def add_arguments(parser):
    """Arguments of bag-recover."""
    parser.add_argument('directory', help='a bag root holding split directories, or one split')
    parser.add_argument(
        '--dry-run', action='store_true', help='report what would be recovered, change nothing'
    )


def run(args):
    """Recover the splits, print one line each and a JSON summary; 1 if any failed."""
    try:
        reports = recover_tree(args.directory, args.dry_run)
    except FileNotFoundError as error:
        print(error, file=sys.stderr)
        return 2
    for report in reports:
        print(f'bag-recover: {describe(report)}', flush=True)
    counts = {}
    for report in reports:
        counts[report['action']] = counts.get(report['action'], 0) + 1
    summary = {'directory': os.path.abspath(args.directory), 'splits': len(reports), **counts}
    summary['messages'] = sum(r['messages'] for r in reports)
    print(json.dumps(summary), flush=True)
    return 1 if counts.get('failed') else 0


def main(argv=None):
    """Console script ``loco-bag-recover DIR``."""
    parser = argparse.ArgumentParser(prog='loco-bag-recover', description=__doc__.split('\n')[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == '__main__':
    sys.exit(main())
