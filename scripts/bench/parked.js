// The parked-Runs mode of the bench (`--only parked`): N Runs that each park on a question for a
// human (`ask_human`, K10: `wait.opened`, the lease released `parked`), and the RSS of the runtime
// (and of every service) before and after (the parked-Runs goal: the runtime grows by at most 50 MiB for
// 10,000 parked Runs).
import { mkdirSync, readdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { num } from './stats.js';

/** Goal: the runtime's RSS grows by at most this much with the parked Runs (docs/performance.md "Parked Runs", for 10,000), MiB. */
export const PARKED_GROWTH_GOAL_MIB = 50;
/** The Runs' deadline and wait life in the parked mode, s: long enough that none expires while the bench counts. */
export const PARKED_DEADLINE_S = 4 * 3600;

const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/**
 * The scripted model's scenario for the parked Runs: every request whose user message contains
 * `key` is answered with one `ask_human` call (`then: repeat-last`), so each Run's first turn parks.
 */
export function parkScenario() {
  return {
    steps: [{ reply: { content: '', toolCalls: [{ name: 'ask_human', arguments: { question: 'Which share class do you mean?' } }] } }],
    then: 'repeat-last',
  };
}

/**
 * Admits `n` Runs that park, and measures RSS before and after.
 * @param {object} o
 * @param {object} o.h a Runplane handle (scripts/bench/systems.js) started with the parked deadline
 * @param {string} o.modelUrl the scripted model's `/v1` URL (its admin API binds the scenario)
 * @param {string} o.tag the handle's subject prefix
 * @param {number} o.n Runs to park
 * @param {number} o.concurrency Runs admitted but not yet parked at once (each worker admits a Run,
 *   waits for its `wait.opened`, at most `stallS`, then admits the next)
 * @param {number} [o.capS] no admission starts after this many seconds, and the wait for the parks ends at twice
 *   it (the Runs parked by then are measured)
 * @param {number} o.quietS seconds without a new event in the stream before "after" is sampled
 * @param {number} [o.idleS] seconds after "after" before "idle" is sampled (default 60): what the
 *   processes hold with the Runs parked once the admission burst's garbage is collected and given
 *   back; the goal is judged on it (both are printed)
 * @param {number} o.stallS give up when no Run parks for this long
 * @param {string|null} [o.heapDir] when set (`--parked-heap`, the services started with
 *   `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=<heapDir>`), the runtime and recovery each write a
 *   heap snapshot there before and after the parks (compare them with `node scripts/bench/heap-diff.js`)
 * @param {(s?: string) => void} o.say printer
 * @param {string} o.outFile JSON written there
 * @returns {{ n, parked, settled, admitS, parkS, before, after, runtimeGrowthMiB, goalMet }}
 */
export async function runParked({
  h,
  modelUrl,
  tag,
  n,
  concurrency,
  capS = Infinity,
  quietS = 5,
  idleS = 60,
  stallS = 120,
  heapDir = null,
  say,
  outFile,
}) {
  const key = `park-${tag}`;
  const admin = modelUrl.replace(/\/v1$/, '/_scripted');
  const bind = await fetch(`${admin}/scenario?key=${encodeURIComponent(key)}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(parkScenario()),
  });
  if (!bind.ok) throw new Error(`binding the parking scenario answered ${bind.status}: ${await bind.text()}`);

  // wait.opened on the runtime subjects, settlements on the lifecycle subjects (none expected).
  const parkedRuns = new Set();
  const parkWaiters = new Map(); // runId -> resolve, for the admissions waiting for their Run to park
  /** Resolves when `runId` has parked, or after `ms` (false). */
  const parkedWithin = (runId, ms) =>
    new Promise((resolve) => {
      if (parkedRuns.has(runId)) return resolve(true);
      const t = setTimeout(() => {
        parkWaiters.delete(runId);
        resolve(false);
      }, ms);
      parkWaiters.set(runId, () => {
        clearTimeout(t);
        parkWaiters.delete(runId);
        resolve(true);
      });
    });
  const settledRuns = new Map();
  const sub = h.log.nc.subscribe(`${tag}.run.*.*.*`, {
    callback: (_e, msg) => {
      if (!msg) return;
      const [, , runId, owner] = msg.subject.split('.');
      if (owner !== 'runtime' && owner !== 'lifecycle') return;
      let ev;
      try {
        ev = JSON.parse(msg.string());
      } catch {
        return;
      }
      if (ev?.type === 'wait.opened') {
        parkedRuns.add(runId);
        parkWaiters.get(runId)?.();
      } else if (ev?.type === 'run.settled') settledRuns.set(runId, ev.data?.outcome);
    },
  });
  await h.log.nc.flush();
  const rssMiB = async () => Object.fromEntries((await h.idleRss()).map(([name, k]) => [name, k === null ? null : k / 1024]));
  /**
   * Each service's V8 heap from its `GET /metrics` (prom-client's `nodejs_heap_size_used_bytes` and
   * `nodejs_heap_size_total_bytes`), MiB: what is live against what the process keeps for it, so an
   * RSS growth can be told apart from objects kept per parked Run. Null for a service that did not answer.
   */
  const heapMiB = async () => {
    const out = {};
    for (const [name, ps] of h.stack.replicas) {
      try {
        const text = await (await fetch(`${ps[0].url}/metrics`, { signal: globalThis.AbortSignal.timeout(5_000) })).text();
        const gauge = (metric) => Number(new RegExp(`^${metric}\\{[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN) / 1048576;
        out[name] = { used: gauge('nodejs_heap_size_used_bytes'), total: gauge('nodejs_heap_size_total_bytes') };
      } catch {
        out[name] = null;
      }
    }
    return out;
  };
  const heapLine = (heap) =>
    Object.entries(heap)
      .map(([k, v]) => `${k} ${v ? `${num(v.used, 0)}/${num(v.total, 0)}` : '?'}`)
      .join(', ');
  /** Has the runtime and recovery each write a heap snapshot into heapDir, named `<label>-<service>.heapsnapshot`. */
  const snapshots = async (label) => {
    if (!heapDir) return;
    mkdirSync(heapDir, { recursive: true });
    for (const [name, ps] of h.stack.replicas) {
      if (name !== 'runtime' && name !== 'recovery') continue;
      const pid = ps[0].child.pid;
      const known = new Set(readdirSync(heapDir));
      process.kill(pid, 'SIGUSR2');
      // V8 writes Heap.<date>.<pid>.<seq>.heapsnapshot; done when its size stops changing
      let file = null;
      for (let last = -1, t = Date.now(); Date.now() - t < 300_000; await sleep(1000)) {
        file ??= readdirSync(heapDir).find((f) => !known.has(f) && f.includes(`.${pid}.`) && f.endsWith('.heapsnapshot')) ?? null;
        if (!file) continue;
        const size = statSync(join(heapDir, file)).size;
        if (size > 0 && size === last) break;
        last = size;
      }
      if (!file) throw new Error(`${name} (pid ${pid}) wrote no heap snapshot into ${heapDir}`);
      renameSync(join(heapDir, file), join(heapDir, `${label}-${name}.heapsnapshot`));
      say(`  heap snapshot: ${join(heapDir, `${label}-${name}.heapsnapshot`)}`);
    }
  };
  const streamMessages = async () => (await h.log.jsm.streams.info(h.log.space.stream)).state.messages;

  try {
    await snapshots('before');
    const before = await rssMiB();
    const heapBefore = await heapMiB();
    const eventsBefore = await streamMessages();
    say(
      `  RSS before: ${Object.entries(before)
        .map(([k, v]) => `${k} ${num(v, 0)}`)
        .join(', ')} MiB`,
    );
    const runIds = [];
    const errors = [];
    let next = 0;
    let notParkedInTime = 0;
    const t0 = performance.now();
    let admittedAt = null;
    let lastReport = t0;
    const progress = () => {
      const now = performance.now();
      if (now - lastReport < 15_000) return;
      lastReport = now;
      say(`  ${num((now - t0) / 1000, 0)} s: ${runIds.length}/${n} admitted, ${parkedRuns.size} parked`);
    };
    const admitting = (async () => {
      await Promise.all(
        Array.from({ length: Math.min(concurrency, n) }, async () => {
          while (next < n && performance.now() - t0 < capS * 1000) {
            const i = next++;
            try {
              const runId = await h.admit(`${key}-${i}`, `[${key}] Which DIA share class? (${i})`);
              runIds.push(runId);
              // Closed loop on parking, not on admission: admitting faster than the runtime parks
              // only builds a backlog (its redeliveries then slow it down further).
              if (!(await parkedWithin(runId, stallS * 1000))) notParkedInTime++;
            } catch (e) {
              if (errors.length < 5) errors.push(String(e?.message ?? e).slice(0, 200));
              errors.count = (errors.count ?? 0) + 1;
            }
            progress();
          }
        }),
      );
      admittedAt = performance.now();
    })();
    // Wait until every admitted Run has parked (or none parks for stallS).
    let lastCount = -1;
    let lastChange = performance.now();
    for (;;) {
      await sleep(500);
      progress();
      if (parkedRuns.size !== lastCount) {
        lastCount = parkedRuns.size;
        lastChange = performance.now();
      }
      if (admittedAt !== null && parkedRuns.size + settledRuns.size >= runIds.length) break;
      if (performance.now() - t0 > 2 * capS * 1000) {
        say(`  ${2 * capS} s (twice the cap) passed: measuring with ${parkedRuns.size} of ${runIds.length} admitted parked`);
        break;
      }
      if (performance.now() - lastChange > stallS * 1000) {
        say(`  no Run parked for ${stallS} s: giving up waiting (${parkedRuns.size} of ${runIds.length} admitted parked)`);
        break;
      }
    }
    await admitting;
    const parkedAt = performance.now();
    // Quiet: the stream stops growing (lease releases, projections of the parks, recovery's bookkeeping).
    let count = await streamMessages();
    for (let still = 0; still < quietS;) {
      await sleep(1000);
      const c = await streamMessages();
      still = c === count ? still + 1 : 0;
      count = c;
    }
    const after = await rssMiB();
    const heapAfter = await heapMiB();
    say(`  ${idleS} s idle before the last sample...`);
    await sleep(idleS * 1000);
    const idle = await rssMiB();
    const heapIdle = await heapMiB();
    await snapshots('after');
    const admitS = ((admittedAt ?? parkedAt) - t0) / 1000;
    const parkS = (parkedAt - t0) / 1000;
    const growth = (idle.runtime ?? NaN) - (before.runtime ?? NaN);
    const growthAtQuiet = (after.runtime ?? NaN) - (before.runtime ?? NaN);
    const scaled = (growth * 10_000) / Math.max(1, parkedRuns.size);
    const out = {
      n,
      concurrency,
      admitted: runIds.length,
      cappedAtS: runIds.length + (errors.count ?? 0) < n ? capS : null,
      admissionErrors: errors.count ?? 0,
      notParkedWithinStallS: notParkedInTime,
      parked: parkedRuns.size,
      settled: settledRuns.size,
      settledOutcomes: [...settledRuns.values()].reduce((m, o) => ({ ...m, [o]: (m[o] ?? 0) + 1 }), {}),
      admitS,
      parkS,
      eventsPerParkedRun: (count - eventsBefore) / Math.max(1, runIds.length),
      before,
      after,
      idle,
      idleS,
      heapBefore,
      heapAfter,
      heapIdle,
      runtimeGrowthAtQuietMiB: growthAtQuiet,
      runtimeGrowthMiB: growth,
      runtimeGrowthPer10kMiB: scaled,
      goalMet: parkedRuns.size >= 10_000 ? growth <= PARKED_GROWTH_GOAL_MIB : null,
    };
    say(
      `  ${out.admitted}/${n} admitted${out.cappedAtS !== null ? ` (admissions stopped at the ${capS} s cap)` : ''} in ${num(admitS, 1)} s (${num(out.admitted / admitS, 1)} Runs/s, at most ${concurrency} admitted and not yet parked${out.notParkedWithinStallS ? `; ${out.notParkedWithinStallS} not parked within ${stallS} s of admission` : ''}${out.admissionErrors ? `, ${out.admissionErrors} admissions FAILED: ${errors.join(' | ')}` : ''}), ${out.parked} parked after ${num(parkS, 1)} s, ${out.settled} settled${out.settled ? ` (${JSON.stringify(out.settledOutcomes)})` : ''}; ${num(out.eventsPerParkedRun, 1)} events per parked Run`,
    );
    say(
      `  RSS after:  ${Object.entries(after)
        .map(([k, v]) => `${k} ${num(v, 0)}`)
        .join(', ')} MiB`,
    );
    say(
      `  RSS idle:   ${Object.entries(idle)
        .map(([k, v]) => `${k} ${num(v, 0)}`)
        .join(', ')} MiB (${idleS} s later)`,
    );
    say(`  V8 heap used/total before: ${heapLine(heapBefore)} MiB`);
    say(`  V8 heap used/total after:  ${heapLine(heapAfter)} MiB`);
    say(`  V8 heap used/total idle:   ${heapLine(heapIdle)} MiB`);
    for (const [label, at] of [
      ['change after', after],
      ['change idle', idle],
    ])
      say(
        `  ${label.padEnd(12)} ${Object.keys(at)
          .map((k) => `${k} ${(at[k] - before[k] >= 0 ? '+' : '') + num(at[k] - before[k], 0)}`)
          .join(', ')} MiB`,
      );
    say(
      `  runtime RSS ${num(before.runtime, 0)} -> ${num(idle.runtime, 0)} MiB (${idleS} s idle after the parks; ${growthAtQuiet >= 0 ? '+' : ''}${num(growthAtQuiet, 1)} at ${quietS} s): ${growth >= 0 ? '+' : ''}${num(growth, 1)} MiB for ${out.parked} parked Runs${out.parked >= 1000 ? ` (${num(scaled, 0)} MiB per 10,000 if linear)` : ''}; goal <= +${PARKED_GROWTH_GOAL_MIB} MiB for 10,000: ${out.goalMet === null ? `not judged (fewer than 10,000 parked${out.parked >= 1000 ? `; ${scaled <= PARKED_GROWTH_GOAL_MIB ? 'within it' : 'over it'} if linear` : ''})` : out.goalMet ? 'met' : 'NOT met'}`,
    );
    writeFileSync(outFile, JSON.stringify(out, null, 1));
    say(`  written to ${outFile}`);
    return out;
  } finally {
    sub.unsubscribe();
    await fetch(`${admin}/scenario?key=${encodeURIComponent(key)}`, { method: 'POST', body: '' }).catch(() => undefined);
  }
}
