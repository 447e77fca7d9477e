/**
 * The tools decider: `decide(facts, trigger, now) -> RunEvent[]`, pure. A proposed call moves to
 * dispatched and then one receipt; nothing here ever lets a call execute twice (K5):
 * - `Wake`, for each proposed call without a receipt, in proposal order:
 *   - already dispatched: decided only from the live claims the adapter read after the facts
 *     (`claims`): a call whose claim is absent or expired (its executor died or froze) -> `unknown`
 *     receipt, never re-executed, never reported as success; a call whose claim is live (its
 *     executor is alive and within its timeout), or that the adapter did not look up -> nothing;
 *   - not in the Run's grant -> `denied` receipt, never dispatched;
 *   - the same tool and arguments (`effectKey`) as an unreconciled `unknown` call the Run carries
 *     from its continuation parent (`context.carried`) -> `denied`
 *     (`unknown_effect_needs_reconciliation`), never dispatched (K3, K5);
 *   - a tool not labelled `read-only` called with the same arguments as an earlier call of this
 *     Run whose receipt is `unknown` and that no operator reconciled -> `denied`
 *     (`unknown_effect_needs_reconciliation`), never dispatched (K5: a model that asks again for an
 *     effect whose outcome is unknown does not get it run a second time; a read may be asked again);
 *   - the same tool and arguments as a call that SUCCEEDED in the continuation parent
 *     (`context.carried.completedCalls`) -> never re-run (K3): a `succeeded` receipt repeating the
 *     parent's result (`reusedFrom`) when it is carried, else `denied` (`already_done_in_parent`);
 *   - arguments that are not JSON -> `failed` receipt (`bad_arguments`), never dispatched;
 *   - past the Run's deadline -> `denied` receipt (`deadline`, K7);
 *   - over the Run's tool-call limit -> `denied` receipt (K7);
 *   - otherwise -> `tool.call.dispatched`: the adapter executes exactly the calls whose dispatch
 *     it appended itself.
 * - `ToolExecuted`: the executed call's receipt, once: `succeeded` with the result inline (up to
 *   {@link INLINE_RESULT_LIMIT} bytes of JSON) or by content-addressed reference (larger; the
 *   adapter stores the bytes before the receipt is appended), `failed` with the tool's error, or
 *   `unknown` when it outlived its timeout (its effect may still happen). Nothing for a call that
 *   is not dispatched or already has a receipt.
 *   A call whose receipt is already `unknown` (or whose Run was fenced or settled before it had a
 *   receipt) gets `tool.call.late_observed` with the real outcome instead, once: never rewritten
 *   into success, never dropped, never changing the Run's outcome. It is the one event decided
 *   after a fence closed the tools subject, and after settlement (the fence named the call
 *   uncertain; a receipt after it would reopen a subject the settlement relies on being closed).
 * Every receipt records the tool's effect label (`read-only` | `external-effect`) for operators;
 * the label never makes an `unknown` call eligible for replay.
 * A failed or denied call stops only its own effect; the Run goes on (K8).
 */
import {
  boundReportedText,
  contextFrom,
  effectKey,
  makeEvent,
  sha256Hex,
  ToolEffects,
  type EventData,
  type RunEvent,
  type ToolEffect,
} from '@runplane/contracts';
import { budgetOf, toolCallsInOrder, type RunFacts, unknownTrigger } from '@runplane/run-facts';

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

/** A live executor's claim on a call, as read from the claims bucket. */
export interface ToolClaim {
  /** The process instance executing the call. */
  holder: string;
  /** ISO-8601 instant after which the claim is dead unless renewed. */
  expiresAt: string;
}

export type ToolsTrigger =
  /**
   * Decide what the Run's proposals still need. `claims` holds, for each dispatched call without a
   * receipt that the adapter looked up (after reading the facts), its claim or null when absent.
   */
  | { type: 'Wake'; claims?: Readonly<Record<string, ToolClaim | null>> }
  /**
   * The adapter executed `toolCallId`. `resultBucket` names the object store a large result is
   * referenced in; `durationMs` is the execution's wall time.
   */
  | { type: 'ToolExecuted'; toolCallId: string; outcome: ToolOutcome; durationMs: number; resultBucket: string; executor?: string };

/** The effect label of a tool, when it is one Runplane knows. */
function effectOf(name: string): { effect?: ToolEffect } {
  const effect = (ToolEffects as Record<string, ToolEffect | undefined>)[name];
  return effect ? { effect } : {};
}

/** The carried `unknown` call (K3, K5) this proposal would repeat (same tool, same arguments), if any. */
function carriedUnknown(facts: RunFacts, name: string, argumentsText: string): { runId: string; toolCallId: string } | undefined {
  const carried = facts.carried?.unknownEffects ?? [];
  if (carried.length === 0) return undefined;
  const key = effectKey(name, argumentsText);
  return carried.find((u) => u.effectKey === key);
}

/**
 * The earlier call of this Run whose effect `call` would repeat while its outcome is unknown (K5):
 * same tool and arguments, its receipt `unknown`, no operator's reconciliation (a late observation
 * does not count: the receipt stays unknown). Only for a tool that is not labelled `read-only`
 * (`ToolEffects`; a tool without a label is taken as having effects): a read may be asked again.
 */
function unknownInRun(facts: RunFacts, call: { toolCallId: string; name: string; argumentsText: string }) {
  if (effectOf(call.name).effect === 'read-only') return undefined;
  const key = effectKey(call.name, call.argumentsText);
  for (const earlier of toolCallsInOrder(facts)) {
    if (earlier.toolCallId === call.toolCallId) return undefined;
    if (earlier.receipt?.status === 'unknown' && !earlier.reconciliation && effectKey(earlier.name, earlier.argumentsText) === key) return earlier;
  }
  return undefined;
}

/**
 * Why `call` may not be dispatched because it repeats an effect whose outcome is unknown (K5): an
 * unreconciled `unknown` call the Run carries from its continuation parent ({@link carriedUnknown},
 * any tool), or an earlier one of this Run ({@link unknownInRun}, tools not labelled read-only);
 * undefined when it repeats none.
 */
function unknownEffectRepeated(facts: RunFacts, call: { toolCallId: string; name: string; argumentsText: string }): string | undefined {
  const carried = carriedUnknown(facts, call.name, call.argumentsText);
  if (carried)
    return `the same ${call.name} call (same arguments) has an unknown outcome in Run ${carried.runId} [${carried.toolCallId}]; it is not dispatched again until that call is reconciled`;
  const earlier = unknownInRun(facts, call);
  if (earlier)
    return `the same ${call.name} call (same arguments) [${earlier.toolCallId}] has an unknown outcome in this Run: it may have taken effect; it is not dispatched again until an operator reconciles that call`;
  return undefined;
}

/** The continuation parent's succeeded call (K3) this proposal would repeat (same tool, same arguments), if any. */
function carriedCompleted(facts: RunFacts, name: string, argumentsText: string) {
  const done = facts.carried?.completedCalls ?? [];
  if (done.length === 0) return undefined;
  const key = effectKey(name, argumentsText);
  return done.find((c) => c.effectKey === key);
}

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
  if (!facts.admitted || !facts.lastEvent) return [];
  // After settlement only a late observation may still be recorded.
  if (facts.settled && trigger.type !== 'ToolExecuted') return [];
  switch (trigger.type) {
    case 'Wake':
      // after a fence, a cancel or the end of the execution nothing more is dispatched (K6); a call
      // already executing still gets its real outcome recorded (a fence never cancels an effect in
      // flight, and its outcome is a fact), as a late observation
      return facts.fenced || facts.cancelRequested || facts.finished ? [] : onWake(facts, trigger.claims ?? {}, now);
    case 'ToolExecuted':
      return onExecuted(facts, trigger, now);
    default:
      return unknownTrigger('tools', trigger);
  }
}

function onWake(facts: RunFacts, claims: Readonly<Record<string, ToolClaim | null>>, now: Date): RunEvent[] {
  const { grant, limits } = facts.admitted!;
  const ctx = contextFrom(facts.lastEvent!);
  const receipt = (data: EventData<'tool.call.receipt'>) => makeEvent('tool.call.receipt', ctx, data.toolCallId, data, now);
  // the ledger's tool calls: dispatched, and what was carved for child Runs (K7: a child's grant comes out of its parent's)
  const ledger = budgetOf(facts).toolCalls;
  let dispatched = ledger.used + ledger.carved;
  const events: RunEvent[] = [];
  for (const call of toolCallsInOrder(facts)) {
    if (call.receipt) continue;
    const base = { toolCallId: call.toolCallId, name: call.name, durationMs: 0, ...effectOf(call.name) };
    if (call.dispatched) {
      if (!(call.toolCallId in claims)) continue; // not looked up: no decision about its executor
      const claim = claims[call.toolCallId];
      if (claim && Date.parse(claim.expiresAt) > now.getTime()) continue; // its executor is alive
      events.push(
        receipt({
          ...base,
          status: 'unknown',
          error: {
            code: 'executor_lost',
            message: claim
              ? `dispatched, but its executor's claim (${claim.holder}) expired at ${claim.expiresAt} without an outcome; it is not re-run`
              : "dispatched, but its executor's claim is gone without an outcome; it is not re-run",
          },
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
    } else if (unknownEffectRepeated(facts, call)) {
      events.push(
        receipt({
          ...base,
          status: 'denied',
          error: { code: 'unknown_effect_needs_reconciliation', message: unknownEffectRepeated(facts, call)! },
        }),
      );
    } else if (carriedCompleted(facts, call.name, call.argumentsText)) {
      // K3: the continuation parent's completed call is never re-run: its result is repeated, or the call is denied
      const done = carriedCompleted(facts, call.name, call.argumentsText)!;
      events.push(
        receipt(
          done.reusable
            ? {
                ...base,
                status: 'succeeded',
                ...(done.resultRef ? { resultRef: done.resultRef } : { result: done.result }),
                reusedFrom: { runId: done.runId, toolCallId: done.toolCallId },
              }
            : {
                ...base,
                status: 'denied',
                error: {
                  code: 'already_done_in_parent',
                  message: `the same ${call.name} call (same arguments) succeeded in Run ${done.runId} [${done.toolCallId}]; a continuation never re-runs its parent's completed calls, and that result is not carried (not granted, or without provenance)`,
                },
              },
        ),
      );
    } else if (!argumentsAreJson(call.argumentsText)) {
      events.push(
        receipt({ ...base, status: 'failed', error: { code: 'bad_arguments', message: 'the arguments are not JSON; the call was not executed' } }),
      );
    } else if (now.getTime() >= Date.parse(limits.deadlineAt)) {
      // past the deadline nothing more is started (K7)
      events.push(
        receipt({
          ...base,
          status: 'denied',
          error: { code: 'deadline', message: `the Run's deadline ${limits.deadlineAt} has passed; the call was not executed` },
        }),
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
  if (!call || !call.dispatched) return [];
  if (call.receipt?.status === 'unknown' || (!call.receipt && (facts.settled || facts.fenced))) {
    return lateObservation(facts, call.toolCallId, call.name, t, now);
  }
  if (call.receipt || facts.settled) return [];
  const base = { toolCallId: call.toolCallId, name: call.name, durationMs: t.durationMs, ...effectOf(call.name) };
  const o = t.outcome;
  const data: EventData<'tool.call.receipt'> =
    o.kind === 'timed-out'
      ? { ...base, status: 'unknown', error: { code: 'timeout', message: `no outcome within ${o.timeoutMs} ms; the call is not re-run` } }
      : { ...base, ...outcomeFields(o, t.resultBucket) };
  return [makeEvent('tool.call.receipt', contextFrom(facts.lastEvent!), call.toolCallId, data, now)];
}

/** The real outcome after `unknown` (or after settlement), once; nothing for one that still has no outcome. */
function lateObservation(
  facts: RunFacts,
  toolCallId: string,
  name: string,
  t: Extract<ToolsTrigger, { type: 'ToolExecuted' }>,
  now: Date,
): RunEvent[] {
  const call = facts.toolCalls.get(toolCallId)!;
  if (call.lateObserved) return [];
  const o = t.outcome;
  if (o.kind === 'timed-out') return [];
  const base = { toolCallId, name, durationMs: t.durationMs, executor: t.executor ?? 'unknown' };
  const data: EventData<'tool.call.late_observed'> = { ...base, ...outcomeFields(o, t.resultBucket) };
  return [makeEvent('tool.call.late_observed', contextFrom(facts.lastEvent!), toolCallId, data, now)];
}

/**
 * What a receipt and a late observation say of a tool that returned, failed or threw: `succeeded`
 * with the result inline up to `INLINE_RESULT_LIMIT` bytes of JSON, else with a reference to it in
 * `resultBucket` (key and sha256 of the JSON, its size in bytes); `failed` with the tool's code
 * (`tool_error` for a throw) and its message bounded for the log.
 */
function outcomeFields(
  o: Exclude<ToolOutcome, { kind: 'timed-out' }>,
  resultBucket: string,
):
  | { status: 'succeeded'; result: unknown }
  | { status: 'succeeded'; resultRef: { bucket: string; key: string; sha256: string; bytes: number } }
  | { status: 'failed'; error: { code: string; message: string } } {
  if (o.kind === 'returned') {
    const bytes = Buffer.byteLength(o.json, 'utf8');
    if (bytes <= INLINE_RESULT_LIMIT) return { status: 'succeeded', result: JSON.parse(o.json) as unknown };
    const sha256 = sha256Hex(o.json);
    return { status: 'succeeded', resultRef: { bucket: resultBucket, key: sha256, sha256, bytes } };
  }
  return { status: 'failed', error: { code: o.kind === 'failed' ? o.code : 'tool_error', message: boundReportedText(o.message) } };
}
