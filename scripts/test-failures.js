// `node scripts/test-failures.js <label>=<jest-result.json>...`: prints, once more and together,
// every test that failed in the given Jest `--json` results (`npm test` writes them to
// .runplane/test-results/). `npm test` runs two Jest runs one after the other and the first run's
// failures end up some thousand lines above the end of the output, past what a CI log's tail
// shows; this puts them last. For each failed test: its file, its full name and the first lines of
// its failure; for a file that failed to run, its error. Prints nothing when nothing failed; a
// results file that is missing or unreadable is named (its run did not finish). Exit status 0:
// the runs' own exit statuses are what `npm test` reports.
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Lines of each failure message printed (the assertion and the first frames). */
const MESSAGE_LINES = 24;
const root = fileURLToPath(new URL('..', import.meta.url));
// eslint-disable-next-line no-control-regex
const ansi = /\u001b\[[0-9;]*m/g;
/** A stack frame of Jest's or Node's own, not of the test or the code under test. */
const foreignFrame = /^\s+at .*(\/node_modules\/|\(node:|\(<anonymous>\)|^\s+at new Promise)/;
/** The first `MESSAGE_LINES` lines of a message, without colours and foreign frames, indented. */
const excerpt = (message) => {
  const lines = String(message ?? '')
    .replace(ansi, '')
    .split('\n')
    .filter((l) => !foreignFrame.test(l));
  const shown = lines.slice(0, MESSAGE_LINES).map((l) => `      ${l}`);
  if (lines.length > MESSAGE_LINES) shown.push(`      ... (${lines.length - MESSAGE_LINES} more lines in the run's own output above)`);
  return shown.join('\n');
};

const out = [];
for (const arg of process.argv.slice(2)) {
  const at = arg.indexOf('=');
  const [label, file] = at > 0 ? [arg.slice(0, at), arg.slice(at + 1)] : [arg, arg];
  let result;
  try {
    result = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    out.push(`${label}: no results (${file}: ${e.code ?? e.message}); the run did not finish, its own output says why`);
    continue;
  }
  const failed = [];
  for (const suite of result.testResults ?? []) {
    const path = relative(root, suite.name ?? '');
    const tests = (suite.assertionResults ?? []).filter((a) => a.status === 'failed');
    for (const a of tests) failed.push(`  FAILED ${path} > ${a.fullName ?? a.title}\n${excerpt((a.failureMessages ?? []).join('\n'))}`);
    if (tests.length === 0 && suite.status === 'failed') failed.push(`  FAILED ${path} (the file)\n${excerpt(suite.message)}`);
  }
  if (failed.length > 0) out.push(`${label}: ${failed.length} failure(s) of ${result.numTotalTests} test(s)`, ...failed);
}
if (out.length > 0) process.stdout.write(`\n== failures, repeated from the runs above\n${out.join('\n')}\n`);
