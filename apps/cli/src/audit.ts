/**
 * `runplane audit`: reads Runs from the log (never the projections) and checks the guarantees
 * from their events alone (libs/audit, K11). Reads only: it creates nothing it keeps (the scans'
 * ephemeral consumers go with them) and appends nothing.
 */
import { auditRuns, CHECKS, readForAudit, type AuditReport, type AuditSelection } from '@runplane/audit';
import type { EventLog } from '@runplane/eventlog';

/** What `runplane audit` was asked: the Runs ({@link AuditSelection}) and the output form. */
export interface AuditOptions extends AuditSelection {
  json?: boolean;
}

/** Exit code of `runplane audit` when a check is broken (0: every check held; 1: the audit could not run). */
export const AUDIT_BROKEN_EXIT = 2;

/**
 * Reads what `opts` names from `log` ({@link readForAudit}), audits it ({@link auditRuns}) and
 * writes the report with `write` (text lines, or one JSON document with `json`).
 * @returns 0 when every check held on every audited Run, {@link AUDIT_BROKEN_EXIT} otherwise.
 * @throws Error with a readable reason on bad options or a Run not in the log.
 */
export async function auditLog(log: EventLog, opts: AuditOptions, write: (line: string) => void): Promise<number> {
  const report = auditRuns(await readForAudit(log, opts));
  if (opts.json) write(JSON.stringify(report));
  else for (const line of renderAudit(report)) write(line);
  return report.summary.broken === 0 ? 0 : AUDIT_BROKEN_EXIT;
}

/** The text report: one line per Run (its outcome, events and checks), each broken check's violations under it, and a summary per check. */
export function renderAudit(report: AuditReport): string[] {
  const lines: string[] = [];
  for (const run of report.runs) {
    const held = run.checks.filter((c) => c.status === 'held').length;
    const broken = run.checks.filter((c) => c.status === 'broken');
    lines.push(
      `${run.clean ? 'ok    ' : 'BROKEN'} run ${run.runId} (${run.outcome ?? 'not settled'}, ${run.events} events): ${held} held, ${broken.length} broken, ${run.checks.length - held - broken.length} not applicable`,
    );
    for (const c of broken)
      for (const v of c.violations) lines.push(`         ${c.contract} ${c.id}${v.seq === null ? '' : ` at #${v.seq}`}: ${v.message}`);
  }
  const s = report.summary;
  lines.push('');
  lines.push(
    `audited ${s.runs} run(s), ${s.events} event(s): ${s.clean} clean, ${s.broken} broken, ${s.open} not settled; ${s.anomalies} unverified message(s)`,
  );
  for (const c of CHECKS) {
    const r = s.checks[c.id];
    lines.push(
      `  ${c.contract.padEnd(3)} ${c.id.padEnd(22)} ran on ${String(r.ran).padStart(5)}, broken on ${String(r.broken).padStart(5)}: ${c.title}`,
    );
  }
  return lines;
}
