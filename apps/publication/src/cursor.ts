/**
 * What an observer's cursor (`Last-Event-ID`, or `?lastEventId=`) may mean (K4): 0 (from the
 * start) or a position in this Run's log, the stream sequence of a message on one of its
 * subjects, which every SSE `id:` the stream sends is. A message there that is not a fact (a
 * forgery, garbage: never sent to observers) is a position all the same: resuming after it loses
 * nothing. Anything else would make the stream skip stored events or wait for positions that never
 * come, so it is refused with its reason instead of honoured.
 */
import { parseRunSubject } from '@runplane/eventlog';

/** Why a cursor is not a position in the Run's log. */
export type CursorRefusal =
  | { reason: 'beyond-end'; detail: string }
  | { reason: 'other-run'; detail: string }
  | { reason: 'not-an-event'; detail: string }
  | { reason: 'not-this-run'; detail: string };

/**
 * Judges a cursor of Run `runId`. Pure: the caller reads what is stored at `cursor` (`atCursor`:
 * the Run id of the subject holding it, or null when nothing is stored there) and the stream's
 * last sequence (`streamLastSeq`).
 * @param cursor a non-negative integer already parsed from the header or query (0: from the start).
 * @param disclose whether the refusal may say why (an admin's): `beyond-end` (past the end of the
 *   log, naming its last position), `other-run` (a position of another Run), `not-an-event`
 *   (inside the log but nothing stored there, e.g. a removed message). Anyone else gets
 *   `not-this-run` whatever the cause: the others tell the whole log's length and which positions
 *   are other people's Runs (a hostile-tenant trial read both from its own Run's refusals).
 * @returns null when the stream may replay from after `cursor`; otherwise the reason.
 */
export function judgeCursor(
  runId: string,
  cursor: number,
  atCursor: { runId: string } | null,
  streamLastSeq: number,
  disclose = true,
): CursorRefusal | null {
  if (cursor === 0) return null;
  if (atCursor?.runId === runId) return null;
  if (!disclose) return { reason: 'not-this-run', detail: `Last-Event-ID ${cursor} is not a position of run ${runId}` };
  if (atCursor) return { reason: 'other-run', detail: `Last-Event-ID ${cursor} is a position of another Run, not of run ${runId}` };
  if (cursor > streamLastSeq) {
    return { reason: 'beyond-end', detail: `Last-Event-ID ${cursor} is beyond the end of the log (its last position is ${streamLastSeq})` };
  }
  return { reason: 'not-an-event', detail: `Last-Event-ID ${cursor} is not a position of run ${runId}: nothing is stored there` };
}

/** The Run id of a Run subject `<prefix>.run.<runId>.<owner>.<partition>`, or null for another subject. */
export function runIdOfSubject(prefix: string, subject: string): string | null {
  return parseRunSubject(prefix, subject)?.runId ?? null;
}
