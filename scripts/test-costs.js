// `node scripts/test-costs.js <jest-result.json>...`: records how long each test file took in the
// given Jest `--json` results (`npx jest ... --json --outputFile=<file>`) into
// test/support/test-costs.json, the durations the test sequencer (test/support/sequencer.js) starts
// the longest files first by when Jest has none cached (a fresh clone). Entries of files not in the
// results are kept; entries of files that no longer exist are dropped. Take the results from the
// runs the suite really makes (`npm run test:unit`, `npm run test:e2e`, with their worker counts):
// a file's duration beside the others is what the order has to balance.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { isAbsolute, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const usage = 'usage: node scripts/test-costs.js <jest-result.json>... (from `npx jest --json --outputFile=<file>`)\n';
let positionals;
try {
  ({ positionals } = parseArgs({ allowPositionals: true }));
} catch (e) {
  process.stderr.write(`${e.message}\n${usage}`);
  process.exit(2);
}
if (positionals.length === 0) {
  process.stderr.write(usage);
  process.exit(2);
}
const root = fileURLToPath(new URL('..', import.meta.url));
const out = resolve(root, 'test/support/test-costs.json');
/** The recorded durations, or none when the file is missing or unreadable (it is rewritten whole). */
function recorded0() {
  try {
    const files = JSON.parse(readFileSync(out, 'utf8'))?.files;
    return files && typeof files === 'object' && !Array.isArray(files) ? files : {};
  } catch {
    return {};
  }
}
const costs = existsSync(out) ? recorded0() : {};
let recorded = 0;
for (const file of positionals) {
  let result;
  try {
    result = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    process.stderr.write(`${file}: not a Jest --json result (${e.message})\n`);
    process.exit(2);
  }
  if (!Array.isArray(result?.testResults)) {
    process.stderr.write(`${file}: not a Jest --json result (no testResults)\n`);
    process.exit(2);
  }
  for (const r of result.testResults) {
    const seconds = (r.endTime - r.startTime) / 1000;
    const path = typeof r.name === 'string' ? relative(root, r.name) : '';
    // a file that did not run (it failed to load) took no time that says anything
    if (!Number.isFinite(seconds) || seconds <= 0 || r.testExecError) continue;
    if (!path || path.startsWith('..') || isAbsolute(path)) {
      process.stderr.write(`${file}: ${r.name} is not in this repository (${root}); left out\n`);
      continue;
    }
    costs[path] = Math.round(seconds * 10) / 10;
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
