// Benchmark: the whole local Runplane (every service as its own process) on this machine's
// NATS and PostgreSQL, with the scripted research policy as the model. Measures admission latency,
// admission-to-settlement latency and throughput for concurrent Runs, and the cost of reading and
// folding one Run's log (what every handler does per wake). Uses its own stream and database and
// removes them afterwards. Usage: npm run bench [-- --runs 40 --concurrency 8]
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { RunplaneClient } from '@runplane/client';
import { dropDatabase, ensureDatabaseExists, repoRoot, startStack } from '@runplane/devstack';
import { EventLog } from '@runplane/eventlog';
import { foldRun } from '@runplane/run-facts';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '40' }, concurrency: { type: 'string', default: '8' } } });
const RUNS = Number(values.runs);
const CONCURRENCY = Number(values.concurrency);
const tag = `bench${randomBytes(3).toString('hex')}`;
const env = {
  ...process.env,
  NATS_URL: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
  DATABASE_URL: `postgresql://postgres@127.0.0.1:5432/rp_${tag}`,
  RUNPLANE_STREAM: `RPB_${tag}`,
  RUNPLANE_SUBJECT_PREFIX: tag,
};
const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const fmt = (xs) => `p50 ${pct(xs, 50).toFixed(1)} ms, p95 ${pct(xs, 95).toFixed(1)} ms, max ${Math.max(...xs).toFixed(1)} ms`;

await ensureDatabaseExists(env.DATABASE_URL);
const log = await EventLog.connect({ natsUrl: env.NATS_URL, stream: env.RUNPLANE_STREAM, prefix: env.RUNPLANE_SUBJECT_PREFIX });
const stack = await startStack({ env, logDir: join(repoRoot(), '.runplane', 'bench-logs', tag) });
try {
  const client = new RunplaneClient(stack.endpoints);
  const admitMs = [];
  const settleMs = [];
  const runIds = [];
  const started = performance.now();
  let next = 0;
  const worker = async () => {
    while (next < RUNS) {
      const i = next++;
      const t0 = performance.now();
      const { body } = await client.postMessage('bench', { clientMessageId: `${tag}-${i}`, content: 'Compare the holdings of SPY and QQQ' });
      admitMs.push(performance.now() - t0);
      runIds.push(body.runId);
      for (;;) {
        const last = await log.lastOf(body.runId, 'lifecycle');
        if (last) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      settleMs.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const wallS = (performance.now() - started) / 1000;

  const foldMs = [];
  let events = 0;
  for (let i = 0; i < 100; i++) {
    const t0 = performance.now();
    const stored = await log.readRun(runIds[i % runIds.length]);
    foldRun(runIds[i % runIds.length], stored);
    foldMs.push(performance.now() - t0);
    events = stored.length;
  }
  console.log(`Runplane benchmark (${RUNS} Runs of the SPY/QQQ comparison, ${CONCURRENCY} at a time, scripted model, 2-core machine)`);
  console.log(`  admission (POST -> 201):          ${fmt(admitMs)}`);
  console.log(`  admission -> settlement:          ${fmt(settleMs)}`);
  console.log(`  throughput:                       ${(RUNS / wallS).toFixed(2)} settled Runs/s (${wallS.toFixed(1)} s wall)`);
  console.log(`  read + fold one Run (${events} events): ${fmt(foldMs)}`);
  console.log(`  service RSS after the run:        ${(await rss(stack)).join(', ')}`);
} finally {
  await stack.stop();
  await log.jsm.streams.delete(`OBJ_${env.RUNPLANE_SUBJECT_PREFIX}_results`).catch(() => undefined);
  await log.destroyStream();
  await log.close();
  await dropDatabase(env.DATABASE_URL);
}

async function rss(s) {
  const { readFile } = await import('node:fs/promises');
  const out = [];
  for (const [name, p] of s.services) {
    const status = await readFile(`/proc/${p.child.pid}/status`, 'utf8').catch(() => '');
    const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
    out.push(`${name} ${(kb / 1024).toFixed(0)} MiB`);
  }
  return out;
}
