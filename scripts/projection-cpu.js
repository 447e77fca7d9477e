/**
 * CPU of the projection write path (`applyStoredEvents`), without the bench: applies the events of
 * W1-like Runs (2 model turns, 2 tool calls, 3 passage commits, 17 events each, in groups of 8
 * interleaved as concurrent Runs land in one stream) to a fresh database, one event per call (a
 * projector at concurrency 1: one flush per event) and then in batches of 8, and prints
 * `process.cpuUsage()` (user + system) per event for each. Needs `npm run build` and PostgreSQL.
 *
 *   node scripts/projection-cpu.js [runs=96] [adminUrl=postgresql://postgres@127.0.0.1:5432/postgres]
 *   PROJECTIONS_MODULE=/path/to/other/libs/projections/dist/index.js node scripts/projection-cpu.js
 */
import { randomBytes } from 'node:crypto';
// the projection tests' research Run (W1-like: 2 model turns, 2 tool calls, 3 passage commits, 17 events)
import { researchRunEvents as runEvents } from '../libs/projections/test/research-run.js';

// PROJECTIONS_MODULE: another build of @runplane/projections to measure (e.g. a checkout's `libs/projections/dist/index.js`)
const { applyStoredEvents, createProjectionOrm, databaseUrlWith, dropDatabase, ensureDatabase, migrateUp } = await import(
  process.env.PROJECTIONS_MODULE ?? '@runplane/projections'
);

const runs = Number(process.argv[2] ?? 96);
const adminUrl = process.argv[3] ?? 'postgresql://postgres@127.0.0.1:5432/postgres';
const tag = randomBytes(4).toString('hex');

/** The Runs' events as one stream: groups of 8 Runs interleaved round-robin, stored with back-links. */
function stream(prefix) {
  const out = [];
  const last = new Map();
  for (let g = 0; g < runs; g += 8) {
    const group = Array.from({ length: Math.min(8, runs - g) }, (_, i) => runEvents(`${prefix}-${g + i}`));
    for (let i = 0; group.some((r) => i < r.length); i++)
      for (const r of group) {
        if (i >= r.length) continue;
        const event = r[i];
        const key = `${event.runId}.${event.owner}`;
        const seq = out.length + 1;
        out.push({ seq, subject: `t.run.${key}.0`, event: { ...event, prevSeq: last.get(key) ?? 0 } });
        last.set(key, seq);
      }
  }
  return out;
}

async function measure(name, batchSize) {
  const db = `rp_cpu_${tag}_${name}`;
  await ensureDatabase(adminUrl, db);
  const orm = await createProjectionOrm({ databaseUrl: databaseUrlWith(adminUrl, db) });
  try {
    await migrateUp(orm);
    const events = stream(`${name}-${tag}`);
    // warm-up: a few Runs of their own, not counted
    const warm = stream(`warm-${tag}`).slice(0, 8 * 17);
    for (const s of warm) await applyStoredEvents(orm.em, [s]);
    globalThis.gc?.();
    const t0 = performance.now();
    const c0 = process.cpuUsage();
    for (let i = 0; i < events.length; i += batchSize) {
      const results = await applyStoredEvents(orm.em, events.slice(i, i + batchSize));
      if (results.some((r) => r.status !== 'applied')) throw new Error(`not applied: ${JSON.stringify(results)}`);
    }
    const c = process.cpuUsage(c0);
    const wall = performance.now() - t0;
    const cpuMs = (c.user + c.system) / 1000;
    console.log(
      `${name}: ${events.length} events, batches of ${batchSize}: CPU ${cpuMs.toFixed(0)} ms (${((cpuMs * 1000) / events.length).toFixed(0)} us/event), wall ${wall.toFixed(0)} ms`,
    );
  } finally {
    await orm.close();
    await dropDatabase(adminUrl, db);
  }
}

await measure('single', 1);
await measure('batch8', 8);
