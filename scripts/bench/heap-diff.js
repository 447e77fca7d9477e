// Compares two V8 heap snapshots (the parked mode's `--parked-heap` writes them): the live objects
// grouped by V8 node type and constructor (or string), count and self size in each, and the groups
// that grew most from the first to the second. A profiling aid for the cost goals
// (docs/performance.md "Parked Runs"), not a test.
//
// Usage: node scripts/bench/heap-diff.js <before.heapsnapshot> <after.heapsnapshot> [--top 30]
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const { positionals, values } = parseArgs({ allowPositionals: true, options: { top: { type: 'string', default: '30' } } });
if (positionals.length !== 2) {
  process.stderr.write('usage: node scripts/bench/heap-diff.js <before.heapsnapshot> <after.heapsnapshot> [--top 30]\n');
  process.exit(2);
}

/**
 * Groups a snapshot's nodes: key `<type> <name>` (strings and code are grouped by type alone, a
 * closure by its function name), value { count, bytes } (self size).
 * @param {string} file a .heapsnapshot
 * @returns {Map<string, { count: number, bytes: number }>}
 */
function groups(file) {
  const snap = JSON.parse(readFileSync(file, 'utf8'));
  const meta = snap.snapshot.meta;
  const fields = meta.node_fields;
  const types = meta.node_types[0];
  const width = fields.length;
  const iType = fields.indexOf('type');
  const iName = fields.indexOf('name');
  const iSize = fields.indexOf('self_size');
  const out = new Map();
  const nodes = snap.nodes;
  for (let i = 0; i < nodes.length; i += width) {
    const type = types[nodes[i + iType]];
    const byName = type === 'object' || type === 'closure' || type === 'native' || type === 'hidden';
    const key = byName ? `${type} ${snap.strings[nodes[i + iName]]}` : type;
    const g = out.get(key) ?? { count: 0, bytes: 0 };
    g.count++;
    g.bytes += nodes[i + iSize];
    out.set(key, g);
  }
  return out;
}

const [a, b] = positionals.map(groups);
const total = (m) => [...m.values()].reduce((s, g) => s + g.bytes, 0);
const rows = [...new Set([...a.keys(), ...b.keys()])].map((k) => {
  const x = a.get(k) ?? { count: 0, bytes: 0 };
  const y = b.get(k) ?? { count: 0, bytes: 0 };
  return { k, dCount: y.count - x.count, dBytes: y.bytes - x.bytes, after: y.bytes };
});
rows.sort((p, q) => q.dBytes - p.dBytes);
const mib = (n) => (n / 1048576).toFixed(2);
process.stdout.write(`self size: ${mib(total(a))} MiB -> ${mib(total(b))} MiB (${mib(total(b) - total(a))} MiB)\n`);
process.stdout.write('  +MiB     +count  group\n');
for (const r of rows.slice(0, Number(values.top))) {
  process.stdout.write(`${mib(r.dBytes).padStart(7)} ${String(r.dCount).padStart(10)}  ${r.k.slice(0, 100)}\n`);
}
