/**
 * What an observer's cursor (`Last-Event-ID`, or `?lastEventId=`) may mean (K4): 0 (from the
 * start) or the stream sequence of one of this Run's own events, which is what every SSE `id:` the
 * stream sends is. Anything else would make the stream skip stored events or wait for positions
 * that never come, so it is refused with its reason instead of honoured.
 */
import type { StoredEvent } from '@runplane/contracts';

/** Why a cursor is not a position in the Run's log. */
export type CursorRefusal =
  { reason: 'beyond-end'; detail: string } | { reason: 'other-run'; detail: string } | { reason: 'not-an-event'; detail: string };

/**
 * Judges a cursor of Run `runId`. Pure: the caller reads the message stored at `cursor` (`atCursor`:
 * the verified event there, or null when there is none or it is not a fact) and the stream's last
 * sequence (`streamLastSeq`, read from the stream's leader).
 * @param cursor a non-negative integer already parsed from the header or query (0: from the start).
 * @returns null when the stream may replay from after `cursor`; otherwise the reason:
 *   `beyond-end` (past the end of the log), `other-run` (a position of another Run's event),
 *   `not-an-event` (a position holding no event of this Run's log, e.g. a message that is not a fact).
 */
export function judgeCursor(runId: string, cursor: number, atCursor: StoredEvent | null, streamLastSeq: number): CursorRefusal | null {
  if (cursor === 0) return null;
  if (atCursor && atCursor.event.runId === runId) return null;
  if (atCursor) {
    return { reason: 'other-run', detail: `Last-Event-ID ${cursor} is a position of another Run's event, not of run ${runId}` };
  }
  if (cursor > streamLastSeq) {
    return { reason: 'beyond-end', detail: `Last-Event-ID ${cursor} is beyond the end of the log (its last position is ${streamLastSeq})` };
  }
  return { reason: 'not-an-event', detail: `Last-Event-ID ${cursor} is not the position of an event of run ${runId}` };
}
