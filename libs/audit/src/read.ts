/**
 * Reading what an audit needs from the log: one Run (with the Runs its links name) or every Run,
 * with the messages the log could not verify. Reads only (K11): direct gets (batched for a scan);
 * nothing is appended or created.
 */
import { Id, type StoredEvent } from '@runplane/contracts';
import { parseRunSubject, type EventLog, type InvalidStoredEvent } from '@runplane/eventlog';
import { ERASED_LISTED, type AuditInput, type ErasedMessages, type StoredAnomaly } from './checks.js';

/**
 * The report entry under which `--all` lists stored messages whose subject is not a Run subject
 * (`<prefix>.run.<runId>.<owner>.<partition>`): nothing may be stored unverified and unreported (K11).
 */
export const OUTSIDE_RUN_SUBJECTS = '(messages outside the Run subject layout)';

/** What to read: one Run (`run`) or every Run (`all`), optionally only Runs admitted `since` a time (with `all` only). */
export interface AuditSelection {
  run?: string;
  all?: boolean;
  /** ISO-8601 time (anything `Date.parse` reads): with `all`, only Runs admitted at or after it are audited. */
  since?: string;
}

/**
 * Checks what an audit was asked to read, before anything is read (pure: the CLI calls it before
 * it connects, so a bad selection is refused without NATS).
 * @returns the `since` time (epoch ms), or null without one.
 * @throws Error with a readable reason: neither or both of `run` / `all`, `since` with `run`, a
 *   bad run id, a `since` that is not a time.
 */
export function checkAuditSelection(selection: AuditSelection): number | null {
  if (!selection.run && !selection.all) throw new Error('name one Run (--run <id>) or every Run (--all)');
  if (selection.run && selection.all) throw new Error('--run names one Run and --all every Run: give one of them, not both');
  // --since picks Runs of the whole log by admission time; a named Run is audited whole, whenever admitted
  if (selection.run && selection.since !== undefined)
    throw new Error('--since selects Runs of --all by admission time; --run audits the named Run whole: give --run or --all --since, not both');
  if (selection.run) {
    const valid = Id.safeParse(selection.run);
    if (!valid.success) throw new Error(`not a run id: "${selection.run}" (${valid.error.issues[0]?.message})`);
  }
  const since = selection.since === undefined ? null : Date.parse(selection.since);
  if (since !== null && Number.isNaN(since)) throw new Error(`--since: not a time: "${selection.since}" (ISO-8601, e.g. 2026-12-01T00:00:00Z)`);
  return since;
}

/**
 * Reads the Runs `selection` names from `log` into an {@link AuditInput}: with `run`, that Run by a
 * filtered scan of its subjects (every stored message, so that missing or unverified ones are
 * seen) plus its parent and the children it requested (read for the link checks, not audited);
 * with `all`, the whole stream in one scan. Messages that are not verified events are collected as
 * anomalies of the Run their subject names, or, when the subject names no Run, under
 * {@link OUTSIDE_RUN_SUBJECTS}.
 * @throws Error with a readable reason: neither or both of `run` / `all`, `since` with `run`, a
 *   bad run id or time, a Run with nothing in the log.
 */
export async function readForAudit(log: EventLog, selection: AuditSelection): Promise<AuditInput> {
  const since = checkAuditSelection(selection);

  const anomalies: StoredAnomaly[] = [];
  const previous = log.onInvalid;
  log.onInvalid = (e: InvalidStoredEvent) => {
    const parts = parseRunSubject(log.space.prefix, e.subject);
    // the short reason for the text report; the validator's whole list, when it was shortened, for --json
    const detail = e.message.endsWith(e.detail) ? {} : { detail: e.detail };
    if (parts) anomalies.push({ seq: e.seq, subject: e.subject, runId: parts.runId, message: e.message, ...detail });
    else
      anomalies.push({
        seq: e.seq,
        subject: e.subject,
        runId: OUTSIDE_RUN_SUBJECTS,
        message: `subject ${e.subject} is not a Run subject (${log.space.prefix}.run.<runId>.<owner>.<partition>): ${e.message}`,
        ...detail,
      });
  };
  const runs = new Map<string, StoredEvent[]>();
  const add = (e: StoredEvent) => {
    const list = runs.get(e.event.runId);
    if (list) list.push(e);
    else runs.set(e.event.runId, [e]);
  };
  try {
    if (selection.run) {
      const runId = selection.run;
      const read = async (id: string) => {
        if (runs.has(id)) return;
        runs.set(id, []);
        for await (const e of log.readRunWhole(id)) add(e);
      };
      await read(runId);
      if (runs.get(runId)!.length === 0 && !anomalies.some((a) => a.runId === runId)) {
        // nothing of it in the log: an id that never ran, or a Run erased whole, which only the
        // stream's deleted sequences can show (a verification trial's got exit 1, "no events")
        const erased = await erasedFrom(log);
        if (erased.count === 0) throw new Error(`no events for run ${runId} in stream ${log.space.stream}`);
        return { runs, anomalies: [], audited: [runId], erased };
      }
      // the Runs its link checks look up: its parent, and the children it requested
      for (const e of [...runs.get(runId)!]) {
        if (e.event.type === 'run.admitted' && e.event.data.link) await read(e.event.data.link.parentRunId);
        if (e.event.type === 'child.run.requested') await read(e.event.data.childRunId);
      }
      return { runs, anomalies: [...anomalies], audited: [runId], erased: await erasedFrom(log) };
    }
    for await (const e of log.readAll()) add(e);
    for (const a of anomalies) if (!runs.has(a.runId)) runs.set(a.runId, []);
    const audited = [...runs.keys()].filter((runId) => {
      if (since === null) return true;
      const events = runs.get(runId)!;
      const admitted = events.find((e) => e.event.type === 'run.admitted');
      // a Run whose events stand without its admission has no admission time: it is audited (and
      // found broken, K1); a Run id with only messages that are not facts is not dated either, as before
      if (!admitted) return events.length > 0;
      return Date.parse(admitted.event.occurredAt) >= since;
    });
    return { runs, anomalies: [...anomalies], audited, erased: await erasedFrom(log) };
  } finally {
    log.onInvalid = previous;
  }
}

/**
 * The Run stream's erased messages ({@link ErasedMessages}), read after the scan from the
 * stream's state (`$JS.API.STREAM.INFO` with the deleted sequences): sequences below its first
 * (purged from the head) and those deleted between its first and last.
 */
export async function erasedFrom(log: EventLog): Promise<ErasedMessages> {
  const info = await log.jsm.streams.info(log.space.stream, { deleted_details: true });
  const { first_seq: first, last_seq: last } = info.state;
  if (last === 0) return { count: 0, seqs: [] };
  // purged from the head: every sequence below the first still stored
  const head = Math.max(0, first - 1);
  // deleted between the first and the last (nats-server 2.15 lists 0 as deleted in an empty
  // stream, and counts it in num_deleted: only sequences inside the stored range count)
  const inside = [...(info.state.deleted ?? [])].filter((seq) => seq >= first && seq <= last).sort((x, y) => x - y);
  const seqs: number[] = [];
  for (let seq = 1; seq <= head && seqs.length < ERASED_LISTED; seq++) seqs.push(seq);
  for (const seq of inside) if (seqs.length < ERASED_LISTED) seqs.push(seq);
  return { count: head + inside.length, seqs };
}
