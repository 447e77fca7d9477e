// The soak mode of the bench (`--only soak`): W1 Runs on Runplane at a steady open-loop rate for a
// number of minutes, sampled once a minute (RSS of every service process and the nats-server,
// admission-to-settlement latency of the Runs settled that minute, consumer lag), then the first
// minutes after warm-up side by side with the last ones (docs/performance.md "Soak": flat within ±20 %).
import { writeFileSync } from 'node:fs';
import { CONSUMING_SERVICES, durableNamesOf } from '@runplane/eventlog';
import { formatTable } from './goals.js';
import { num, pct } from './stats.js';

/** The largest change (either way) between the first and the last window that still counts as flat, %. */
export const FLAT_PCT = 20;
/** Consumer lag below this many messages in both windows counts as flat whatever its change (a few in flight is noise). */
export const LAG_NOISE_FLOOR = 10;

const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/**
 * The windows compared: minute 1 is warm-up; `w = min(5, floor(minutes / 2))` minutes from minute 2
 * on, and the last `w` minutes. With 2 or 3 minutes they are one minute each (and with 2 the same
 * one: the output says so).
 * @param {number} minutes whole minutes sampled (>= 1)
 * @returns {{ w: number, first: number[], last: number[] }} 1-based minute numbers
 */
export function soakWindows(minutes) {
  const w = Math.max(1, Math.min(5, Math.floor(minutes / 2)));
  const from = Math.min(2, minutes);
  const first = Array.from({ length: w }, (_, i) => Math.min(minutes, from + i));
  const last = Array.from({ length: w }, (_, i) => minutes - w + 1 + i);
  return { w, first: [...new Set(first)], last };
}

/** Sum of num_pending + num_ack_pending over each consuming service's durable consumers (one per partition). */
async function consumerLag(log) {
  const out = {};
  for (const service of CONSUMING_SERVICES) {
    let pending = 0;
    let ackPending = 0;
    let missing = 0;
    const infos = await Promise.all(
      durableNamesOf(log.space, service).map((name) => log.jsm.consumers.info(log.space.stream, name).catch(() => null)),
    );
    for (const info of infos) {
      if (!info) {
        missing++;
        continue;
      }
      pending += info.num_pending;
      ackPending += info.num_ack_pending;
    }
    out[service] = { pending, ackPending, lag: pending + ackPending, ...(missing ? { missingConsumers: missing } : {}) };
  }
  return out;
}

/** [name, KiB][] as { name: MiB }, repeated names numbered (`tools#2`). */
function rssMap(list) {
  const out = {};
  for (const [name, k] of list) {
    let key = name;
    for (let i = 2; key in out; i++) key = `${name}#${i}`;
    out[key] = k === null || k === undefined ? null : k / 1024;
  }
  return out;
}

/** Mean of the finite numbers in `xs`, or NaN. */
const mean = (xs) => {
  const f = xs.filter((x) => Number.isFinite(x));
  return f.length ? f.reduce((a, b) => a + b, 0) / f.length : NaN;
};

/**
 * Runs the soak on a started Runplane handle (scripts/bench/systems.js `startRunplane`).
 * @param {object} o
 * @param {object} o.h the Runplane handle (`one`, `idleRss`, `log`, `stalled`)
 * @param {number} o.minutes whole minutes to sample (>= 1)
 * @param {number} o.rate Runs started per second (open loop: started on schedule whether or not earlier ones settled)
 * @param {string} o.question the W1 question
 * @param {string} o.idPrefix clientMessageId / conversation prefix
 * @param {(s?: string) => void} o.say printer
 * @param {string} o.samplesFile where the samples are written as JSON
 * @param {number} [o.minuteMs] length of a sampling "minute" (60,000; smaller only for trying the code)
 * @returns the summary written to `samplesFile`: `{ samples, windows, comparison, goalMet, totals }`
 */
export async function runSoak({ h, minutes, rate, question, idPrefix, say, samplesFile, minuteMs = 60_000 }) {
  if (!Number.isInteger(minutes) || minutes < 1) throw new Error(`--minutes must be a whole number >= 1, not ${minutes}`);
  if (!(rate > 0)) throw new Error(`--rate must be > 0 Runs/s, not ${rate}`);
  const settledRuns = []; // { at, ms, ok, error? } by settle time
  const inflight = new Set();
  let started = 0;
  const t0 = performance.now();
  const endAt = t0 + minutes * minuteMs;
  const wallStart = new Date();

  const starter = (async () => {
    for (let k = 0; ; k++) {
      const due = t0 + (k * 1000) / rate;
      if (due >= endAt) break;
      await sleep(due - performance.now());
      const s = performance.now();
      started++;
      const p = h.one(`${idPrefix}-${k}`, question).then(
        () => settledRuns.push({ at: performance.now(), ms: performance.now() - s, ok: true }),
        (e) => settledRuns.push({ at: performance.now(), ms: performance.now() - s, ok: false, error: String(e?.message ?? e).slice(0, 300) }),
      );
      inflight.add(p);
      void p.finally(() => inflight.delete(p));
    }
  })();

  const samples = [];
  let header = [];
  say(`  ${minutes} minute(s) at ${rate} Runs/s (open loop), one sample a minute:`);
  for (let m = 1; m <= minutes; m++) {
    await sleep(t0 + m * minuteMs - performance.now());
    const lo = t0 + (m - 1) * minuteMs;
    const hi = t0 + m * minuteMs;
    const those = settledRuns.filter((r) => r.at >= lo && r.at < hi);
    const ok = those.filter((r) => r.ok).map((r) => r.ms);
    const rss = rssMap(await h.idleRss());
    const lag = await consumerLag(h.log);
    const sample = {
      minute: m,
      at: new Date().toISOString(),
      started,
      settledThisMinute: ok.length,
      failedThisMinute: those.length - ok.length,
      inFlight: inflight.size,
      p50Ms: pct(ok, 50),
      p99Ms: pct(ok, 99),
      rssMiB: rss,
      lag,
      lagTotal: Object.values(lag).reduce((s, x) => s + x.lag, 0),
      latenciesMs: ok.map((x) => Math.round(x)),
      errors: those.filter((r) => !r.ok).map((r) => r.error),
    };
    samples.push(sample);
    if (m === 1) {
      header = ['min', 'started', 'settled', 'failed', 'in flight', 'p50 ms', 'p99 ms', 'lag', ...Object.keys(rss).map((n) => `${n} MiB`)];
      say(`  | ${header.join(' | ')} |`);
    }
    say(
      `  | ${[
        m,
        started,
        sample.settledThisMinute,
        sample.failedThisMinute,
        sample.inFlight,
        num(sample.p50Ms, 0),
        num(sample.p99Ms, 0),
        sample.lagTotal,
        ...Object.values(rss).map((x) => num(x, 0)),
      ]
        .map((c, j) => String(c).padStart(header[j]?.length ?? 0))
        .join(' | ')} |${sample.errors.length ? `  (failed: ${sample.errors.slice(0, 2).join(' | ')})` : ''}`,
    );
  }
  await starter;
  const drainStart = performance.now();
  await Promise.allSettled([...inflight]);
  const drainS = (performance.now() - drainStart) / 1000;

  // First and last windows side by side.
  const { first, last } = soakWindows(minutes);
  const pick = (ms) => samples.filter((s) => ms.includes(s.minute));
  const fw = pick(first);
  const lw = pick(last);
  const rows = [];
  const compare = (figure, a, b, isLag = false) => {
    const change = Number.isFinite(a) && Number.isFinite(b) && a !== 0 ? ((b - a) / a) * 100 : NaN;
    let flat;
    if (isLag && Number.isFinite(a) && Number.isFinite(b) && a < LAG_NOISE_FLOOR && b < LAG_NOISE_FLOOR) flat = true;
    else if (Number.isFinite(change)) flat = Math.abs(change) <= FLAT_PCT;
    else flat = a === 0 && b === 0 ? true : null;
    rows.push({ figure, first: a, last: b, changePct: change, flat });
  };
  const procs = Object.keys(samples[0]?.rssMiB ?? {});
  for (const n of procs) compare(`RSS ${n}, MiB`, mean(fw.map((s) => s.rssMiB[n])), mean(lw.map((s) => s.rssMiB[n])));
  const lat = (ws) => ws.flatMap((s) => s.latenciesMs);
  compare('p50 ms admission-to-settlement', pct(lat(fw), 50), pct(lat(lw), 50));
  compare('p99 ms admission-to-settlement', pct(lat(fw), 99), pct(lat(lw), 99));
  compare('Runs settled per minute', mean(fw.map((s) => s.settledThisMinute)), mean(lw.map((s) => s.settledThisMinute)));
  compare('consumer lag, messages (all services)', mean(fw.map((s) => s.lagTotal)), mean(lw.map((s) => s.lagTotal)), true);
  for (const service of Object.keys(samples[0]?.lag ?? {}))
    compare(`  lag ${service}`, mean(fw.map((s) => s.lag[service].lag)), mean(lw.map((s) => s.lag[service].lag)), true);

  const span = (ms) => (ms.length === 1 ? `min ${ms[0]}` : `min ${ms[0]}-${ms[ms.length - 1]}`);
  const digits = (f) => (f.startsWith('RSS') || f.startsWith('p') ? 0 : 1);
  say(
    `\n  first ${first.length} minute(s) after warm-up (minute 1 skipped) against the last ${last.length}${first.some((m) => last.includes(m)) ? ' (the windows overlap: too few minutes to tell)' : ''}; flat = within ±${FLAT_PCT} % (lag: also flat when under ${LAG_NOISE_FLOOR} messages in both):`,
  );
  say(
    formatTable(
      ['soak figure', `first (${span(first)})`, `last (${span(last)})`, 'change', 'verdict'],
      rows.map((r) => [
        r.figure,
        num(r.first, digits(r.figure)),
        num(r.last, digits(r.figure)),
        Number.isFinite(r.changePct) ? `${r.changePct >= 0 ? '+' : ''}${r.changePct.toFixed(1)} %` : 'n/a',
        r.flat === null ? 'n/a' : r.flat ? 'flat' : 'NOT FLAT',
      ]),
    ),
  );
  const goalFigures = rows.filter((r) => (r.figure.startsWith('RSS') && !r.figure.startsWith('RSS nats-server')) || r.figure.startsWith('p50'));
  const notFlat = goalFigures.filter((r) => r.flat !== true).map((r) => r.figure);
  const goalMet = notFlat.length === 0;
  const totals = {
    started,
    settledOk: settledRuns.filter((r) => r.ok).length,
    failed: settledRuns.filter((r) => !r.ok).length,
    stalled: h.stalled?.length ?? 0,
    drainS,
  };
  say(
    `  soak goal (RSS of every service and p50 flat, last ${last.length} within ±${FLAT_PCT} % of the first ${first.length}): ${goalMet ? 'met' : `NOT met (${notFlat.join(', ')})`}`,
  );
  say(
    `  ${totals.started} Runs started, ${totals.settledOk} completed, ${totals.failed} failed or not settled (${totals.stalled} not settled within 120 s); the last ones settled ${num(drainS, 1)} s after the last minute`,
  );
  const summary = {
    rate,
    minutes,
    minuteMs,
    startedAt: wallStart.toISOString(),
    windows: { first, last },
    comparison: rows,
    goalMet,
    notFlat,
    totals,
    samples,
  };
  writeFileSync(samplesFile, JSON.stringify(summary, null, 1));
  say(`  samples written to ${samplesFile}`);
  return summary;
}
