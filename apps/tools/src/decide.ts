/**
 * The tools decider: `decide(facts, trigger, now) -> RunEvent[]`, pure. A proposed call moves to
 * dispatched and then one receipt; nothing here ever lets a call execute twice (K5):
 * - `Wake`, for each proposed call without a receipt, in proposal order:
 *   - already dispatched (its executor died or lost the outcome) -> `unknown` receipt: never
 *     re-executed, never reported as success;
 *   - not in the Run's grant -> `denied` receipt, never dispatched;
 *   - arguments that are not JSON -> `failed` receipt (`bad_arguments`), never dispatched;
 *   - over the Run's tool-call limit -> `denied` receipt (first cut of K7);
 *   - otherwise -> `tool.call.dispatched`: the adapter executes exactly the calls whose dispatch
 *     it appended itself.
 * - `ToolExecuted`: the executed call's receipt, once: `succeeded` with the result inline (up to
 *   {@link INLINE_RESULT_LIMIT} bytes of JSON) or by content-addressed reference (larger; the
 *   adapter stores the bytes before the receipt is appended), `failed` with the tool's error, or
 *   `unknown` when it outlived its timeout (its effect may still happen). Nothing for a call that
 *   is not dispatched or already has a receipt.
 * A failed or denied call stops only its own effect; the Run goes on (K8).
 */
import { contextFrom, makeEvent, sha256Hex, type EventData, type RunEvent } from '@runplane/contracts';
import { toolCallsInOrder, type RunFacts, unknownTrigger } from '@runplane/run-facts';

/** Results larger than this (bytes of JSON) are stored by reference, not inline in a receipt. */
export const INLINE_RESULT_LIMIT = 16 * 1024;

/** How one execution ended, as the adapter observed it. */
export type ToolOutcome =
  /** The tool returned; `json` is its result as JSON text. */
  | { kind: 'returned'; json: string }
  /** The tool refused or failed in a known way (unknown fund, unreadable file, bad arguments). */
  | { kind: 'failed'; code: string; message: string }
  /** No outcome within the timeout: the effect may or may not have happened. */
  | { kind: 'timed-out'; timeoutMs: number }
  /** The tool threw something unexpected (a bug): recorded as failed, with its message. */
  | { kind: 'crashed'; message: string };

export type ToolsTrigger =
  | { type: 'Wake' }
  /**
   * The adapter executed `toolCallId`. `resultBucket` names the object store a large result is
   * referenced in; `durationMs` is the execution's wall time.
   */
  | { type: 'ToolExecuted'; toolCallId: string; outcome: ToolOutcome; durationMs: number; resultBucket: string };

/** True when `text` is acceptable tool arguments: blank (no arguments) or JSON. */
export function argumentsAreJson(text: string): boolean {
  if (text.trim() === '') return true;
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** Decides the tools owner's events for a trigger (see the module comment). */
export function decide(facts: RunFacts, trigger: ToolsTrigger, now: Date): RunEvent[] {
  if (!facts.admitted || !facts.lastEvent || facts.settled) return [];
  switch (trigger.type) {
    case 'Wake':
      // after a fence nothing more is dispatched (K6); a call already executing still gets its real
      // receipt (a fence never cancels an effect in flight, and its outcome is a fact)
      return facts.fenced ? [] : onWake(facts, now);
    case 'ToolExecuted':
      return onExecuted(facts, trigger, now);
    default:
      return unknownTrigger('tools', trigger);
  }
}

function onWake(facts: RunFacts, now: Date): RunEvent[] {
  const { grant, limits } = facts.admitted!;
  const ctx = contextFrom(facts.lastEvent!);
  const receipt = (data: EventData<'tool.call.receipt'>) => makeEvent('tool.call.receipt', ctx, data.toolCallId, data, now);
  let dispatched = toolCallsInOrder(facts).filter((c) => c.dispatched).length;
  const events: RunEvent[] = [];
  for (const call of toolCallsInOrder(facts)) {
    if (call.receipt) continue;
    const base = { toolCallId: call.toolCallId, name: call.name, durationMs: 0 };
    if (call.dispatched) {
      events.push(
        receipt({
          ...base,
          status: 'unknown',
          error: { code: 'outcome_unknown', message: 'dispatched, but its outcome was not recorded; it is not re-run' },
        }),
      );
    } else if (!grant.tools.includes(call.name)) {
      events.push(
        receipt({
          ...base,
          status: 'denied',
          error: { code: 'not_granted', message: `tool ${call.name} is not in this Run's grant (${grant.tools.join(', ')})` },
        }),
      );
    } else if (!argumentsAreJson(call.argumentsText)) {
      events.push(
        receipt({ ...base, status: 'failed', error: { code: 'bad_arguments', message: 'the arguments are not JSON; the call was not executed' } }),
      );
    } else if (dispatched >= limits.maxToolCalls) {
      events.push(
        receipt({
          ...base,
          status: 'denied',
          error: { code: 'tool_call_limit', message: `the Run's tool-call limit of ${limits.maxToolCalls} is used up` },
        }),
      );
    } else {
      dispatched++;
      events.push(makeEvent('tool.call.dispatched', ctx, call.toolCallId, { toolCallId: call.toolCallId, name: call.name }, now));
    }
  }
  return events;
}

function onExecuted(facts: RunFacts, t: Extract<ToolsTrigger, { type: 'ToolExecuted' }>, now: Date): RunEvent[] {
  const call = facts.toolCalls.get(t.toolCallId);
  if (!call || !call.dispatched || call.receipt) return [];
  const base = { toolCallId: call.toolCallId, name: call.name, durationMs: t.durationMs };
  const o = t.outcome;
  let data: EventData<'tool.call.receipt'>;
  if (o.kind === 'returned') {
    const bytes = Buffer.byteLength(o.json, 'utf8');
    if (bytes <= INLINE_RESULT_LIMIT) data = { ...base, status: 'succeeded', result: JSON.parse(o.json) as unknown };
    else {
      const sha256 = sha256Hex(o.json);
      data = { ...base, status: 'succeeded', resultRef: { bucket: t.resultBucket, key: sha256, sha256, bytes } };
    }
  } else if (o.kind === 'failed') data = { ...base, status: 'failed', error: { code: o.code, message: o.message } };
  else if (o.kind === 'timed-out')
    data = { ...base, status: 'unknown', error: { code: 'timeout', message: `no outcome within ${o.timeoutMs} ms; the call is not re-run` } };
  else data = { ...base, status: 'failed', error: { code: 'tool_error', message: o.message } };
  return [makeEvent('tool.call.receipt', contextFrom(facts.lastEvent!), call.toolCallId, data, now)];
}
