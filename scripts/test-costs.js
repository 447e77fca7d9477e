// `node scripts/test-costs.js <jest-result.json>...`: records how long each test file took in the
// given Jest `--json` results (`npx jest ... --json --outputFile=<file>`) into
// test/support/test-costs.json, the durations the test sequencer (test/support/sequencer.js) starts
// the longest files first by when Jest has none cached (a fresh clone). Entries of files not in the
// results are kept; entries of files that no longer exist are dropped. Take the results from the
// runs the suite really makes (`npm run test:unit`, `npm run test:e2e`, with their worker counts):
// a file's duration beside the others is what the order has to balance.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';

const { positionals } = parseArgs({ allowPositionals: true });
if (positionals.length === 0) {
  process.stderr.write('usage: node scripts/test-costs.js <jest-result.json>... (from `npx jest --json --outputFile=<file>`)\n');
  process.exit(2);
}
const root = resolve(new URL('..', import.meta.url).pathname);
const out = resolve(root, 'test/support/test-costs.json');
const costs = existsSync(out) ? (JSON.parse(readFileSync(out, 'utf8')).files ?? {}) : {};
let recorded = 0;
for (const file of positionals) {
  let result;
  try {
    result = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    process.stderr.write(`${file}: not a Jest --json result (${e.message})\n`);
    process.exit(2);
  }
  for (const r of result.testResults ?? []) {
    const seconds = (r.endTime - r.startTime) / 1000;
    if (!Number.isFinite(seconds)) continue;
    costs[relative(root, r.name)] = Math.round(seconds * 10) / 10;
    recorded++;
  }
}
const files = Object.fromEntries(
  Object.entries(costs)
    .filter(([path]) => existsSync(resolve(root, path)))
    .sort(([a], [b]) => a.localeCompare(b)),
);
const note =
  'Seconds each test file took in a run of the suite; test/support/sequencer.js starts the longest first. Written by scripts/test-costs.js.';
writeFileSync(out, `${JSON.stringify({ note, files }, null, 2)}\n`);
process.stdout.write(`${recorded} durations recorded; ${Object.keys(files).length} files in ${relative(root, out)}\n`);
