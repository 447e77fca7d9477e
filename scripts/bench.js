// `npm run bench`: Runplane side by side with DBOS and Restate on workload W1, plus today's demo
// workload on Runplane and the read cost of one Run's log. See docs/performance.md.
//
//   W1        one Run = model turn, tool call, model turn, tool call, model turn ("What does DIA
//             hold?" answered by the scripted model's research policy), every model turn an HTTP
//             call to the same scripted model server, the tools the same @runplane/holdings functions.
//   demo      the SPY/QQQ comparison Run on Runplane (today's demo question).
//   read-cost log.readRun(runId) + foldRun(runId, events) of one 30-event Run with 0 / 100k / 1M
//             other events in the stream.
//
//   runplane-x3  W1 on Runplane again with three processes of every service on a 3-node JetStream
//             cluster the bench starts for it (stream and buckets at R3), in the same table as
//             `runplane` (one process per service, one server): what must hold on 2 cores is that
//             the replicas cost little and no Run stalls (the "Runs not settled" row).
//
//   soak      (only when asked: --only soak) W1 Runs on Runplane started at a steady open-loop rate
//             (--rate Runs/s, default 2) for --minutes (default 30), sampled each minute: RSS of
//             every service process and the nats-server, p50/p99 admission-to-settlement of the
//             Runs settled that minute, consumer lag (num_pending + num_ack_pending over each
//             service's durable consumers); then the first min(5, floor(minutes/2)) minutes after
//             warm-up (minute 1 skipped) beside the last as many, with the change and flat / NOT FLAT
//             (±20 %). Samples: <logs>/soak-samples.json.
//   audit     (only when asked: --only audit) `auditRuns` over --audit-runs N Runs of 30 events
//             (default 100000) held in memory at once, as `runplane audit --all` holds them: the
//             checks' time per Run and per event, and the heap (the stream read is not included).
//   parked    (only when asked: --only parked) --parked N Runs (default 2000) that each park on a
//             question for a human (the scripted model answers their first turn with ask_human),
//             --parked-concurrency at a time admitted and not yet parked (default 16; none started after
//             --parked-cap-s, default 1200, and the wait for the parks ends at twice it); RSS and V8 heap of every
//             service before, 5 s after the last park and --parked-idle-s later (default 60; goal, judged
//             there: the runtime grows by at most 50 MiB for 10,000). --parked-heap: the runtime and recovery
//             write heap snapshots before and after (<logs>/parked-heap/; compare them with
//             `node scripts/bench/heap-diff.js <before> <after>`). <logs>/parked.json.
//
// Usage: npm run bench [-- --only w1,demo,read-cost,soak,parked --systems runplane,runplane-x3,dbos,restate
//          --concurrency 1,8,64 --runs 16,64,192 --warmup 4 --repeat 1 --demo-runs 16 --demo-concurrency 8
//          --read-others 0,100000,1000000 --reads 200 --read-cap-s 120 --raw-appends 4000
//          --minutes 30 --rate 2 --parked 2000 --parked-concurrency 16 --parked-cap-s 1200 --parked-idle-s 60
//          --parked-heap --audit-runs 100000
//          --nats-bin PATH (the nats-server to start; default: the one scripts/fetch-nats-server.sh caches)
//          --nats-cluster (a 3-node JetStream cluster on loopback instead of one server; Runplane's
//          stream and buckets at 3 replicas, the CPU of all three nodes counted)]
// Everything uses its own NATS server, streams, databases and temp dirs, removed afterwards. Every
// NATS server runs as deployed: the Runplane users of the system it hosts and TLS (scripts/bench/infra.js
// startNats); the soak's and the parked Runs' Runplanes get servers of their own.
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { makeEvent } from '@runplane/contracts';
import { repoRoot, stopEverything } from '@runplane/devstack';
import { natsTlsOptions, natsUserOptions } from '@runplane/eventlog';
import { resolveDataFolder } from '@runplane/holdings';
import { foldRun } from '@runplane/run-facts';
import { benchSpace, ensurePeerPackages, startModel, startNats } from './bench/infra.js';
import { CpuMeter, cpuTicks, CLK_TCK } from './bench/proc.js';
import { PARKED_DEADLINE_S, runParked } from './bench/parked.js';
import { measureAudit } from './bench/audit.js';
import { readCostLevels } from './bench/read-cost.js';
import { runSoak } from './bench/soak.js';
import { formatTable, goalRows, IDLE_RSS_GOAL_MIB } from './bench/goals.js';
import { combineRepeats, drive, num, pct, ratio } from './bench/stats.js';
import { runsPerSecondSvg } from './bench/svg.js';
import { startDbos, startRestate, startRunplane } from './bench/systems.js';
import { readTimeline } from './bench/timeline.js';
import { benchArgProblems } from './bench/args.js';

/** Says what is wrong with the command line, and exits 2 before anything starts. */
function usageError(lines) {
  process.stderr.write(`${lines.map((l) => `bench: ${l}`).join('\n')}\n(npm run bench -- --help lists the options)\n`);
  process.exit(2);
}

const { values: a } = parseArgsOrExit({
  options: {
    only: { type: 'string', default: 'w1,demo,read-cost' },
    systems: { type: 'string', default: 'runplane,runplane-x3,dbos,restate' },
    concurrency: { type: 'string', default: '1,8,64' },
    runs: { type: 'string', default: '16,64,192' },
    warmup: { type: 'string', default: '4' },
    repeat: { type: 'string', default: '1' },
    'demo-runs': { type: 'string', default: '16' },
    'demo-concurrency': { type: 'string', default: '8' },
    'read-others': { type: 'string', default: '0,100000,1000000' },
    reads: { type: 'string', default: '200' },
    'read-cap-s': { type: 'string', default: '120' },
    'raw-appends': { type: 'string', default: '4000' },
    minutes: { type: 'string', default: '30' },
    rate: { type: 'string', default: '2' },
    parked: { type: 'string', default: '2000' },
    'parked-concurrency': { type: 'string', default: '16' },
    'parked-cap-s': { type: 'string', default: '1200' },
    'parked-heap': { type: 'boolean', default: false },
    'parked-idle-s': { type: 'string', default: '60' },
    'audit-runs': { type: 'string', default: '100000' },
    svg: { type: 'string' },
    'nats-bin': { type: 'string' },
    'nats-cluster': { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});
/** `parseArgs`, whose refusals (an unknown option, a value missing) are said as usage errors, not thrown. */
function parseArgsOrExit(config) {
  try {
    return parseArgs(config);
  } catch (e) {
    return usageError([e instanceof Error ? e.message : String(e)]);
  }
}
if (a.help) {
  process.stdout.write(
    (await import('node:fs'))
      .readFileSync(new URL(import.meta.url), 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('//'))
      .join('\n') + '\n',
  );
  process.exit(0);
}
const problems = benchArgProblems(a);
if (problems.length > 0) usageError(problems);
const list = (s) =>
  s
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
const only = new Set(list(a.only));
const systemsWanted = list(a.systems).map((s) => s.toLowerCase());
const levels = list(a.concurrency).map(Number);
const runsPer = list(a.runs).map(Number);
// --repeat N: each W1 level is driven N times in a row on the same stack; the table gives each
// figure's median over the N, and a line after it the spread (the machine's own spread between two
// runs of the same code is often larger than a change measured: docs/performance.md)
const repeats = Number(a.repeat);
const W1_QUESTION = 'What does DIA hold?';
const DEMO_QUESTION = 'Compare the holdings of SPY and QQQ';

const root = repoRoot();
const tag = `bench${randomBytes(3).toString('hex')}`;
const logDir = join(root, '.runplane', 'bench-logs', tag);
mkdirSync(logDir, { recursive: true });
const dataDir = resolveDataFolder(process.env).dir;
const say = (s = '') => process.stdout.write(`${s}\n`);
/** How many pairs of event types the c=1 timeline prints (the rest are summed on one line). */
const TIMELINE_ROWS = 12;
/** A share (0..1) as a right-aligned whole percentage, e.g. ` 31 %`. */
const pct100 = (x) => `${String(Math.round(x * 100)).padStart(3)} %`;
const started = Date.now();

say(
  `Runplane bench ${tag}: ${cpus().length} cores, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, load average at start ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}, Node ${process.version}`,
);
say(`logs: ${logDir}`);

const cleanups = [];
let nats = null;
let model = null;
const pgc = new pg.Client({ connectionString: 'postgresql://postgres@127.0.0.1:5432/postgres' });
const results = {}; // name -> { levels: [...], idleRss, eventsPerRun, includes, skipped }
let raw = null;
let demo = null;
let readCost;
let soak = null;
let parked = null;

// Ctrl-C or a SIGTERM stops everything this bench started before it exits (130): the services and
// the scripted model (devstack's processes), its NATS servers and their folders, and its databases
// (`rp_<tag>...`). Without it an interrupted bench left its nats-servers and scripted model running.
let interrupted = false;
for (const signal of ['SIGINT', 'SIGTERM'])
  process.once(signal, () => {
    if (interrupted) return;
    interrupted = true;
    say(`\n${signal}: stopping everything bench ${tag} started...`);
    void (async () => {
      await stopEverything().catch(() => undefined);
      for (const c of [...cleanups].reverse()) await c().catch(() => undefined);
      const dbs = await pgc.query('SELECT datname FROM pg_database WHERE datname LIKE $1', [`rp\\_${tag}%`]).catch(() => ({ rows: [] }));
      for (const { datname } of dbs.rows) await pgc.query(`DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`).catch(() => undefined);
      await pgc.end().catch(() => undefined);
      process.exit(130);
    })();
  });

try {
  await pgc.connect();
  // the private server hosts the W1 (and demo) Runplane's subject space; the raw appends and the
  // read cost use it as its admin user; soak and parked Runplanes get servers of their own
  nats = await startNats(a['nats-bin'], { cluster: a['nats-cluster'], space: benchSpace(tag) });
  cleanups.push(() => nats.stop());
  say(`private ${nats.version} at ${nats.url} (the Runplane users of ${tag}, TLS required)`);

  if (['w1', 'demo', 'soak', 'parked'].some((m) => only.has(m))) {
    model = await startModel(root, join(logDir, 'model.log'));
    cleanups.push(() => model.stop());
    say(`scripted model at ${model.url} (shared by every system; its CPU is not counted for any)`);
    say(`tool data folder: ${dataDir}`);
  }

  if (only.has('w1')) {
    const peerProblem = systemsWanted.some((s) => !isRunplane(s)) ? ensurePeerPackages(root) : null;
    for (const sys of systemsWanted) {
      say(`\n== W1 on ${sys} ==`);
      if (!isRunplane(sys) && peerProblem) {
        say(`  skipped: ${peerProblem}`);
        results[sys] = { skipped: peerProblem };
        continue;
      }
      let handle;
      let ownNats = null; // runplane-x3's own 3-node cluster, stopped with it
      try {
        if (sys === 'runplane-x3') {
          ownNats = await startNats(a['nats-bin'], { cluster: true, space: benchSpace(`${tag}x3`) });
          say(`  its own ${ownNats.version} at ${ownNats.url}`);
        }
        handle =
          sys === 'runplane'
            ? await startRunplane({ tag, nats, modelUrl: model.url, pg: pgc, logDir, dataDir })
            : sys === 'runplane-x3'
              ? await startRunplane({
                  tag: `${tag}x3`,
                  nats: ownNats,
                  modelUrl: model.url,
                  pg: pgc,
                  logDir: join(logDir, 'x3'),
                  dataDir,
                  replicas: 3,
                })
              : sys === 'dbos'
                ? await startDbos({ root, tag, modelUrl: model.url, pg: pgc, logFile: join(logDir, 'dbos.log'), dataDir })
                : sys === 'restate'
                  ? await startRestate({ root, modelUrl: model.url, logFile: join(logDir, 'restate.log'), dataDir })
                  : null;
        if (!handle) throw new Error(`unknown system ${sys}`);
      } catch (e) {
        const why = String(e?.message ?? e)
          .split('\n')
          .slice(0, 4)
          .join(' | ');
        say(`  could not start ${sys}: ${why}`);
        results[sys] = { skipped: `could not start: ${why}` };
        if (ownNats) await ownNats.stop().catch(() => undefined);
        continue;
      }
      try {
        results[sys] = await measureW1(sys, handle);
        if (sys === 'runplane') {
          raw = await rawAppendCost(Number(a['raw-appends']));
          say(
            `  raw conditional JetStream append (js.publish, expect lastSubjectSequence, 8 in flight): ${num(raw.wallUs, 0)} us wall, ${num(raw.cpuUs, 1)} us CPU (client ${num(raw.clientUs, 1)} + nats-server ${num(raw.serverUs, 1)}) per append`,
          );
          if (only.has('demo')) demo = await measureDemo(handle);
        }
      } catch (e) {
        say(`  failed: ${e?.stack ?? e}`);
        results[sys] = { ...(results[sys] ?? {}), skipped: `failed: ${String(e?.message ?? e).slice(0, 200)}` };
      } finally {
        await handle.stop().catch((e) => say(`  stop ${sys}: ${e?.message ?? e}`));
        if (ownNats) await ownNats.stop().catch((e) => say(`  stop ${sys}'s NATS cluster: ${e?.message ?? e}`));
      }
    }
  } else if (only.has('demo')) {
    const handle = await startRunplane({ tag, nats, modelUrl: model.url, pg: pgc, logDir, dataDir });
    try {
      demo = await measureDemo(handle);
    } finally {
      await handle.stop();
    }
  }

  if (only.has('soak')) {
    say(`\n== soak: W1 on Runplane at ${a.rate} Runs/s for ${a.minutes} minute(s) ==`);
    const soakNats = await startNats(a['nats-bin'], { space: benchSpace(`${tag}s`) });
    cleanups.push(() => soakNats.stop());
    const h = await startRunplane({ tag: `${tag}s`, nats: soakNats, modelUrl: model.url, pg: pgc, logDir: join(logDir, 'soak'), dataDir });
    try {
      const warm = await drive(2, Number(a.warmup), (i) => h.one(`soak-${tag}-warm-${i}`, W1_QUESTION));
      if (warm.failures > 0) throw new Error(`warm-up Runs failed: ${warm.errors.join(' | ')}`);
      soak = await runSoak({
        h,
        minutes: Number(a.minutes),
        rate: Number(a.rate),
        question: W1_QUESTION,
        idPrefix: `soak-${tag}`,
        say,
        samplesFile: join(logDir, 'soak-samples.json'),
      });
    } catch (e) {
      say(`  soak failed: ${e?.stack ?? e}`);
    } finally {
      await h.stop().catch((e) => say(`  stop: ${e?.message ?? e}`));
    }
  }

  if (only.has('parked')) {
    const n = Number(a.parked);
    say(`\n== parked: ${n} Runs waiting for a human on Runplane ==`);
    const parkedNats = await startNats(a['nats-bin'], { space: benchSpace(`${tag}p`) });
    cleanups.push(() => parkedNats.stop());
    const h = await startRunplane({
      tag: `${tag}p`,
      nats: parkedNats,
      modelUrl: model.url,
      pg: pgc,
      logDir: join(logDir, 'parked'),
      dataDir,
      env: { RUNPLANE_RUN_DEADLINE_SECONDS: String(PARKED_DEADLINE_S), RUNPLANE_WAIT_TTL_SECONDS: String(PARKED_DEADLINE_S) },
      // --parked-heap: every service writes a V8 heap snapshot on SIGUSR2 (before and after the parks)
      nodeFlags: a['parked-heap'] ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${join(logDir, 'parked-heap')}`] : [],
    });
    try {
      // Warm-up W1 Runs first, so that what the first Runs load (the model client, the tools) is in "before".
      const warm = await drive(2, Number(a.warmup), (i) => h.one(`parked-${tag}-warm-${i}`, W1_QUESTION));
      if (warm.failures > 0) throw new Error(`warm-up Runs failed: ${warm.errors.join(' | ')}`);
      await new Promise((r) => setTimeout(r, 3000));
      parked = await runParked({
        h,
        modelUrl: model.url,
        tag: `${tag}p`,
        n,
        concurrency: Number(a['parked-concurrency']),
        capS: Number(a['parked-cap-s']),
        heapDir: a['parked-heap'] ? join(logDir, 'parked-heap') : null,
        idleS: Number(a['parked-idle-s']),
        say,
        outFile: join(logDir, 'parked.json'),
      });
    } catch (e) {
      say(`  parked failed: ${e?.stack ?? e}`);
    } finally {
      await h.stop().catch((e) => say(`  stop: ${e?.message ?? e}`));
    }
  }

  if (only.has('audit')) {
    say(`\n== audit: auditRuns over ${a['audit-runs']} Runs of 30 events, in memory ==`);
    const r = measureAudit(Number(a['audit-runs']));
    say(
      `  ${r.runs} Runs, ${r.events} events: checks ${num(r.auditS, 1)} s (${num(r.usPerRun, 0)} µs per Run, ${num(r.usPerEvent, 1)} µs per event), built in ${num(r.buildS, 1)} s; heap ${num(r.heapMiB, 0)} MiB, RSS ${num(r.rssMiB, 0)} MiB; ${r.clean ? 'every Run clean' : 'NOT every Run clean'}`,
    );
  }

  if (only.has('read-cost')) {
    say('\n== read cost: log.readRun + foldRun of one 30-event Run ==');
    readCost = await readCostLevels({
      natsUrl: nats.url,
      caFile: nats.caFile,
      admin: nats.admin,
      tag,
      levels: list(a['read-others']).map(Number),
      reads: Number(a.reads),
      capMs: Number(a['read-cap-s']) * 1000,
    });
    for (const r of readCost) {
      say(
        `  ${String(r.others).padStart(9)} other events: median ${num(r.p50, 2)} ms, p90 ${num(r.p90, 2)} ms, first read ${num(r.firstMs, 2)} ms (${r.reads} reads; stream held ${r.streamMessages} messages, written in ${num(r.writeS, 1)} s)`,
      );
    }
  }
} finally {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  await pgc.end().catch(() => undefined);
}

printReport();
if (soak)
  say(
    `Soak (${soak.minutes} min at ${soak.rate} Runs/s): RSS of every service and p50 flat: ${soak.goalMet ? 'met' : `NOT met (${soak.notFlat.join(', ')})`}; ${soak.totals.settledOk}/${soak.totals.started} Runs completed`,
  );
if (parked)
  say(
    `Parked Runs: ${parked.parked} parked; runtime RSS ${num(parked.before.runtime, 0)} -> ${num(parked.idle.runtime, 0)} MiB ${parked.idleS} s after the parks (${parked.runtimeGrowthMiB >= 0 ? '+' : ''}${num(parked.runtimeGrowthMiB, 1)}; goal <= +50 MiB for 10,000: ${parked.goalMet === null ? 'not judged, fewer than 10,000' : parked.goalMet ? 'met' : 'NOT met'}); admitted in ${num(parked.admitS, 0)} s, all parked after ${num(parked.parkS, 0)} s`,
  );
// The committed chart (docs/) is rewritten only by a full comparison (all three systems, the default
// levels); any other run writes its chart beside its logs, unless --svg names a path ('' for none).
const fullComparison = ['runplane', 'dbos', 'restate'].every((s) => systemsWanted.includes(s)) && a.concurrency === '1,8,64';
const svgPath = a.svg ?? (fullComparison ? 'docs/performance-runs-per-second.svg' : join('.runplane', 'bench-logs', tag, 'runs-per-second.svg'));
if (only.has('w1') && svgPath) {
  const svg = runsPerSecondSvg(
    levels,
    ['runplane', 'runplane-x3', 'dbos', 'restate']
      .filter((s) => systemsWanted.includes(s))
      .map((s) => ({ name: label(s), values: levels.map((_, i) => results[s]?.levels?.[i]?.runsPerS ?? null) })),
    `${cpus().length}-core machine, scripted model, ${new Date().toISOString().slice(0, 10)} (npm run bench, ${tag})`,
  );
  writeFileSync(join(root, svgPath), svg);
  say(`chart written to ${svgPath}`);
}
say(`bench took ${((Date.now() - started) / 1000).toFixed(0)} s`);

// ---------------------------------------------------------------------------------------------

function label(sys) {
  return { runplane: 'Runplane', 'runplane-x3': 'Runplane x3', dbos: 'DBOS', restate: 'Restate' }[sys] ?? sys;
}

/** True for the Runplane configurations (they share the event log, the shape check and the stall count). */
function isRunplane(sys) {
  return sys === 'runplane' || sys === 'runplane-x3';
}

/** Warm-up, idle RSS, then each concurrency level with its CPU meter. */
async function measureW1(sys, h) {
  await new Promise((r) => setTimeout(r, 3000));
  const idleRss = await h.idleRss();
  say(`  idle RSS: ${idleRss.map(([n, k]) => `${n} ${num(k / 1024, 0)} MiB`).join(', ')}`);
  const warm = await drive(2, Number(a.warmup), (i) => h.one(`w1-${tag}-${sys}-warm-${i}`, W1_QUESTION));
  if (warm.failures > 0) throw new Error(`warm-up Runs failed: ${warm.errors.join(' | ')}`);
  let totalRuns = Number(a.warmup);
  let shape = null;
  if (isRunplane(sys)) {
    // Check W1's shape on one warm-up Run: 3 model turns, 2 tool calls.
    const runId = await h.one(`w1-${tag}-${sys}-shape`, W1_QUESTION);
    totalRuns++;
    const facts = foldRun(runId, await h.log.readRun(runId));
    shape = { turns: facts.turns.length, toolCalls: facts.toolCalls.size };
    say(`  W1 shape on ${label(sys)}: ${shape.turns} model turns, ${shape.toolCalls} tool calls`);
  }
  const meter = new CpuMeter(h.pids);
  const out = [];
  for (const [i, c] of levels.entries()) {
    const reps = [];
    for (let rep = 1; rep <= repeats; rep++) {
      await meter.begin();
      const stalledBefore = h.stalled?.length;
      const runIds = [];
      const r = await drive(c, runsPer[i], (k) =>
        h.one(`w1-${tag}-${sys}-c${c}-${rep > 1 ? `r${rep}-` : ''}${k}`, W1_QUESTION).then((id) => runIds.push(id)),
      );
      const cpuMs = await meter.end();
      const stalls = h.stalled ? h.stalled.length - stalledBefore : undefined;
      totalRuns += runsPer[i];
      const row = {
        c,
        runs: runsPer[i],
        runsPerS: r.runsPerS,
        p50: pct(r.latencies, 50),
        p99: pct(r.latencies, 99),
        cpuMsPerRun: cpuMs / Math.max(1, r.latencies.length),
        failures: r.failures,
        stalls,
        stalledIds: h.stalled ? h.stalled.slice(stalledBefore) : [],
      };
      reps.push(row);
      say(
        `  c=${String(c).padStart(2)}${repeats > 1 ? ` (${rep}/${repeats})` : ''}: ${r.latencies.length}/${runsPer[i]} Runs in ${num(r.wallMs / 1000, 1)} s = ${num(r.runsPerS, 2)} Runs/s, p50 ${num(row.p50, 0)} ms, p99 ${num(row.p99, 0)} ms, CPU ${num(row.cpuMsPerRun, 1)} ms/Run${stalls ? `, ${stalls} NOT SETTLED` : ''}${r.failures ? `, ${r.failures} FAILED (${r.errors.join(' | ')})` : ''}`,
      );
      if (h.kindOf) {
        // where the CPU of this level went, per process kind (replicas and backends summed), ms per Run
        const perKind = new Map();
        for (const [pid, ms] of meter.lastByPid) perKind.set(h.kindOf(pid), (perKind.get(h.kindOf(pid)) ?? 0) + ms);
        const parts = [...perKind].sort((x, y) => y[1] - x[1]).map(([k, ms]) => `${k} ${num(ms / Math.max(1, r.latencies.length), 1)}`);
        say(`    CPU ms per Run by process: ${parts.join(', ')}`);
      }
      if (isRunplane(sys) && c === 1 && rep === 1 && runIds.length > 0) {
        // read after the meter stopped: one direct get per event
        const t = await readTimeline(h.log, runIds);
        const timelineFile = join(logDir, `${sys}-c1-timeline.json`);
        writeFileSync(timelineFile, `${JSON.stringify(t, null, 2)}\n`);
        say(
          `    where a c=1 Run's time goes (the server's stored times of ${runIds.length} Runs; median span first to last event ${num(t.spanMs, 1)} ms), largest share first:`,
        );
        const shown = t.rows.slice(0, TIMELINE_ROWS);
        for (const row of shown)
          say(`      ${pct100(row.share)}  ${row.from} -> ${row.to}: ${num(row.perRun, 1)} per Run, median ${num(row.medianMs, 1)} ms`);
        const rest = t.rows.slice(TIMELINE_ROWS);
        if (rest.length > 0)
          say(
            `      ${pct100(rest.reduce((sum, row) => sum + row.share, 0))}  the other ${rest.length} pairs of event types (all of them: ${timelineFile})`,
          );
      }
    }
    out.push(repeats > 1 ? combineRepeats(reps) : reps[0]);
  }
  let eventsPerRun;
  if (isRunplane(sys)) {
    const info = await h.log.jsm.streams.info(h.log.space.stream);
    eventsPerRun = info.state.messages / totalRuns;
    // every Run on the stream: the measured ones, the warm-up ones and the one whose shape was checked
    say(
      `  events per Run: ${num(eventsPerRun, 1)} (${info.state.messages} events / ${totalRuns} Runs, the ${Number(a.warmup)} warm-up Runs and the shape check's one included)`,
    );
  }
  return { levels: out, idleRss, eventsPerRun, includes: h.includes, shape };
}

/** CPU and wall time of raw conditional appends on the same private nats-server, 8 writers in parallel. */
async function rawAppendCost(n) {
  const nc = await connect({
    servers: nats.url.split(','),
    name: 'bench-raw',
    ...natsUserOptions(nats.admin.user, nats.admin.pass),
    ...natsTlsOptions(nats.url, nats.caFile),
  });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const stream = `RPB_RAW_${tag}`;
  await jsm.streams.add({ name: stream, subjects: [`raw${tag}.>`], duplicate_window: 120 * 1e9, allow_direct: true, num_replicas: nats.replicas });
  try {
    const body = JSON.stringify(
      makeEvent(
        'model.turn.requested',
        { runId: 'raw', conversationId: 'c', correlationId: 'm', causationId: null },
        1,
        { turn: 1, model: 'runplane-scripted-research' },
        new Date(),
      ),
    );
    const writers = 8;
    const per = Math.ceil(n / writers);
    // Each writer owns one subject and appends conditionally on its last sequence (as a Runplane owner does).
    const cpuA = process.cpuUsage();
    const serverTicks = async () => (await Promise.all(nats.pids().map((pid) => cpuTicks(pid)))).reduce((x, y) => x + y, 0);
    const sA = await serverTicks();
    const tA = performance.now();
    await Promise.all(
      Array.from({ length: writers }, async (_, w) => {
        let last = 0;
        for (let k = 0; k < per; k++)
          last = (await js.publish(`raw${tag}.own.w${w}`, body, { msgID: randomUUID(), expect: { lastSubjectSequence: last } })).seq;
      }),
    );
    const wallMs = performance.now() - tA;
    const cpu = process.cpuUsage(cpuA);
    const serverMs = (((await serverTicks()) - sA) * 1000) / CLK_TCK;
    const total = per * writers;
    const clientUs = (cpu.user + cpu.system) / total;
    const serverUs = (serverMs * 1000) / total;
    return { appends: total, wallUs: (wallMs * 1000) / (total / writers), clientUs, serverUs, cpuUs: clientUs + serverUs };
  } finally {
    await jsm.streams.delete(stream).catch(() => undefined);
    await nc.close();
  }
}

/** Today's demo workload (SPY/QQQ comparison) on the running Runplane stack. */
async function measureDemo(h) {
  say(`\n== demo workload on Runplane: "${DEMO_QUESTION}" ==`);
  const before = (await h.log.jsm.streams.info(h.log.space.stream)).state.messages;
  const runs = Number(a['demo-runs']);
  const c = Number(a['demo-concurrency']);
  const meter = new CpuMeter(h.pids);
  await meter.begin();
  const r = await drive(c, runs, (k) => h.one(`demo-${tag}-${k}`, DEMO_QUESTION));
  const cpuMs = await meter.end();
  const after = (await h.log.jsm.streams.info(h.log.space.stream)).state.messages;
  const out = {
    runs,
    c,
    runsPerS: r.runsPerS,
    p50: pct(r.latencies, 50),
    p95: pct(r.latencies, 95),
    eventsPerRun: (after - before) / runs,
    cpuMsPerRun: cpuMs / Math.max(1, r.latencies.length),
    failures: r.failures,
  };
  say(
    `  ${r.latencies.length}/${runs} Runs at c=${c}: ${num(out.runsPerS, 2)} Runs/s, admission-to-settlement p50 ${num(out.p50, 0)} ms, p95 ${num(out.p95, 0)} ms, ${num(out.eventsPerRun, 1)} events/Run, CPU ${num(out.cpuMsPerRun, 1)} ms/Run${r.failures ? `, ${r.failures} FAILED (${r.errors.join(' | ')})` : ''}`,
  );
  return out;
}

function printReport() {
  if (!only.has('w1')) return;
  const names = ['runplane', 'runplane-x3', 'dbos', 'restate'].filter((s) => systemsWanted.includes(s));
  const base = results.runplane;
  const rows = [];
  const metric = (title, get, digits) => {
    const cells = [title];
    for (const s of names) {
      const v = results[s]?.skipped && !results[s]?.levels ? undefined : get(results[s]);
      cells.push(num(v, digits));
      if (s !== 'runplane') cells.push(base && !base.skipped ? ratio(v, get(base)) : '');
    }
    rows.push(cells);
  };
  levels.forEach((c, i) => metric(`Runs/s, c=${c}`, (r) => r?.levels?.[i]?.runsPerS, 2));
  levels.forEach((c, i) => metric(`p50 ms start-to-result, c=${c}`, (r) => r?.levels?.[i]?.p50, 0));
  levels.forEach((c, i) => metric(`p99 ms start-to-result, c=${c}`, (r) => r?.levels?.[i]?.p99, 0));
  levels.forEach((c, i) => metric(`CPU ms per Run, c=${c}`, (r) => r?.levels?.[i]?.cpuMsPerRun, 1));
  metric('idle RSS, MiB (own processes)', (r) => (r?.idleRss ? r.idleRss.reduce((s, [, k]) => s + (k ?? 0), 0) / 1024 : undefined), 0);
  metric('events per Run', (r) => r?.eventsPerRun, 1);
  metric('failed Runs (all levels)', (r) => r?.levels?.reduce((s, l) => s + l.failures, 0), 0);
  metric(
    'Runs not settled (stalls, all levels)',
    (r) => (r?.levels?.every((l) => l.stalls !== undefined) ? r.levels.reduce((s, l) => s + l.stalls, 0) : undefined),
    0,
  );
  const header = ['W1 (3 model turns, 2 tool calls)'];
  for (const s of names) header.push(label(s), ...(s !== 'runplane' ? ['vs Runplane'] : []));
  const all = [header, ...rows];
  const widths = header.map((_, j) => Math.max(...all.map((r) => String(r[j] ?? '').length)));
  const line = (r) => '| ' + r.map((c, j) => (j === 0 ? String(c).padEnd(widths[j]) : String(c).padStart(widths[j]))).join(' | ') + ' |';
  say('\n== W1 results ==');
  say(line(header));
  say('|' + widths.map((w, j) => (j === 0 ? '-'.repeat(w + 2) : '-'.repeat(w + 1) + ':')).join('|') + '|');
  for (const r of rows) say(line(r));
  if (repeats > 1) {
    // each figure above is the median of --repeat runs of its level: what each run measured
    const each = (xs, k, digits) => xs.map((x) => num(x[k], digits)).join(', ');
    for (const s of names)
      for (const l of results[s]?.levels ?? [])
        if (l.repeats)
          say(
            `${label(s)} c=${l.c}, ${l.repeats.length} repeats (medians above): Runs/s ${each(l.repeats, 'runsPerS', 2)}; CPU ms per Run ${each(l.repeats, 'cpuMsPerRun', 1)}; p50 ms ${each(l.repeats, 'p50', 0)}`,
          );
  }
  for (const s of names) {
    const r = results[s];
    if (r?.skipped) say(`${label(s)}: ${r.skipped}`);
    else if (r) say(`${label(s)} CPU includes: ${r.includes}`);
  }
  if (base?.idleRss) say(`Runplane idle RSS per process: ${base.idleRss.map(([n, k]) => `${n} ${num(k / 1024, 0)} MiB`).join(', ')}`);
  for (const s of names.filter((x) => isRunplane(x))) {
    const stalled = results[s]?.levels?.flatMap((l) => l.stalledIds ?? []) ?? [];
    if (results[s]?.levels)
      say(
        stalled.length
          ? `STALL: ${label(s)}: ${stalled.length} admitted Run(s) did not settle within 120 s: ${stalled.join(', ')} (their events in ${logDir})`
          : `${label(s)}: every admitted Run settled (no stall)`,
      );
  }
  for (const s of names.filter((x) => x !== 'runplane'))
    if (results[s]?.idleRss)
      say(`${label(s)} idle RSS per process: ${results[s].idleRss.map(([n, k]) => `${n} ${num(k / 1024, 0)} MiB`).join(', ')}`);
  let perEvent = null;
  if (base?.eventsPerRun && raw) {
    const mid = base.levels[Math.min(1, base.levels.length - 1)];
    const perEventUs = (mid.cpuMsPerRun * 1000) / base.eventsPerRun;
    perEvent = { c: mid.c, perEventUs };
    say(
      `Control-plane cost per event (Runplane, c=${mid.c}): ${num(perEventUs, 0)} us CPU per event (all Runplane processes incl. nats-server and PostgreSQL backends, divided by ${num(base.eventsPerRun, 1)} events/Run)`,
    );
    say(
      `Raw conditional JetStream append, same nats-server, same run: ${num(raw.cpuUs, 1)} us CPU per append (client ${num(raw.clientUs, 1)} + server ${num(raw.serverUs, 1)}), ${num(raw.wallUs, 0)} us wall each with 8 writers; Runplane per event = ${ratio(perEventUs, raw.cpuUs)} a raw append`,
    );
  }
  const goals = goalRows({ results, levels, raw, perEvent });
  if (goals) {
    say('\n== W1 against the cost goals of docs/performance.md (ratio = Runplane / the reference) ==');
    say(formatTable(goals.header, goals.rows));
    if (goals.over.length) say(`Services over ${IDLE_RSS_GOAL_MIB} MiB idle: ${goals.over.join(', ')}`);
  }
  if (demo)
    say(
      `Demo workload (SPY/QQQ, Runplane, c=${demo.c}): ${num(demo.runsPerS, 2)} Runs/s, p50 ${num(demo.p50, 0)} ms, p95 ${num(demo.p95, 0)} ms, ${num(demo.eventsPerRun, 1)} events/Run, CPU ${num(demo.cpuMsPerRun, 1)} ms/Run`,
    );
}
