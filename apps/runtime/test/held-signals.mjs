/**
 * Counts the AbortSignals still alive after finished model requests, in a process of its own: a
 * heap walk (v8 `queryObjects`) costs in proportion to the heap, which in a Jest worker that has
 * run many test files is hundreds of MB (5 to 7 s for two walks); here it is the client's alone.
 *
 * node --expose-gc held-signals.mjs <model-client.js URL> <model base URL> <scenario key> <turns>
 * prints one JSON line: { "before": n, "after": n, "ok": turns that succeeded, "runAborted": bool }
 */
import { queryObjects } from 'node:v8';

const [clientModule, baseURL, key, turnsText] = process.argv.slice(2);
const { ModelClient } = await import(clientModule);
const client = new ModelClient({ baseURL, apiKey: 'k', model: 'scripted', timeoutMs: 60_000 });
const ask = [{ role: 'user', content: `[${key}] What does SPY hold?` }];
// the Run's own signal lives on (an executor's controller), as does a deadline hours away
const run = new globalThis.AbortController();
const deadlineAt = new Date(Date.now() + 4 * 3_600_000).toISOString();
const turn = () => client.turn(1, ask, [], () => undefined, run.signal, { deadlineAt });
await turn(); // what the first request loads is not counted
// live signals after full collections, the finalizers of collected ones given their turn: repeated
// while the count still falls (a loaded machine ran the finalizers late: 19 counted once in CI)
const live = async () => {
  let count = Infinity;
  for (let round = 0; round < 10; round++) {
    globalThis.gc();
    await new Promise((r) => setTimeout(r, 20));
    const now = queryObjects(globalThis.AbortSignal, { format: 'count' });
    if (now >= count) return now;
    count = now;
  }
  return count;
};
const before = await live();
let ok = 0;
for (let i = 0; i < Number(turnsText); i++) if ((await turn()).ok) ok++;
const after = await live();
console.log(JSON.stringify({ before, after, ok, runAborted: run.signal.aborted }));
