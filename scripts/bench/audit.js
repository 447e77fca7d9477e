// Audit cost: `auditRuns` (libs/audit, what `runplane audit --all` runs after reading the log) over
// N Runs of 30 events each (the read-cost Run: 4 tool rounds, an answer in 4 passages, a
// settlement), all held in memory at once as the CLI holds them. Measures the checks only: the
// events are built in this process (one Run built with the event factory, the others cloned with
// their own ids), not read from a stream; reading the whole stream is the read side's cost
// (read-cost measures one Run's read). Reports wall time, µs per Run and per event, and the heap.
import { auditRuns } from '@runplane/audit';
import { thirtyEventRun } from './read-cost.js';

/**
 * Builds `runs` Runs (30 events each, one stream-wide sequence), audits them all in one call and
 * checks the report is clean.
 * @returns { runs, events, buildS, auditS, usPerRun, usPerEvent, heapMiB, rssMiB, clean }
 */
export function measureAudit(runs) {
  const t0 = process.hrtime.bigint();
  const template = JSON.stringify(thirtyEventRun('RUNID'));
  const byRun = new Map();
  let seq = 0;
  for (let i = 0; i < runs; i++) {
    const runId = `run-${i.toString(36)}`;
    const events = JSON.parse(template.replaceAll('RUNID', runId));
    const stored = [];
    for (const event of events) {
      seq += 1;
      stored.push({ seq, subject: `rp.run.${runId}.${event.owner}.0`, event });
    }
    byRun.set(runId, stored);
  }
  const t1 = process.hrtime.bigint();
  const report = auditRuns({ runs: byRun });
  const t2 = process.hrtime.bigint();
  const auditS = Number(t2 - t1) / 1e9;
  const mem = process.memoryUsage();
  return {
    runs,
    events: seq,
    buildS: Number(t1 - t0) / 1e9,
    auditS,
    usPerRun: (auditS * 1e6) / runs,
    usPerEvent: (auditS * 1e6) / seq,
    heapMiB: mem.heapUsed / 2 ** 20,
    rssMiB: mem.rss / 2 ** 20,
    clean: report.summary.clean === runs && report.summary.broken === 0,
  };
}
