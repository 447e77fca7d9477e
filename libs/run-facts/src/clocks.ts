/**
 * The Run's clocks (K7): what counts as progress, and the no-progress clock read against a time.
 */
import type { RunEvent } from '@runplane/contracts';
import type { RunFacts } from './fold.js';
import { parkedOn } from './queries.js';

/**
 * Whether an event is progress for the no-progress limit (K7): the admission (the clock starts),
 * streamed answer text (a finished paragraph, `model.output.paragraph`, or evidence of text still
 * streaming inside an unfinished one, `model.output.progress`), a completed turn with text that was not cut
 * at its length limit, a valid tool call (`tool.call.proposed`: the runtime proposes only valid
 * calls), a new receipt, an answered wait or a settled child (the Run was woken). Not progress:
 * lease grants (the transport of execution, renewed or not), model requests, failed or empty
 * turns, keep-alive chunks (never recorded), fences, dispatches. Pure; reads only the event.
 */
export function countsAsProgress(e: RunEvent): boolean {
  switch (e.type) {
    case 'run.admitted':
    case 'model.output.paragraph':
    case 'model.output.progress':
    case 'tool.call.proposed':
    case 'tool.call.receipt':
    case 'wait.answered':
    case 'child.run.settled':
      return true;
    case 'model.turn.completed':
      return e.data.content.trim().length > 0 && e.data.finishReason !== 'length';
    default:
      return false;
  }
}

/**
 * The Run's no-progress clock (K7) at `now`: when it last made progress, how long ago (ms), the
 * limit (`noProgressSeconds` of its admission, ms, or null when it has none) and whether the limit
 * is passed. A parked Run (waiting on a human or a child, K10) is never past it: the wait's own
 * expiry covers it, and its wake restarts the clock. Null before admission.
 */
export function noProgressClock(
  facts: RunFacts,
  now: Date,
): { lastProgressAt: string; sinceMs: number; limitMs: number | null; passed: boolean; dueAt: string | null } | null {
  if (!facts.admitted || !facts.lastProgressAt) return null;
  const sinceMs = Math.max(0, now.getTime() - Date.parse(facts.lastProgressAt));
  const seconds = facts.admitted.limits.noProgressSeconds;
  const limitMs = seconds === undefined ? null : seconds * 1000;
  const dueAt = limitMs === null ? null : new Date(Date.parse(facts.lastProgressAt) + limitMs).toISOString();
  const passed = limitMs !== null && sinceMs >= limitMs && parkedOn(facts) === null;
  return { lastProgressAt: facts.lastProgressAt, sinceMs, limitMs, passed, dueAt };
}
