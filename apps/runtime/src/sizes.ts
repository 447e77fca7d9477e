/**
 * Size rules of a model turn (K9, K11; limits in libs/contracts `limits.ts`): where the model's
 * output enters the product, the runtime's decider bounds it, so its record always fits the
 * broker's message size and is never dropped. Pure.
 * - The turn's text over {@link TURN_CONTENT_MAX_BYTES}, or with more than {@link TURN_PASSAGES_MAX}
 *   passages, is recorded cut (its first part, with a
 *   `cut` entry: the whole size and sha256): the turn is not an answer and nothing of it is
 *   proposed; the next wake retries it within the budget, like a length-cut reply (K9).
 * - A tool call's arguments over {@link TOOL_ARGUMENTS_MAX_BYTES}, a name over
 *   {@link TOOL_NAME_MAX_CHARS}, or calls past {@link TURN_TOOL_CALLS_MAX_BYTES} for the whole
 *   turn are recorded cut: such a call is never executed nor parked on; the model reads
 *   `arguments_too_large` as its result, and the Run continues (K5, K8).
 */
import {
  cutToJsonBytes,
  jsonBytes,
  REPORTED_TEXT_MAX_CHARS,
  sha256Hex,
  TOOL_ARGUMENTS_MAX_BYTES,
  TOOL_NAME_MAX_CHARS,
  passagesPrefixLength,
  TURN_CONTENT_MAX_BYTES,
  TURN_PASSAGES_MAX,
  TURN_TOOL_CALLS_MAX_BYTES,
  type EventData,
  type ProposedToolCall,
  type SizeCut,
} from '@runplane/contracts';
import type { RunFacts } from '@runplane/run-facts';
import { planCalls, type CallPlan } from './parking.js';

type Completed = Omit<EventData<'model.turn.completed'>, 'turn'>;

/** Bytes a cut value keeps at most of each limit: the rest of the event (envelope, other fields) has room beside it. */
function cut(field: SizeCut['field'], whole: string, limitBytes: number, toolCallId?: string): { kept: string; entry: SizeCut } {
  const kept = cutToJsonBytes(whole, limitBytes);
  return {
    kept,
    entry: {
      field,
      ...(toolCallId ? { toolCallId } : {}),
      reason: 'size-limit',
      bytes: jsonBytes(whole),
      sha256: sha256Hex(whole),
      keptCharacters: kept.length,
      limitBytes,
    },
  };
}

/**
 * The turn as it is recorded: every value within its limit, with a `cut` entry for each value
 * that was cut (absent when none was). Idempotent: a bounded turn is returned unchanged.
 */
export function boundTurn(turn: Completed): Completed {
  const cuts: SizeCut[] = [...(turn.cut ?? [])];
  let content = turn.content;
  let contentEntry: SizeCut | undefined;
  if (jsonBytes(content) > TURN_CONTENT_MAX_BYTES) {
    const c = cut('content', content, TURN_CONTENT_MAX_BYTES);
    content = c.kept;
    contentEntry = c.entry;
  }
  // a text of very many tiny paragraphs is cut after TURN_PASSAGES_MAX of them (each becomes a listed passage)
  const passages = passagesPrefixLength(content, TURN_PASSAGES_MAX);
  if (passages !== null) {
    content = content.slice(0, passages);
    contentEntry = {
      ...(contentEntry ?? cut('content', turn.content, TURN_CONTENT_MAX_BYTES).entry),
      keptCharacters: content.length,
      limitPassages: TURN_PASSAGES_MAX,
    };
  }
  if (contentEntry) cuts.push(contentEntry);
  let finishReason = turn.finishReason;
  if (finishReason.length > REPORTED_TEXT_MAX_CHARS) {
    const c = cut('finishReason', finishReason, REPORTED_TEXT_MAX_CHARS);
    finishReason = c.kept;
    cuts.push(c.entry);
  }
  let room = TURN_TOOL_CALLS_MAX_BYTES;
  const toolCalls = turn.toolCalls.map((call): ProposedToolCall => {
    let { name, argumentsText } = call;
    if (name.length > TOOL_NAME_MAX_CHARS) {
      const c = cut('name', name, TOOL_NAME_MAX_CHARS, call.toolCallId);
      name = c.kept;
      cuts.push(c.entry);
    }
    room -= jsonBytes(name);
    const limit = Math.max(2, Math.min(TOOL_ARGUMENTS_MAX_BYTES, room));
    if (jsonBytes(argumentsText) > limit) {
      const c = cut('arguments', argumentsText, limit, call.toolCallId);
      argumentsText = c.kept;
      cuts.push(c.entry);
    }
    room -= jsonBytes(argumentsText);
    return { ...call, name, argumentsText };
  });
  return { ...turn, content, finishReason, toolCalls, ...(cuts.length > 0 ? { cut: cuts } : {}) };
}

/** The entry saying the turn's text was cut, if it was. */
export function contentCut(done: Pick<Completed, 'cut'>): SizeCut | undefined {
  return done.cut?.find((c) => c.field === 'content');
}

/** Why a turn's text was recorded cut, in words (for the stop's detail and the settlement's reason). */
export function describeContentCut(turnNo: number, entry: SizeCut): string {
  const limit = entry.limitPassages
    ? `the size limits (${entry.limitBytes} bytes, ${entry.limitPassages} passages)`
    : `the size limit of ${entry.limitBytes} bytes`;
  return `turn ${turnNo}'s text (${entry.bytes} bytes) was over ${limit}: it was recorded cut to its first ${entry.keptCharacters} characters (sha256 of the whole ${entry.sha256}), which is not an answer`;
}

/** Ids of the turn's calls recorded cut (arguments or name): never executed. */
export function cutCallIds(done: Pick<Completed, 'cut'>): Set<string> {
  return new Set((done.cut ?? []).flatMap((c) => (c.toolCallId && c.field !== 'content' ? [c.toolCallId] : [])));
}

/** What the model reads as the result of a call recorded cut: it was not executed, and why. */
export function cutCallPlan(entry: SizeCut): CallPlan {
  const what = entry.field === 'name' ? `name (${entry.bytes} bytes)` : `arguments (${entry.bytes} bytes of JSON)`;
  return {
    kind: 'rejected',
    status: 'failed',
    error: {
      code: 'arguments_too_large',
      message: `the call's ${what} are over the limit of ${entry.limitBytes} bytes: only the first ${entry.keptCharacters} characters were recorded (sha256 of the whole ${entry.sha256}) and the call was not executed; call it again with smaller arguments`,
    },
  };
}

/**
 * Plans the calls of turn `turnNo` like `planCalls`, except that a call recorded cut is resolved
 * at once as `arguments_too_large` (never a tool, a wait, a child or a clarification).
 */
export function planTurnCalls(
  facts: RunFacts,
  turnNo: number,
  calls: readonly ProposedToolCall[],
  cuts: readonly SizeCut[] | undefined,
  completedAt: Date,
): Map<string, CallPlan> {
  const cutIds = cutCallIds({ cut: cuts ? [...cuts] : undefined });
  if (cutIds.size === 0) return planCalls(facts, turnNo, calls, completedAt);
  const planned = planCalls(
    facts,
    turnNo,
    calls.filter((c) => !cutIds.has(c.toolCallId)),
    completedAt,
  );
  const plans = new Map<string, CallPlan>();
  for (const c of calls) {
    const entry = cutIds.has(c.toolCallId) ? cuts!.find((e) => e.toolCallId === c.toolCallId && e.field !== 'content') : undefined;
    plans.set(c.toolCallId, entry ? cutCallPlan(entry) : planned.get(c.toolCallId)!);
  }
  return plans;
}
