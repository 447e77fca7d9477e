/**
 * `runplane audit`: reads Runs from the log (never the projections) and checks the guarantees
 * from their events alone (libs/audit, K11). Reads only: direct gets (batched for a scan), no
 * consumer; it creates and appends nothing.
 */
import { auditRuns, CHECKS, readForAudit, type AuditInput, type AuditReport, type AuditSelection } from '@runplane/audit';
import type { StoredEvent } from '@runplane/contracts';
import type { EventLog } from '@runplane/eventlog';
import type { ReplayableLog } from '@runplane/projections';
import { AUDIT_BROKEN_EXIT } from './render.js';
import { stoppable } from './commands.js';

/** The check of an audit's selection, before anything connects (libs/audit). */
export { checkAuditSelection } from '@runplane/audit';

/** What `runplane audit` was asked: the Runs ({@link AuditSelection}) and the output form. */
export interface AuditOptions extends AuditSelection {
  json?: boolean;
  /**
   * Also replay the audited Runs into a fresh database, compare their projection rows with the
   * live database at this URL (K11: rebuilt projections come out identical) and drop the fresh
   * database again: with `all` (no `since`) the whole log and every row; with `run` (or `since`)
   * the audited Runs' events and rows only. A difference counts as a broken audit.
   */
  projectionsUrl?: string;
}

/** The projection comparison of an audit (`--projections`): identical, or the differing rows. */
export interface ProjectionCheck {
  database: string;
  eventsApplied: number;
  identical: boolean;
  differences: string[];
}

/**
 * Whether the audit checked events' signatures: with the deployment's public keys
 * (`RUNPLANE_SIGNING_PUBLIC_KEYS_FILE`) every event must carry a valid signature of its type's
 * owner, and one that does not (unsigned, a bad signature, the wrong signer) is a violation of
 * `stored-verified` like any message the log did not append.
 */
export interface SignatureCheck {
  checked: boolean;
  /** Public keys held (every owner's), when checked. */
  keys?: number;
}

/**
 * Reads what `opts` names from `log` ({@link readForAudit}), audits it ({@link auditRuns}) and
 * writes the report with `write` (text lines, or one JSON document with `json`).
 * @returns 0 when every check held on every audited Run, {@link AUDIT_BROKEN_EXIT} otherwise.
 * @throws Error with a readable reason on bad options or a Run not in the log; `hooks.onNoRun()`
 *   when it finds no Run to audit (the caller says what that means, e.g. the wrong server).
 */
export async function auditLog(
  log: EventLog,
  opts: AuditOptions,
  write: (line: string) => void,
  hooks: { onNoRun?: () => Error } = {},
): Promise<number> {
  const input = await readForAudit(log, opts);
  const report = auditRuns(input);
  if (report.summary.runs === 0 && hooks.onNoRun) throw hooks.onNoRun();
  const signatures: SignatureCheck = log.signatures ? { checked: true, keys: log.signatures.keyCount } : { checked: false };
  const projections = opts.projectionsUrl
    ? await compareProjections(opts.all && opts.since === undefined ? { log } : auditedOnly(input), opts.projectionsUrl)
    : null;
  if (opts.json) write(JSON.stringify({ ...report, signatures, ...(projections ? { projections } : {}) }));
  else {
    for (const line of renderAudit(report)) write(line);
    write(
      signatures.checked
        ? `signatures: every event checked against ${signatures.keys} public key(s) (RUNPLANE_SIGNING_PUBLIC_KEYS_FILE): an unsigned, badly signed or wrongly signed event is an unverified message`
        : 'signatures: not checked (RUNPLANE_SIGNING_PUBLIC_KEYS_FILE is not set)',
    );
    if (projections) {
      write(
        projections.identical
          ? `projections: rebuilt from ${projections.eventsApplied} event(s), identical to the live ones`
          : `projections: rebuilt from ${projections.eventsApplied} event(s), ${projections.differences.length} difference(s) from the live ones:`,
      );
      for (const d of projections.differences.slice(0, 50)) write(`  ${d}`);
    }
  }
  return report.clean && (projections?.identical ?? true) ? 0 : AUDIT_BROKEN_EXIT;
}

/** The audited Runs' events as read for the audit, in stream order, to replay those Runs alone (their rows only are compared). */
function auditedOnly(input: AuditInput): { log: ReplayableLog; runIds: ReadonlySet<string> } {
  const runIds = new Set(input.audited ?? input.runs.keys());
  const events = [...runIds].flatMap((id) => input.runs.get(id) ?? []).sort((a, b) => a.seq - b.seq);
  return {
    runIds,
    log: {
      async *readAll(): AsyncIterable<StoredEvent> {
        yield* events;
      },
    },
  };
}

/**
 * Replays `source.log` (the whole log, or the audited Runs' events with their `runIds`) into a
 * fresh database next to the live one, compares every row (of those Runs), and drops the fresh
 * database whatever the result (the live one is only read).
 * @throws Error naming the database server when the live database cannot be read.
 */
async function compareProjections(source: { log: ReplayableLog; runIds?: ReadonlySet<string> }, databaseUrl: string): Promise<ProjectionCheck> {
  // loaded only for --projections: MikroORM and its driver are most of an audit's start-up otherwise
  const { databaseUrlWith, dropDatabase, rebuildProjections, redact } = await import('@runplane/projections');
  let result;
  try {
    result = await stoppable((signal) =>
      rebuildProjections({ log: source.log, databaseUrl, signal, ...(source.runIds ? { runIds: source.runIds } : {}) }),
    );
  } catch (e) {
    throw new Error(`--projections: cannot rebuild next to ${redact(databaseUrl)}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
  await dropDatabase(databaseUrlWith(databaseUrl, 'postgres'), result.database);
  return { database: result.database, eventsApplied: result.eventsApplied, identical: result.identicalToLive, differences: result.differences };
}

/** The text report: one line per Run (its outcome, events and checks), each broken check's violations under it, and a summary per check. */
export function renderAudit(report: AuditReport): string[] {
  const lines: string[] = [];
  for (const run of report.runs) {
    const held = run.checks.filter((c) => c.status === 'held').length;
    const broken = run.checks.filter((c) => c.status === 'broken');
    // a Run id on whose subjects only messages that are not facts stand (garbage, forgeries): no
    // check can hold over no events, so only what was found broken is said
    const nothing = report.summary.anomalies === 0 && run.checks.every((c) => c.status === 'not-applicable');
    lines.push(
      run.events === 0 && nothing
        ? `?      run ${run.runId} (nothing of it in the log: an id that never ran, or a Run erased whole: see the stream line below)`
        : run.events === 0
          ? `${run.clean ? 'ok    ' : 'BROKEN'} run ${run.runId} (no event of the log: only messages that are not facts stand on its subjects): ${broken.length} broken`
          : `${run.clean ? 'ok    ' : 'BROKEN'} run ${run.runId} (${run.outcome ?? 'not settled'}, ${run.events} events): ${held} held, ${broken.length} broken, ${run.checks.length - held - broken.length} not applicable`,
    );
    for (const c of broken)
      for (const v of c.violations) lines.push(`         ${c.contract} ${c.id}${v.seq === null ? '' : ` at #${v.seq}`}: ${v.message}`);
  }
  const s = report.summary;
  if (s.erased && s.erased.count > 0) {
    const more = s.erased.count > s.erased.seqs.length ? `, and ${s.erased.count - s.erased.seqs.length} more` : '';
    lines.push(
      `BROKEN stream: ${s.erased.count} stored message(s) erased (K11: nothing committed is erased; the stream denies deletes and purges, so no sequence may be missing; not counted under any check below, which count Runs): ` +
        `#${s.erased.seqs.join(', #')}${more}`,
    );
  }
  lines.push('');
  lines.push(
    `audited ${s.runs} run(s), ${s.events} event(s): ${s.clean} clean, ${s.broken} broken (${s.open} of all not settled, clean or broken); ${s.anomalies} unverified message(s)`,
  );
  for (const c of CHECKS) {
    const r = s.checks[c.id];
    lines.push(
      `  ${c.contract.padEnd(3)} ${c.id.padEnd(22)} ran on ${String(r.ran).padStart(5)}, broken on ${String(r.broken).padStart(5)}: ${c.title}`,
    );
  }
  return lines;
}
