// Where a Runplane Run's time goes, read from the log alone (the bench prints it after W1 at c=1).

import { pct } from './stats.js';

/**
 * A stored message's time in ms since the epoch, to the microsecond: the server's RFC 3339
 * timestamp (nanoseconds), which `Date` would cut to the millisecond.
 * @param {string} timestamp e.g. `2026-12-07T03:35:12.123456789Z`
 */
export function storedMs(timestamp) {
  const m = /^(.*?)(?:\.(\d+))?Z$/.exec(timestamp);
  if (!m) return Date.parse(timestamp);
  const fraction = (m[2] ?? '').padEnd(6, '0').slice(0, 6);
  return Date.parse(`${m[1]}Z`) + Number(fraction) / 1000;
}

/**
 * The gaps between consecutive events of each Run (stream order, the server's stored times), by
 * the pair of event types: at c=1 nothing else runs, so a gap is one hop's latency (the delivery to
 * the owner that reacts, its decision and its append, or a model request, a tool execution, a
 * paragraph streamed). Pure.
 * @param {{ type: string, ms: number }[][]} runs each Run's events in stream order, with stored times in ms.
 * @returns {{ spanMs: number, rows: { from: string, to: string, perRun: number, medianMs: number, share: number }[] }}
 *   the median span (first to last event) and, per pair of types, how often it occurs per Run, its
 *   median gap (ms) and its share of all the Runs' spans summed; largest share first.
 */
export function timelineOf(runs) {
  const gaps = new Map();
  let spans = 0;
  for (const events of runs) {
    for (let k = 1; k < events.length; k++) {
      const key = `${events[k - 1].type} -> ${events[k].type}`;
      const list = gaps.get(key) ?? [];
      list.push(events[k].ms - events[k - 1].ms);
      gaps.set(key, list);
    }
    if (events.length > 1) spans += events[events.length - 1].ms - events[0].ms;
  }
  const rows = [...gaps].map(([key, list]) => {
    const [from, to] = key.split(' -> ');
    const sum = list.reduce((s, x) => s + x, 0);
    return { from, to, perRun: list.length / Math.max(1, runs.length), medianMs: pct(list, 50), share: spans > 0 ? sum / spans : 0 };
  });
  rows.sort((a, b) => b.share - a.share);
  const spanList = runs.filter((e) => e.length > 1).map((e) => e[e.length - 1].ms - e[0].ms);
  return { spanMs: pct(spanList, 50), rows };
}

/**
 * Reads `runIds` from the log with each event's stored time (one direct get per event: call it
 * outside a measured window) and returns {@link timelineOf} them.
 * @param {import('@runplane/eventlog').EventLog} log
 * @param {string[]} runIds
 */
export async function readTimeline(log, runIds) {
  const runs = [];
  for (const runId of runIds) {
    const events = await log.readRun(runId);
    const timed = [];
    for (const e of events) {
      const m = await log.jsm.streams.getMessage(log.space.stream, { seq: e.seq });
      if (m) timed.push({ type: e.event.type, ms: storedMs(m.timestamp) });
    }
    runs.push(timed);
  }
  return timelineOf(runs);
}
