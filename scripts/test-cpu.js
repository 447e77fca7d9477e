// `node scripts/test-cpu.js <cpu.jsonl> [--top N]`: what each test file cost the machine, from the
// lines the suite's test environment appends when `RUNPLANE_TEST_CPU_FILE` names a file
// (test/support/code-cache-environment.js): the Jest worker's CPU over the file (`own`), the CPU of
// the child processes the file reaped (`children`: the services, nats-servers and CLI runs it started
// and waited for; a process still running at the file's end, or not reaped by the worker, is not in
// it), and its wall time. Prints the totals, then the N costliest files (default 30). E.g.
//   RUNPLANE_TEST_CPU_FILE=/tmp/cpu.jsonl npm run test:e2e && node scripts/test-cpu.js /tmp/cpu.jsonl
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const usage = 'usage: node scripts/test-cpu.js <cpu.jsonl> [--top N]\n';
let values;
let positionals;
try {
  ({ values, positionals } = parseArgs({ allowPositionals: true, options: { top: { type: 'string', default: '30' } } }));
} catch (e) {
  process.stderr.write(`${e.message}\n${usage}`);
  process.exit(2);
}
const top = Number(values.top);
if (positionals.length !== 1 || !Number.isInteger(top) || top < 0) {
  process.stderr.write(usage);
  process.exit(2);
}
let rows;
try {
  rows = readFileSync(positionals[0], 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line));
} catch (e) {
  process.stderr.write(`${positionals[0]}: ${e.message}\n`);
  process.exit(1);
}
const s = (ms) => (ms / 1000).toFixed(1).padStart(7);
const sum = (key) => rows.reduce((a, r) => a + r[key], 0);
const own = sum('ownMs');
const children = sum('childrenMs');
process.stdout.write(
  `${rows.length} files: CPU ${s(own + children).trim()} s (Jest workers ${s(own).trim()} s, their children ${s(children).trim()} s)\n`,
);
process.stdout.write(`${'CPU s'.padStart(7)}${'own'.padStart(7)}${'child'.padStart(7)}${'wall s'.padStart(7)}  file\n`);
for (const r of [...rows].sort((a, b) => b.ownMs + b.childrenMs - (a.ownMs + a.childrenMs)).slice(0, top)) {
  process.stdout.write(`${s(r.ownMs + r.childrenMs)}${s(r.ownMs)}${s(r.childrenMs)}${s(r.wallMs)}  ${r.file}\n`);
}
