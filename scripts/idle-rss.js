// `node scripts/idle-rss.js [--after 3,30]`: the idle RSS of every Runplane service, without
// running a workload. Starts Runplane as the bench does (scripts/bench/systems.js startRunplane: the
// bench's private nats-server with the Runplane users and TLS, the scripted model, one process per
// service with devstack's SERVICE_NODE_FLAGS), waits, and prints for each service process its VmRSS
// (what the bench's "idle RSS" row reports, 3 s after start-up) at each of the --after times
// (seconds after the stack has started), split into anonymous memory (the process's own: V8 heaps,
// worker threads, malloc) and file-backed pages (mostly the node binary, the same pages in every
// process), and its PSS (the file-backed pages shared out among the processes mapping them); then
// each service's CPU since its start (utime + stime of all its threads) at the same times.
// Stops everything it started. Build first (`npm run build`).
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { repoRoot } from '@runplane/devstack';
import { resolveDataFolder } from '@runplane/holdings';
import { benchSpace, startModel, startNats } from './bench/infra.js';
import { startRunplane } from './bench/systems.js';

const { values: a } = parseArgs({ options: { after: { type: 'string', default: '3,30' } } });
const times = a.after
  .split(',')
  .map(Number)
  .filter((s) => s >= 0)
  .sort((x, y) => x - y);

/** VmRSS, RssAnon, RssFile and Pss of a process, MiB; null when it is gone. */
async function memory(pid) {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => null);
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  const rollup = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  if (status === null) return null;
  const kib = (text, key) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN);
  return {
    rss: kib(status, 'VmRSS') / 1024,
    anon: kib(status, 'RssAnon') / 1024,
    file: kib(status, 'RssFile') / 1024,
    pss: kib(rollup, 'Pss') / 1024,
    // utime + stime since the process started, all threads, s (clock ticks of 10 ms)
    cpu: stat
      ? stat
          .slice(stat.lastIndexOf(')') + 2)
          .split(' ')
          .slice(11, 13)
          .map(Number)
          .reduce((x, y) => x + y, 0) / 100
      : NaN,
  };
}

const root = repoRoot();
const tag = `idle${randomBytes(3).toString('hex')}`;
const logDir = mkdtempSync(join(tmpdir(), 'runplane-idle-rss-'));
const pgc = new pg.Client({ connectionString: 'postgresql://postgres@127.0.0.1:5432/postgres' });
await pgc.connect();
const nats = await startNats(undefined, { space: benchSpace(tag) });
let model;
let h;
try {
  model = await startModel(root, join(logDir, 'model.log'));
  h = await startRunplane({ tag, nats, modelUrl: model.url, pg: pgc, logDir, dataDir: resolveDataFolder(process.env).dir });
  const started = Date.now();
  const procs = [...h.stack.replicas.entries()].flatMap(([name, ps]) => ps.map((p) => [p.name ?? name, p.child.pid]));
  const rows = new Map(procs.map(([name]) => [name, []]));
  for (const s of times) {
    await new Promise((r) => setTimeout(r, Math.max(0, started + s * 1000 - Date.now())));
    for (const [name, pid] of procs) rows.get(name).push(await memory(pid));
  }
  const f = (x) => (x === undefined || Number.isNaN(x) ? 'n/a' : x.toFixed(0)).padStart(5);
  process.stdout.write(`idle memory per service, MiB (${tag}; RSS = anon + file)\n`);
  process.stdout.write(
    `${'service'.padEnd(12)}${times.map((s) => `${`RSS ${s}s`.padStart(9)}${'anon'.padStart(6)}${'file'.padStart(6)}${'PSS'.padStart(6)}`).join('  ')}\n`,
  );
  for (const [name, samples] of rows) {
    process.stdout.write(`${name.padEnd(12)}${samples.map((m) => `${f(m?.rss).padStart(9)} ${f(m?.anon)} ${f(m?.file)} ${f(m?.pss)}`).join('  ')}\n`);
  }
  const cpu = (m) => (m === null || Number.isNaN(m.cpu) ? 'n/a' : m.cpu.toFixed(2)).padStart(9);
  process.stdout.write(
    `\nCPU since its start (utime + stime, all threads), s\n${'service'.padEnd(12)}${times.map((s) => `${s}s`.padStart(9)).join('')}\n`,
  );
  for (const [name, samples] of rows) process.stdout.write(`${name.padEnd(12)}${samples.map(cpu).join('')}\n`);
  const sum = (i) =>
    [...rows.values()]
      .reduce((t, samples) => t + (samples[i]?.cpu ?? 0), 0)
      .toFixed(2)
      .padStart(9);
  process.stdout.write(`${'all'.padEnd(12)}${times.map((_, i) => sum(i)).join('')}\n`);
} finally {
  await h?.stop();
  await model?.stop();
  await nats.stop();
  await pgc.end();
  rmSync(logDir, { recursive: true, force: true });
}
