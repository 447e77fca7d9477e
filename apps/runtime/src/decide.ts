/**
 * The runtime's decider: `decide(facts, trigger, now) -> RunEvent[]`, pure, decided from the
 * Run's folded facts alone (never from memory), so a restarted or redelivered handler decides the
 * same (K10, K11). The side effect, one model request, is not made here: the adapter makes it
 * only when this decider's `model.turn.requested` was appended by that adapter, and hands the
 * outcome back as a `ModelTurnEnded` trigger. The runtime never settles a Run (K9): when it stops
 * it records why (`run.execution.finished`), and the lifecycle settles.
 */
import {
  boundReportedText,
  clarificationIdOf,
  contextFrom,
  jsonBytes,
  makeEvent,
  sha256Hex,
  TURN_CONTENT_MAX_BYTES,
  TURN_PASSAGES_MAX,
  type EventData,
  type ExecutionStopReason,
  type RunEvent,
  type StreamedParagraph,
  type TokenPrice,
} from '@runplane/contracts';
import { epochSuperseded, lastTurn, parkedOn, turnCostOf, type RunFacts, type TurnFacts, unknownTrigger } from '@runplane/run-facts';
import { awaitingContext, carryContext, type EarlierRun } from './context.js';
import {
  DEFAULT_RETRY_BACKOFF,
  failuresInARow,
  isAnswer,
  isFinalizationTurn,
  isRetryableFailure,
  isTransientFailure,
  nextModelStep,
  retryDelayMs,
  type RetryBackoff,
} from './ledger.js';
import { overCeiling, type GrantCeiling } from './grant-ceiling.js';
import { clarificationOf, isResolved, parkingEvent } from './parking.js';
import { boundTurn, contentCut, planTurnCalls } from './sizes.js';

/** The outcome of one model request, as the model client reports it. */
export type ModelTurnResult =
  { ok: true; turn: Omit<EventData<'model.turn.completed'>, 'turn'> } | { ok: false; error: EventData<'model.turn.failed'>['error'] };

export type RuntimeTrigger =
  /**
   * Something happened on the Run (admission, a receipt, a wake, a redelivery): take the next
   * step. `waitTtlMs`: how long a question for a human stays answerable (capped by the deadline);
   * `maxTokensPerRequest`: the most `max_tokens` one request may ask for (what the model accepts);
   * `finalizationLeadMs`: how long before the deadline research stops for finalization (K9);
   * `ceiling`: the most a grant may hold here (`./grant-ceiling.ts`, defence in depth against a forged admission); `price`: the
   * configured price of `model` (`RUNPLANE_MODEL_PRICES`), recorded on each request with its money
   * reservation (K7); absent: the model is unpriced.
   */
  | {
      type: 'Wake';
      model: string;
      waitTtlMs?: number;
      maxTokensPerRequest?: number;
      finalizationLeadMs?: number;
      ceiling?: GrantCeiling;
      price?: TokenPrice;
    }
  /**
   * The model request of `turn` ended with `result`. `retryBackoff` (default
   * {@link DEFAULT_RETRY_BACKOFF}) and `random` (the jitter, a draw in [0, 1) the adapter made;
   * default 0) choose the backoff a transient failure records (K7).
   */
  | { type: 'ModelTurnEnded'; turn: number; result: ModelTurnResult; waitTtlMs?: number; retryBackoff?: RetryBackoff; random?: number }
  /**
   * While `turn` streams, these paragraphs of its text were finished (a blank line followed each),
   * and/or (`progress`) text kept streaming inside an unfinished paragraph: how many characters of
   * the turn had streamed and their sha256 (K7: `./paragraphs.ts` sends it at a bounded rate).
   */
  | { type: 'ParagraphsStreamed'; turn: number; paragraphs: StreamedParagraph[]; progress?: { characters: number; sha256: string } | null }
  /**
   * The replica holding lease `epoch` drains (SIGTERM) and has no model request of its own in
   * flight: hand the Run over at this safe point (`holder`: that replica).
   */
  | { type: 'HandOver'; epoch: number; holder: { service: string; instance: string }; reason: 'drain' }
  /**
   * Before the Run's first model request, the earlier Runs it carries material from were read
   * (`earlier`: the Runs named by `earlierRunIds`, by runId; a missing one is absent): decide
   * what it carries. `maxChars`: the context budget (`RUNPLANE_CONTEXT_MAX_CHARS`, infinite when
   * unbounded); at most half of it is carried, and at most `CARRIED_MAX_CHARS` (K2, K3).
   */
  | { type: 'CarryContext'; earlier: ReadonlyMap<string, EarlierRun>; maxChars: number };

/** How long a question for a human stays answerable when the trigger does not say (the default of `RUNPLANE_WAIT_TTL_SECONDS`), ms. */
export const DEFAULT_WAIT_TTL_MS = 3_600_000;

/**
 * Decides the runtime's events for a trigger.
 * - `Wake`: first, before the Run's first model request, a grant over `ceiling` (a forged or corrupt
 *   admission) stops the Run at once: `run.execution.finished` reason `grant-refused`, naming what
 *   exceeds (a forged or corrupt admission); so does a grant with a money limit whose model has no configured price (or
 *   one in another currency: K7, nothing could charge it). Then nothing while the Run must still record what it carries from earlier Runs
 *   (`context.carried`, decided by `./context.ts` before the first request, K2, K3); then, once
 *   every tool call of the last turn is resolved and before the deadline, the budget
 *   rules of `./ledger.ts` decide (K7, K9): the next turn with its reservation (a retry of an
 *   empty, cut or failed turn is a new, charged turn), the one-way move into finalization-only
 *   when a research allowance is spent and the reserve remains, or the stop
 *   (`run.execution.finished`); propose tool calls (and open waits, request children) a crash
 *   left undecided; nothing while a turn is in flight, receipts are missing or the Run is parked
 *   on a wait or a child (a turn is never requested twice). What was carved for children counts
 *   as used (K7).
 * - `ModelTurnEnded`: record the turn exactly once (`model.turn.completed` with its proposals,
 *   or `model.turn.failed`), and stop when the turn ends execution (an answer; the finalization
 *   turn's outcome, never retried; a failure no retry can fix, e.g. a 401; a request never sent
 *   (`not-sent`) or a failure at or past the deadline stops `deadline`, K7). An empty, cut or
 *   incomplete reply, or a retryable failure, is only recorded: the next wake retries it within
 *   budget (K9: it is never an answer); a transient failure of research (connection, timeout,
 *   429, 5xx) records the backoff before that retry (`retry`, `./ledger.ts` `retryDelayMs`, K7). No call of a length-cut or finalization turn is
 *   proposed. A parking call (`ask_human`, `spawn_subagent`) becomes
 *   `wait.opened` or `child.run.requested` instead of a proposal (`./parking.ts`), and the
 *   turn's ordinary calls are proposed as usual. An `ask_clarification` ends the Run instead
 *   (K2): `clarification.requested`, then `run.execution.finished` `clarification-requested`,
 *   nothing of the turn proposed (recorded on a later `Wake` too, if a crash came between). Nothing when the turn is not the one in flight.
 *   The turn is bounded first (`./sizes.ts`, K9, K11): a text over its size limit is recorded cut
 *   (`cut`) and is no answer (retried within budget, nothing proposed); a call whose arguments or
 *   name were cut is never proposed nor parked on (the model reads `arguments_too_large`); a
 *   failure message is cut to its limit; an `unrecordable` failure (the log refused the record for
 *   good) is never retried: the Run stops `model-error`.
 * - `ParagraphsStreamed`: record each paragraph not recorded yet (`model.output.paragraph`, once
 *   per turn and index) while its turn is the one in flight, so the text survives the turn (a
 *   crash, a cancel, a failure); nothing once the turn has its outcome or after a cancel, nor for a
 *   paragraph over the turn text limit or past the turn's passage limit (the turn's record says what was kept). With
 *   `progress`, also `model.output.progress` (K7: text still streaming inside an unfinished
 *   paragraph resets the no-progress clock) when it is past what the turn recorded before
 *   (strictly more characters), under the same conditions.
 * - `HandOver`: the draining holder of lease `epoch` records `run.handed_over` (once per epoch),
 *   which closes its epoch (K6) and is the wake the next holder takes the Run with at `epoch + 1`
 *   (K10). Only at a safe point as the log shows it: no model turn requested without its outcome
 *   (a turn in flight has no known outcome: the Run is released `stopping` and fenced instead).
 *   Nothing for a Run parked on a wait or a child (it is released `parked`), after a cancel, or
 *   when the epoch is closed already (handed over, parked by recovery, a later grant).
 * - `CarryContext`: what the Run carries from earlier Runs, once, before its first model request
 *   (K2, K3; material chosen by `./context.ts` `carryContext`): `context.carried`, or
 *   `run.execution.finished` with reason `context-refused` when a continuation's parent cannot be
 *   verified (missing, in another conversation, or its request does not match
 *   `parentRequestSha256`). Nothing when the Run does not need it or has it already.
 * @param now the decision clock, compared with the Run's `deadlineAt`.
 */
export function decide(facts: RunFacts, trigger: RuntimeTrigger, now: Date): RunEvent[] {
  // a fenced execution is over for good: nothing is requested, recorded or stopped by a stale holder (K6, K10)
  if (!facts.admitted || !facts.lastEvent || facts.finished || facts.settled || facts.fenced) return [];
  switch (trigger.type) {
    case 'Wake': {
      // a grant over the deployment's ceiling was not admitted by its rules (a forgery): never executed (docs/guarantees.md "Who may do what")
      const over =
        facts.turns.length === 0
          ? ((trigger.ceiling ? overCeiling(facts, trigger.ceiling) : null) ?? unchargeable(facts, trigger.model, trigger.price))
          : null;
      if (over)
        return [
          makeEvent(
            'run.execution.finished',
            contextFrom(facts.lastEvent),
            'finished',
            { reason: 'grant-refused', detail: over, answerTurn: null },
            now,
          ),
        ];
      // no model request before what the Run carries from earlier Runs is recorded (K2, K3: ./context.ts)
      return awaitingContext(facts) ? [] : onWake(facts, trigger, now);
    }
    case 'ModelTurnEnded':
      return onTurnEnded(facts, trigger, now);
    case 'ParagraphsStreamed':
      return onParagraphs(facts, trigger.turn, trigger.paragraphs, trigger.progress ?? null, now);
    case 'HandOver':
      return onHandOver(facts, trigger, now);
    case 'CarryContext':
      return onCarryContext(facts, trigger, now);
    default:
      return unknownTrigger('runtime', trigger);
  }
}

/**
 * Why the Run's money limit cannot be charged (K7), or null: a Run with `maxCost` whose model has
 * no configured price, or a price in another currency, is never executed (`grant-refused`);
 * admission refuses such a message already (400), this is the runtime's own check.
 */
function unchargeable(facts: RunFacts, model: string, price: TokenPrice | undefined): string | null {
  const limit = facts.admitted!.limits.maxCost;
  if (!limit) return null;
  if (!price) return `the grant has a money limit but model ${model} has no configured price (RUNPLANE_MODEL_PRICES): its cost cannot be charged`;
  if (price.currency !== limit.currency)
    return `the grant's money limit is in ${limit.currency} but model ${model} is priced in ${price.currency}: its cost cannot be charged`;
  return null;
}

function onCarryContext(facts: RunFacts, trigger: Extract<RuntimeTrigger, { type: 'CarryContext' }>, now: Date): RunEvent[] {
  if (!awaitingContext(facts)) return [];
  const ctx = contextFrom(facts.lastEvent!);
  const carried = carryContext(facts, trigger.earlier, trigger.maxChars);
  if ('refused' in carried) {
    return [makeEvent('run.execution.finished', ctx, 'finished', { reason: 'context-refused', detail: carried.refused, answerTurn: null }, now)];
  }
  return [makeEvent('context.carried', ctx, 'context', carried, now)];
}

function onHandOver(facts: RunFacts, trigger: Extract<RuntimeTrigger, { type: 'HandOver' }>, now: Date): RunEvent[] {
  if (facts.cancelRequested || parkedOn(facts) || epochSuperseded(facts, trigger.epoch)) return [];
  const last = lastTurn(facts);
  if (last && !last.completed && !last.failed) return []; // a model request in flight: not a safe point
  const pendingToolCalls = [...facts.toolCalls.values()].filter((c) => !c.receipt).length;
  return [
    makeEvent(
      'run.handed_over',
      contextFrom(facts.lastEvent!),
      `handover/${trigger.epoch}`,
      { epoch: trigger.epoch, holder: trigger.holder, reason: trigger.reason, pendingToolCalls },
      now,
    ),
  ];
}

function onWake(facts: RunFacts, trigger: Extract<RuntimeTrigger, { type: 'Wake' }>, now: Date): RunEvent[] {
  const { model, maxTokensPerRequest, finalizationLeadMs, price } = trigger;
  const waitTtlMs = trigger.waitTtlMs ?? DEFAULT_WAIT_TTL_MS;
  if (facts.cancelRequested) return []; // nothing new starts after the user's cancel (K4)
  const { limits } = facts.admitted!;
  const last = lastTurn(facts);
  if (last && !last.completed && !last.failed) return [];
  // an answer, the finalization turn's outcome or a failure no retry can fix ends the Run, even past the deadline
  if (last && (isAnswer(last) || facts.finalization || (last.failed && !isRetryableFailure(last.failed.error))))
    return nextModelStep(facts, model, now, maxTokensPerRequest, finalizationLeadMs, price);
  const calls = last?.completed ? proposableCalls(last.completed, isFinalizationTurn(last)) : [];
  if (calls.length > 0) {
    const missing = undecidedCalls(facts, last!, waitTtlMs, now);
    if (missing.length > 0) return missing;
    const asked = clarificationOf(planTurnCalls(facts, last!.turn, calls, last!.completed!.cut, new Date(last!.completedAt ?? now)));
    if (asked) return [clarificationStop(facts, last!.turn, asked.question, now)];
  }
  // past the deadline nothing more is started, and waiting for receipts ends too (a step never waits past it)
  if (now.getTime() >= Date.parse(limits.deadlineAt)) return [finished(facts, now, 'deadline', `deadline ${limits.deadlineAt} passed`, null)];
  if (parkedOn(facts)) return []; // parked: only the wait's answer or the child's settlement continues it (K10)
  if (calls.length > 0) {
    const plans = planTurnCalls(facts, last!.turn, calls, last!.completed!.cut, new Date(last!.completedAt ?? now));
    if (calls.some((c) => !isResolved(facts, c, plans.get(c.toolCallId)!))) return [];
  }
  // the ledger decides: the next research turn (a retry after a fruitless one), finalization-only, or the stop (K7, K9)
  return nextModelStep(facts, model, now, maxTokensPerRequest, finalizationLeadMs, price);
}

/** Proposals, waits and child requests of the completed turn `last` that are not recorded yet (a crash between appends). */
function undecidedCalls(facts: RunFacts, last: TurnFacts, waitTtlMs: number, now: Date): RunEvent[] {
  const ctx = contextFrom(facts.lastEvent!);
  const calls = last.completed!.toolCalls;
  const completedAt = new Date(last.completedAt ?? now);
  const plans = planTurnCalls(facts, last.turn, calls, last.completed!.cut, completedAt);
  const out: RunEvent[] = [];
  for (const c of calls) {
    const plan = plans.get(c.toolCallId)!;
    if (plan.kind === 'tool' && !facts.toolCalls.has(c.toolCallId))
      out.push(makeEvent('tool.call.proposed', ctx, c.toolCallId, { ...c, turn: last.turn }, now));
    const recorded =
      plan.kind === 'wait'
        ? [...facts.waits.values()].some((w) => w.toolCallId === c.toolCallId)
        : plan.kind === 'child'
          ? [...facts.children.values()].some((ch) => ch.toolCallId === c.toolCallId)
          : plan.kind === 'clarification'
            ? facts.clarifications.has(clarificationIdOf(facts.runId, c.toolCallId))
            : true;
    if (!recorded) out.push(parkingEvent(facts, ctx, c, last.turn, plan, completedAt, waitTtlMs, now)!);
  }
  return out;
}

function onTurnEnded(facts: RunFacts, trigger: Extract<RuntimeTrigger, { type: 'ModelTurnEnded' }>, now: Date): RunEvent[] {
  const { turn: turnNo, result } = trigger;
  const waitTtlMs = trigger.waitTtlMs ?? DEFAULT_WAIT_TTL_MS;
  const last = lastTurn(facts);
  if (!last || last.turn !== turnNo || last.completed || last.failed) return [];
  const ctx = contextFrom(facts.lastEvent!);
  const finalTurn = isFinalizationTurn(last);
  if (!result.ok) {
    const error = { ...result.error, message: boundReportedText(result.error.message) };
    const failed: EventData<'model.turn.failed'> = { turn: turnNo, error };
    const cost = turnCostOf(last.request, null, failed);
    if (cost) failed.cost = cost; // unknown usage is a range up to the reservation, never 0 (K7)
    // a transient failure of research is retried by a later wake, after a backoff recorded here (K7):
    // exponential in the failures in a row, with the adapter's jitter, at least the provider's Retry-After
    const deadlineAt = facts.admitted!.limits.deadlineAt;
    if (!finalTurn && isTransientFailure(result.error) && now.getTime() < Date.parse(deadlineAt)) {
      const n = failuresInARow({ ...facts, turns: facts.turns.slice(0, -1) }) + 1;
      const delayMs = Math.max(retryDelayMs(n, trigger.retryBackoff ?? DEFAULT_RETRY_BACKOFF, trigger.random ?? 0), result.error.retryAfterMs ?? 0);
      failed.retry = { failuresInARow: n, delayMs, notBefore: new Date(now.getTime() + delayMs).toISOString() };
    }
    const events: RunEvent[] = [makeEvent('model.turn.failed', ctx, turnNo, failed, now)];
    // never sent (the rate-limit pause ends after the deadline), or cut at / ended after the deadline:
    // nothing new starts, the Run stops with the honest reason (K7), not a budget it did not spend
    if (result.error.kind === 'not-sent' || now.getTime() >= Date.parse(deadlineAt)) {
      const what = result.error.kind === 'not-sent' ? 'was never sent to the model' : 'failed';
      events.push(
        finished(
          facts,
          now,
          'deadline',
          `${finalTurn ? 'finalization ' : ''}turn ${turnNo} ${what} (${result.error.message}); deadline ${deadlineAt}`,
          null,
        ),
      );
      return events;
    }
    // a retryable failure is retried by the next wake, within the budget (K7); the finalization request is never retried
    if (finalTurn || !isRetryableFailure(result.error))
      events.push(finished(facts, now, 'model-error', `${finalTurn ? 'finalization ' : ''}turn ${turnNo}: ${result.error.message}`, null));
    return events;
  }
  // bounded where the model's output enters the product: its record always fits the log (K9, K11: ./sizes.ts)
  const completed: EventData<'model.turn.completed'> = { turn: turnNo, ...boundTurn(result.turn) };
  const cost = turnCostOf(last.request, completed, null);
  if (cost) completed.cost = cost; // measured from the usage at the request's price, or the range up to its reservation (K7)
  const events: RunEvent[] = [makeEvent('model.turn.completed', ctx, turnNo, completed, now)];
  // canceled meanwhile: the reply is recorded (it happened, and was paid for), nothing follows from it (K4)
  if (facts.cancelRequested) return events;
  if (proposableCalls(completed, finalTurn).length > 0) {
    const plans = planTurnCalls(facts, turnNo, completed.toolCalls, completed.cut, now);
    for (const c of completed.toolCalls) {
      const plan = plans.get(c.toolCallId)!;
      if (plan.kind === 'tool') events.push(makeEvent('tool.call.proposed', ctx, c.toolCallId, { ...c, turn: turnNo }, now));
      else {
        const parking = parkingEvent(facts, ctx, c, turnNo, plan, now, waitTtlMs, now);
        if (parking) events.push(parking);
      }
    }
    // a clarification ends the Run: its question is the answer, the reply is a new Run (K2)
    const asked = clarificationOf(plans);
    if (asked) events.push(clarificationStop(facts, turnNo, asked.question, now));
    return events;
  }
  const ended = { ...last, completed };
  // an answer (or the finalization turn's outcome) stops here; an empty, cut or incomplete reply is retried by the next wake, within budget
  if (isAnswer(ended) || finalTurn) events.push(...nextModelStep({ ...facts, turns: [...facts.turns.slice(0, -1), ended] }, last.request.model, now));
  return events;
}

/**
 * The calls of a completed turn that may be proposed: none when the reply was cut by the length
 * limit or whose text was cut for its size, even those whose arguments look complete (the model's
 * turn is not whole; K5, K9).
 */
function proposableCalls(done: NonNullable<TurnFacts['completed']>, finalization: boolean): NonNullable<TurnFacts['completed']>['toolCalls'] {
  return done.finishReason === 'length' || finalization || contentCut(done) ? [] : done.toolCalls;
}

/**
 * Records the streamed paragraphs of the turn in flight not yet recorded, then the progress
 * evidence when it is past the turn's last one (never after a cancel, never for another turn).
 */
function onParagraphs(
  facts: RunFacts,
  turnNo: number,
  paragraphs: StreamedParagraph[],
  progress: { characters: number; sha256: string } | null,
  now: Date,
): RunEvent[] {
  const last = lastTurn(facts);
  if (facts.cancelRequested || !last || last.turn !== turnNo || last.completed || last.failed) return [];
  const ctx = contextFrom(facts.lastEvent!);
  const recorded = new Set(last.paragraphs.map((p) => p.index));
  // a paragraph over the size limit is not recorded on its own: the turn's text is then over it too,
  // and the turn's record says what was kept of it (./sizes.ts)
  const events: RunEvent[] = paragraphs
    .filter((p) => !recorded.has(p.index) && p.index < TURN_PASSAGES_MAX && jsonBytes(p.text) <= TURN_CONTENT_MAX_BYTES)
    .map((p) =>
      makeEvent(
        'model.output.paragraph',
        ctx,
        `${turnNo}/${p.index}`,
        { turn: turnNo, index: p.index, text: p.text, sha256: sha256Hex(p.text) },
        now,
      ),
    );
  if (progress && progress.characters > last.progressCharacters) {
    events.push(makeEvent('model.output.progress', ctx, `${turnNo}/progress/${progress.characters}`, { turn: turnNo, ...progress }, now));
  }
  return events;
}

function clarificationStop(facts: RunFacts, turn: number, question: string, now: Date): RunEvent {
  return finished(facts, now, 'clarification-requested', `turn ${turn} asked the user to clarify: ${question}`, turn);
}

function finished(facts: RunFacts, now: Date, reason: ExecutionStopReason, detail: string, answerTurn: number | null): RunEvent {
  return makeEvent('run.execution.finished', contextFrom(facts.lastEvent!), 'finished', { reason, detail, answerTurn }, now);
}

/** The lease a runtime holds while it decides: its fencing epoch, the holder (this process) and the TTL, ms (K6). */
export type LeaseGrant = EventData<'lease.granted'>;

/**
 * The events of a decision made under `grant`, with the grant recorded first when the log does
 * not hold it yet (K6; recovery is off the happy path): the runtime records its own `lease.granted`, on its own
 * subject, in the same decision (the same append) as its first event under the lease, so the
 * grant costs no extra append and no round trip through recovery. Nothing is added to an empty
 * decision (a holder that wrote nothing has nothing to record), nor when the log already holds
 * that epoch or a later one (a grant recorded by recovery in an older log, or a holder superseded
 * since: its append is refused or decided empty elsewhere).
 * @param now the decision clock (the grant's `occurredAt`: when it was recorded, not when the bucket granted it).
 */
export function withGrant(facts: RunFacts, grant: LeaseGrant, events: RunEvent[], now: Date): RunEvent[] {
  if (events.length === 0 || !facts.lastEvent || facts.leases.some((l) => l.epoch >= grant.epoch)) return events;
  return [makeEvent('lease.granted', contextFrom(facts.lastEvent), `lease/${grant.epoch}`, grant, now), ...events];
}
