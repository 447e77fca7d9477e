/**
 * The runtime's next step for a Run, decided from its folded facts alone (never from memory), so
 * a restarted or redelivered handler decides the same (K10, K11). The runtime never settles a Run
 * (K9): when it stops it records why, and the lifecycle settles.
 */
import type { ExecutionStopReason, ProposedToolCall } from '@runplane/contracts';
import { lastTurn, type RunFacts } from '@runplane/run-facts';

export type RuntimeStep =
  /** Nothing to do: not admitted, already stopped, a turn in flight, or waiting for receipts. */
  | { kind: 'none'; why: string }
  /** Call the model for this turn (appending `model.turn.requested` first). */
  | { kind: 'request-turn'; turn: number }
  /** A completed turn's tool calls that were not yet proposed (repair after a crash). */
  | { kind: 'propose'; turn: number; calls: ProposedToolCall[] }
  /** Stop executing, recording why; `answerTurn` is the turn holding the answer. */
  | { kind: 'finish'; reason: ExecutionStopReason; detail: string; answerTurn: number | null };

/** True for text with nothing visible: whitespace, zero-width and other format characters only. */
export function isBlank(text: string): boolean {
  return text.replace(/[\s\p{Cf}\p{Cc}]/gu, '') === '';
}

/**
 * Decides the next step.
 * @param now current time, compared with the Run's `deadlineAt`.
 */
export function decideRuntimeStep(facts: RunFacts, now: Date): RuntimeStep {
  if (!facts.admitted) return { kind: 'none', why: 'not admitted' };
  if (facts.finished || facts.settled) return { kind: 'none', why: 'execution already stopped' };
  const { limits } = facts.admitted;
  const last = lastTurn(facts);
  if (last && !last.completed && !last.failed) return { kind: 'none', why: `turn ${last.turn} in flight` };
  if (last?.failed) {
    return { kind: 'finish', reason: 'model-error', detail: `turn ${last.turn}: ${last.failed.error.message}`, answerTurn: null };
  }
  if (last?.completed) {
    const done = last.completed;
    if (done.toolCalls.length > 0) {
      const missing = done.toolCalls.filter((c) => !facts.toolCalls.has(c.toolCallId));
      if (missing.length > 0) return { kind: 'propose', turn: last.turn, calls: missing };
      const waiting = done.toolCalls.filter((c) => !facts.toolCalls.get(c.toolCallId)?.receipt);
      if (waiting.length > 0) return { kind: 'none', why: `waiting for ${waiting.length} receipt(s)` };
    } else if (done.finishReason === 'length') {
      return { kind: 'finish', reason: 'truncated-output', detail: `turn ${last.turn} stopped at the length limit`, answerTurn: null };
    } else if (done.finishReason !== 'stop') {
      return { kind: 'finish', reason: 'incomplete-output', detail: `turn ${last.turn} ended with finish_reason=${done.finishReason}, not a finished answer`, answerTurn: null };
    } else if (isBlank(done.content)) {
      return { kind: 'finish', reason: 'empty-output', detail: `turn ${last.turn} returned no text`, answerTurn: null };
    } else {
      return { kind: 'finish', reason: 'answered', detail: `answer in turn ${last.turn}`, answerTurn: last.turn };
    }
  }
  if (now.getTime() >= Date.parse(limits.deadlineAt)) {
    return { kind: 'finish', reason: 'deadline', detail: `deadline ${limits.deadlineAt} passed`, answerTurn: null };
  }
  if (facts.turns.length >= limits.maxModelRequests) {
    return { kind: 'finish', reason: 'model-request-limit', detail: `${facts.turns.length} of ${limits.maxModelRequests} model requests used`, answerTurn: null };
  }
  return { kind: 'request-turn', turn: facts.turns.length + 1 };
}
