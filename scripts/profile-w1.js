// `node scripts/profile-w1.js [--runs 96] [--concurrency 8] [--out DIR] [--top 40]`: CPU profiles of
// every Runplane service under workload W1 (the bench's W1 question on the bench's stack: private
// nats-server, scripted model, one process per service). Each service runs with `--cpu-prof` into
// DIR (default .runplane/profiles/<tag>); after the Runs the services stop gracefully (the profiles
// are written at exit) and the script prints, per service and summed over all of them, the
// functions with the most self time (ms and % of the profile's sampled, non-idle time).
// Profiles are proportions: on a shared machine the split is meaningful, the absolute time less so.
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { benchSpace, startModel, startNats } from './bench/infra.js';
import { startRunplane } from './bench/systems.js';

// the services run on this process's Node (libs/devstack spawns process.execPath): profile the
// supported one, not a machine's older `node` (whose AsyncLocalStorage and crypto differ)
const NODE_MAJOR = Number(process.versions.node.split('.')[0]);
if (NODE_MAJOR < 24) {
  console.error(
    `node ${process.versions.node} would run the services: profile them on the supported Node 24 (npm run profile -- [options], or node_modules/.bin/node scripts/profile-w1.js)`,
  );
  process.exit(2);
}

const { values: a } = parseArgs({
  options: {
    runs: { type: 'string', default: '96' },
    concurrency: { type: 'string', default: '8' },
    out: { type: 'string' },
    top: { type: 'string', default: '40' },
  },
});
const root = resolve(new URL('..', import.meta.url).pathname);
const tag = `prof${randomBytes(3).toString('hex')}`;
const out = resolve(a.out ?? join(root, '.runplane', 'profiles', tag));
mkdirSync(out, { recursive: true });
const QUESTION = 'What does DIA hold?';
const dataDir = process.env.RUNPLANE_DATA_DIR ?? resolve(root, '../shared/data/etf-holdings');
const logDir = mkdtempSync(join(tmpdir(), 'runplane-profile-'));

// the Runplane users of this stack and TLS, as the bench runs it
const nats = await startNats(undefined, { space: benchSpace(tag) });
const model = await startModel(root, join(logDir, 'model.log'));
let h;
const names = new Map(); // pid -> service name (the profiles are named after the pid)
try {
  h = await startRunplane({
    tag,
    nats,
    modelUrl: model.url,
    pg: 'postgresql://postgres@127.0.0.1:5432',
    logDir,
    dataDir,
    // as node flags, not NODE_OPTIONS: Node 20 refuses --cpu-prof there
    nodeFlags: ['--cpu-prof', `--cpu-prof-dir=${out}`],
  });
  for (const [name, ps] of h.stack.replicas) for (const p of ps) names.set(String(p.child.pid), p.name ?? name);
  for (let i = 0; i < 4; i++) await h.one(`${tag}-warm-${i}`, QUESTION);
  const n = Number(a.runs);
  let next = 0;
  const t0 = Date.now();
  await Promise.all(
    Array.from({ length: Number(a.concurrency) }, async () => {
      while (next < n) await h.one(`${tag}-${next++}`, QUESTION);
    }),
  );
  console.log(`${n} W1 Runs at c=${a.concurrency} in ${Date.now() - t0} ms`);
} finally {
  await h?.stop();
  await model.stop();
  await nats.stop();
  rmSync(logDir, { recursive: true, force: true });
}

/** Self time per function of one .cpuprofile: Map of "name file:line" -> ms. */
function selfTimes(file) {
  const p = JSON.parse(readFileSync(file, 'utf8'));
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const dt = new Map();
  for (let i = 0; i < p.samples.length; i++) dt.set(p.samples[i], (dt.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0) / 1000);
  const self = new Map();
  for (const [id, ms] of dt) {
    const cf = byId.get(id).callFrame;
    const where = cf.url ? `${cf.url.replace(/^file:\/\//, '').replace(root + '/', '')}:${cf.lineNumber + 1}` : '';
    const key = `${cf.functionName || '(anonymous)'} ${where}`.trim();
    self.set(key, (self.get(key) ?? 0) + ms);
  }
  return self;
}
const print = (title, self) => {
  const busy = [...self].filter(([k]) => k !== '(idle)' && k !== '(program)');
  const total = busy.reduce((s, [, ms]) => s + ms, 0);
  console.log(`\n== ${title}: ${total.toFixed(0)} ms sampled, not idle`);
  for (const [k, ms] of busy.sort((x, y) => y[1] - x[1]).slice(0, Number(a.top)))
    console.log(`${ms.toFixed(0).padStart(7)} ms ${((100 * ms) / total).toFixed(1).padStart(5)} %  ${k}`);
};
// a worker thread's profile (the tools' piscina workers, the heartbeat thread) is named after its
// process too; an Atomics wait there is a blocked thread, not CPU
const all = new Map();
const perService = new Map();
for (const f of readdirSync(out).filter((f) => f.endsWith('.cpuprofile'))) {
  const self = selfTimes(join(out, f));
  for (const k of [...self.keys()]) if (k.startsWith('atomicsWaitLoop ')) self.delete(k);
  const service = names.get(f.split('.')[3]) ?? `pid ${f.split('.')[3]}`;
  const mine = perService.get(service) ?? new Map();
  for (const [k, ms] of self) {
    all.set(k, (all.get(k) ?? 0) + ms);
    mine.set(k, (mine.get(k) ?? 0) + ms);
  }
  perService.set(service, mine);
}
const busyMs = (m) => [...m].filter(([k]) => k !== '(idle)' && k !== '(program)').reduce((s, [, ms]) => s + ms, 0);
console.log('\nsampled, not idle, per service (ms):');
for (const [s, m] of [...perService].sort((x, y) => busyMs(y[1]) - busyMs(x[1]))) console.log(`${busyMs(m).toFixed(0).padStart(8)}  ${s}`);
print(`all services (${out})`, all);
for (const [s, m] of perService) if (process.env.PROFILE_PER_SERVICE) print(s, m);
