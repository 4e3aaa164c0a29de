// Open every split of a loco_policy bag the way Foxglove does (@mcap/core's indexed reader,
// @foxglove/rosmsg's ROS 2 schema parser, @foxglove/rosmsg2-serialization's CDR reader), decode
// every message, and check what the 3D panel needs to draw the robot moving: the URDF on
// /robot_description, and a /tf + /tf_static tree that joins every URDF link to `odom`.
//
//   cd tools/foxglove && npm ci && node check_bag.mjs BAG_DIR
//
// Prints one JSON line; exit 1 when a message does not decode or the tree is incomplete.
import { open, readdir } from 'node:fs/promises';
import path from 'node:path';

import { McapIndexedReader } from '@mcap/core';
import { parse } from '@foxglove/rosmsg';
import { MessageReader } from '@foxglove/rosmsg2-serialization';

function fileReadable(handle, size) {
  return {
    size: async () => BigInt(size),
    read: async (offset, length) => {
      const buffer = new Uint8Array(Number(length));
      await handle.read(buffer, 0, Number(length), Number(offset));
      return buffer;
    },
  };
}

async function readSplit(file, stats) {
  const handle = await open(file, 'r');
  const { size } = await handle.stat();
  const reader = await McapIndexedReader.Initialize({ readable: fileReadable(handle, size) });
  const readers = new Map(); // channel id -> [topic, MessageReader]
  for (const [id, channel] of reader.channelsById) {
    const schema = reader.schemasById.get(channel.schemaId);
    const text = new TextDecoder().decode(schema.data);
    readers.set(id, [channel.topic, new MessageReader(parse(text, { ros2: true }))]);
  }
  for await (const record of reader.readMessages()) {
    const [topic, decoder] = readers.get(record.channelId);
    const message = decoder.readMessage(record.data); // throws on a malformed message
    stats.counts[topic] = (stats.counts[topic] ?? 0) + 1;
    if (topic === '/robot_description') stats.urdf = message.data;
    if (topic === '/tf' || topic === '/tf_static') {
      for (const t of message.transforms) {
        stats.parents[t.child_frame_id] = t.header.frame_id;
        if (topic === '/tf' && t.child_frame_id === 'base') {
          const p = t.transform.translation;
          stats.basePath.push([p.x, p.y, p.z]);
        }
      }
    }
  }
  await handle.close();
}

const root = process.argv[2];
if (!root) {
  console.error('usage: node check_bag.mjs BAG_DIR');
  process.exit(2);
}
const splits = (await readdir(root, { withFileTypes: true }))
  .filter((e) => e.isDirectory() || e.name.endsWith('.mcap'))
  .map((e) => e.name)
  .sort();
const stats = { counts: {}, parents: {}, basePath: [], urdf: null };
const files = [];
for (const name of splits) {
  const dir = path.join(root, name);
  const mcaps = name.endsWith('.mcap')
    ? [dir]
    : (await readdir(dir)).filter((f) => f.endsWith('.mcap')).map((f) => path.join(dir, f));
  for (const file of mcaps) {
    await readSplit(file, stats);
    files.push(file);
  }
}
const links = stats.urdf ? [...stats.urdf.matchAll(/<link\s+name="([^"]+)"/g)].map((m) => m[1]) : [];
const rootOf = (frame) => {
  const seen = new Set();
  while (stats.parents[frame] !== undefined && !seen.has(frame)) {
    seen.add(frame);
    frame = stats.parents[frame];
  }
  return frame;
};
const unjoined = links.filter((link) => rootOf(link) !== 'odom');
const first = stats.basePath[0] ?? [0, 0, 0];
const last = stats.basePath[stats.basePath.length - 1] ?? [0, 0, 0];
const travelled = Math.hypot(last[0] - first[0], last[1] - first[1]);
const result = {
  check: 'foxglove_libraries',
  files: files.length,
  counts: stats.counts,
  urdf_links: links.length,
  links_not_joined_to_odom: unjoined,
  base_travel_m: Number(travelled.toFixed(3)),
};
result.ok = files.length > 0 && links.length > 0 && unjoined.length === 0 && travelled > 0.1;
console.log(JSON.stringify(result));
process.exit(result.ok ? 0 : 1);
