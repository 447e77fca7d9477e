/**
 * The runtime's budget rules (K7, K9), pure: what the Run's next model step is once nothing else
 * is pending (every call of the last turn resolved, not parked, before the deadline). Decided from
 * the ledger (`budgetOf`) alone, so a redelivered wake decides the same:
 * - the last turn answered: stop `answered` (a finalization answer lists what was unfinished);
 * - the last turn failed with an error that a new request cannot fix (HTTP 4xx other than 408,
 *   409, 425, 429): stop `model-error`;
 * - {@link MAX_FRUITLESS_TURNS} replies in a row without text or a valid tool call (empty, cut,
 *   incomplete, malformed; failed requests are not the model's and are skipped): stop `no-progress`;
 * - the last request failed transiently and its recorded backoff (`model.turn.failed` `retry`,
 *   K7) ends at or after the deadline: stop `model-error`; before it ends: no request yet (neither
 *   research nor finalization; a stop is not delayed);
 * - research may go on (model requests, input and output tokens left after the final-output
 *   reserve): request the next
 *   turn, reserving `max_tokens` (what remains of research output tokens) and the input estimate;
 *   a turn after an empty, cut, incomplete or failed one is a retry (`retryOf`), charged like any;
 * - a research allowance is spent (or the deadline is closer than the finalization lead), the
 *   reserve remains and there is material to answer from: move ONE WAY into finalization-only (`run.finalization.started`) and request the one last turn
 *   (no tools, `purpose: finalization`); without a reserve or material: stop with the limit;
 * - in finalization-only: the finalization turn's outcome stops the Run; nothing returns to research.
 */
import {
  contextFrom,
  makeEvent,
  type EventData,
  type ExecutionStopReason,
  type RunEvent,
  type StoredEvent,
  type TokenPrice,
  type UnansweredPart,
} from '@runplane/contracts';
import {
  budgetOf,
  estimateInputTokens,
  evolve,
  lastTurn,
  reservationMicros,
  tokensCostMicros,
  type Ledger,
  type RunFacts,
  type TurnFacts,
} from '@runplane/run-facts';
import { contentCut, describeContentCut } from './sizes.js';

/** Fruitless turns in a row (no text, no valid tool call: empty, cut, incomplete or failed) after which the Run stops `no-progress` (K9). */
export const MAX_FRUITLESS_TURNS = 3;

/** HTTP statuses worth a new request: timeout, conflict, too early, rate limit; every 5xx. */
export function isRetryableFailure(error: EventData<'model.turn.failed'>['error']): boolean {
  // a reply the log refused for its size or schema would be refused again (K9, K11: recorded, never retried)
  if (error.kind === 'unrecordable') return false;
  if (error.kind !== 'http') return true; // timeout, connection, invalid (malformed) reply
  const s = error.status;
  return s === null || s === 408 || s === 409 || s === 425 || s === 429 || s >= 500;
}

/**
 * The retry backoff of failed model requests (K7), ms (`RUNPLANE_MODEL_RETRY_MIN_MS`,
 * `RUNPLANE_MODEL_RETRY_MAX_MS`): p-retry's `minTimeout` and `maxTimeout`, with its `factor` 2.
 */
export interface RetryBackoff {
  minMs: number;
  maxMs: number;
}

/** The backoff when the runtime's settings do not say: 1 s, doubling, at most 30 s. */
export const DEFAULT_RETRY_BACKOFF: RetryBackoff = { minMs: 1_000, maxMs: 30_000 };

/** How much each failure in a row multiplies the backoff (p-retry's default `factor`). */
export const RETRY_FACTOR = 2;

/**
 * The wait before the next request after `failuresInARow` failed ones (K7), ms: p-retry's
 * backoff with `randomize` (`round((1 + random) * minMs * 2^(n-1))`, at most `maxMs`), with its
 * randomness passed in, since a decider draws none (p-retry keeps its formula internal, and its
 * own loop would keep the wait in memory, not on the log).
 * @param failuresInARow 1 for the first failure.
 * @param random a draw in [0, 1) made by the adapter (the jitter).
 */
export function retryDelayMs(failuresInARow: number, policy: RetryBackoff, random: number): number {
  if (policy.minMs <= 0) return 0;
  const jitter = 1 + Math.min(Math.max(random, 0), 1);
  const exponent = Math.min(Math.max(failuresInARow, 1) - 1, 52);
  return Math.min(Math.round(jitter * policy.minMs * RETRY_FACTOR ** exponent), policy.maxMs);
}

/**
 * True for a failure that says nothing about the model and that a later request may not meet: the
 * endpoint unreachable or cut (`connection`, `timeout`) or overloaded (429, 5xx...). These back off
 * before the retry; a malformed reply does not (the endpoint answered).
 */
export function isTransientFailure(error: EventData<'model.turn.failed'>['error']): boolean {
  return (error.kind === 'connection' || error.kind === 'timeout' || error.kind === 'http') && isRetryableFailure(error);
}

/** Failed requests in a row at the end of the Run (transient failures only, {@link isTransientFailure}). */
export function failuresInARow(facts: RunFacts): number {
  let n = 0;
  for (let i = facts.turns.length - 1; i >= 0; i--) {
    const failed = facts.turns[i]!.failed;
    if (!failed || !isTransientFailure(failed.error)) break;
    n++;
  }
  return n;
}

/** The backoff recorded on the last turn's failure (`model.turn.failed` `retry`), or null when the last turn did not fail with one. */
export function pendingRetry(facts: RunFacts): (NonNullable<EventData<'model.turn.failed'>['retry']> & { turn: number }) | null {
  const last = lastTurn(facts);
  const retry = last?.failed?.retry;
  return retry ? { ...retry, turn: last.turn } : null;
}

/**
 * How long (ms) the adapter waits before waking the Run again: until the recorded backoff ends
 * (`notBefore`), 0 when there is none, it has ended, or it ends at or after the deadline (the
 * decider then stops the Run at once).
 */
export function retryWaitMs(facts: RunFacts, now: Date): number {
  const retry = pendingRetry(facts);
  if (!retry || !facts.admitted) return 0;
  const at = Date.parse(retry.notBefore);
  if (at >= Date.parse(facts.admitted.limits.deadlineAt)) return 0;
  return Math.max(0, at - now.getTime());
}

/** True when the turn is the finalization request (K9). */
export function isFinalizationTurn(t: TurnFacts): boolean {
  return t.request.purpose === 'finalization';
}

/** True when a completed turn is an answer: finished normally (`stop`; a finalization turn also `tool_calls`) with visible text. */
export function isAnswer(t: TurnFacts): boolean {
  const done = t.completed;
  if (!done || isBlank(done.content) || contentCut(done)) return false;
  if (done.finishReason === 'stop') return done.toolCalls.length === 0 || isFinalizationTurn(t);
  return isFinalizationTurn(t) && done.finishReason === 'tool_calls';
}

/** True for text with nothing visible: whitespace, zero-width and other format characters only. */
export function isBlank(text: string): boolean {
  return text.replace(/[\s\p{Cf}\p{Cc}]/gu, '') === '';
}

/** Why a turn made no progress (no text and no valid tool call), or null when it made some. */
export function fruitless(t: TurnFacts): string | null {
  if (t.failed) return `turn ${t.turn} failed: ${t.failed.error.message}`;
  const done = t.completed;
  if (!done) return null;
  if (done.finishReason === 'length') return `turn ${t.turn} stopped at the length limit`;
  const cut = contentCut(done);
  if (cut) return describeContentCut(t.turn, cut);
  if (done.toolCalls.length > 0 && !isFinalizationTurn(t)) return null;
  if (isBlank(done.content)) return `turn ${t.turn} returned no text`;
  if (done.finishReason !== 'stop') return `turn ${t.turn} ended with finish_reason=${done.finishReason}, not a finished answer`;
  return null;
}

/** The stop reason a fruitless completed turn means (`empty-output`, `truncated-output`, `incomplete-output`). */
function stopReasonOf(t: TurnFacts): ExecutionStopReason {
  if (t.failed) return 'model-error';
  const done = t.completed!;
  if (done.finishReason === 'length' || contentCut(done)) return 'truncated-output';
  if (isBlank(done.content)) return 'empty-output';
  return 'incomplete-output';
}

/** True when the Run has something to answer from: a turn's visible text or a succeeded tool result. */
export function hasMaterial(facts: RunFacts): boolean {
  return (
    facts.turns.some((t) => !!t.completed && !isBlank(t.completed.content)) ||
    [...facts.toolCalls.values()].some((c) => c.receipt?.status === 'succeeded') ||
    [...facts.children.values()].some((c) => !!c.result?.answer)
  );
}

/**
 * The fewest output tokens a research request must be able to pay for under a money limit (K7),
 * unless the token budget allows fewer: a request whose `max_tokens` money would cut below this
 * is not made (research stops `token-limit`), since a reply cut that short is rarely usable.
 */
export const MIN_PAID_OUTPUT_TOKENS = 256;

/**
 * The most output tokens the money left pays for after the next request's input estimate (K7),
 * or null when the Run has no money limit. 0 when the input estimate alone does not fit (or the
 * Run's model has no price: such a grant is refused before its first request).
 * O(1): from the ledger `b` and the estimate.
 */
export function affordableOutputTokens(b: Ledger, price: TokenPrice | undefined, inputEstimate: number): number | null {
  if (b.cost.limit === null) return null;
  if (!price) return 0;
  const left = b.cost.left! - tokensCostMicros(inputEstimate, price.inputMicrosPerMTok);
  if (left < 0) return 0;
  if (price.outputMicrosPerMTok === 0) return Number.MAX_SAFE_INTEGER;
  let paid = Math.floor((left * 1_000_000) / price.outputMicrosPerMTok);
  // past 2^53 the division may round up: step back until the reservation fits for certain
  while (paid > 0 && tokensCostMicros(paid, price.outputMicrosPerMTok) > left) paid--;
  return paid;
}

/** The money line in words: used (measured plus the unknown bound) and carved, of the limit. */
function describeCost(b: Ledger): string {
  const c = b.cost;
  const unknown = c.unknownMax ? ` (${c.measured} measured + up to ${c.unknownMax} for turns whose usage is unknown)` : '';
  const carved = c.carved ? ` + ${c.carved} carved` : '';
  return `${c.used}${unknown}${carved} of ${c.limit} micro-${c.currency ?? ''}`;
}

/**
 * The research limit that is reached, with its detail, or null while research may go on (K7).
 * `price`: the Run's model's price, for a Run with a money limit: research stops `token-limit`
 * when the money left pays for the next request's input estimate and fewer than
 * {@link MIN_PAID_OUTPUT_TOKENS} output tokens (or fewer than the token budget's own `max_tokens`).
 */
export function researchLimit(
  facts: RunFacts,
  price?: TokenPrice,
  maxTokensPerRequest = Number.POSITIVE_INFINITY,
): { reason: 'model-request-limit' | 'token-limit'; detail: string } | null {
  const b = budgetOf(facts);
  const m = b.modelRequests;
  if (m.researchLeft !== null && m.researchLeft <= 0) {
    const carved = m.carved ? ` (+${m.carved} carved for child Runs)` : '';
    const reserved = m.reserve ? `; research budget spent (${m.reserve} kept for finalization)` : '';
    return { reason: 'model-request-limit', detail: `${m.used} of ${m.limit} model requests used${carved}${reserved}` };
  }
  const out = b.outputTokens;
  if (out.researchLeft !== null && out.researchLeft <= 0) {
    const flagged = out.estimated ? ` (${out.estimated} estimated: usage unknown)` : '';
    return {
      reason: 'token-limit',
      detail: `research output token budget spent: ${out.used}${flagged} + ${out.carved} carved of ${out.limit}, ${out.reserve} kept for finalization`,
    };
  }
  const inp = b.inputTokens;
  const next = estimateInputTokens(facts);
  if (inp.limit !== null && inp.used + inp.carved + next > inp.limit) {
    const flagged = inp.estimated ? ` (${inp.estimated} estimated: usage unknown)` : '';
    return {
      reason: 'token-limit',
      detail: `input token budget: ${inp.used}${flagged} used + ${inp.carved} carved + ~${next} for the next request exceeds ${inp.limit}`,
    };
  }
  const paid = affordableOutputTokens(b, price, next);
  const wanted = Math.min(MIN_PAID_OUTPUT_TOKENS, out.researchLeft ?? Number.POSITIVE_INFINITY, maxTokensPerRequest);
  if (paid !== null && paid < wanted) {
    return {
      reason: 'token-limit',
      detail: `money budget: ${describeCost(b)} used; the next request (~${next} input tokens and at least ${wanted} output tokens) does not fit`,
    };
  }
  return null;
}

/**
 * The next model step after the last turn (see the module comment). `ctx` events are built from
 * the Run's last event. Never called while a turn is in flight, a call is unresolved or the Run
 * is parked.
 */
export function nextModelStep(
  facts: RunFacts,
  model: string,
  now: Date,
  maxTokensPerRequest?: number,
  finalizationLeadMs = 0,
  price?: TokenPrice,
): RunEvent[] {
  const last = lastTurn(facts);
  const ctx = contextFrom(facts.lastEvent!);
  const fin = facts.finalization;
  if (fin) {
    // one way: the finalization turn's outcome ends the Run, whatever it is (K9)
    const finalTurn = facts.turns.find(isFinalizationTurn);
    if (!finalTurn) return [requestTurn(facts, model, now, { finalization: true, maxTokensPerRequest, price })]; // a crash between the two appends
    if (!finalTurn.completed && !finalTurn.failed) return [];
    if (isAnswer(finalTurn))
      return [finishedEvent(facts, now, 'answered', `finalization answer in turn ${finalTurn.turn}`, finalTurn.turn, fin.unfinished)];
    const why = fruitless(finalTurn) ?? `turn ${finalTurn.turn} is not an answer`;
    return [finishedEvent(facts, now, stopReasonOf(finalTurn), `finalization ${why}; research had stopped: ${fin.detail}`, null)];
  }
  if (last && isAnswer(last)) return [finishedEvent(facts, now, 'answered', `answer in turn ${last.turn}`, last.turn)];
  if (last?.failed && !isRetryableFailure(last.failed.error)) {
    return [finishedEvent(facts, now, 'model-error', `turn ${last.turn}: ${last.failed.error.message}`, null)];
  }
  const streak = fruitlessStreak(facts);
  // the model replied with nothing usable several times in a row: stop, reporting no answer (K9); a
  // failed request (a rate limit, an outage) is the provider's, not the model's: only the budget ends those
  const replies = fruitlessStreak(facts, true);
  if (replies.length >= MAX_FRUITLESS_TURNS) {
    return [
      finishedEvent(
        facts,
        now,
        'no-progress',
        `no answer was produced: ${replies.length} replies in a row made no progress (${replies.join('; ')})`,
        null,
      ),
    ];
  }
  // the last request failed and its backoff is recorded (K7): a retry that would start at or after
  // the deadline is not made, and none is made before the backoff ends (a stop is not delayed)
  const retry = pendingRetry(facts);
  const deadlineMs = Date.parse(facts.admitted!.limits.deadlineAt);
  if (retry && Date.parse(retry.notBefore) >= deadlineMs) {
    const why = last?.failed ? `${last.failed.error.message}` : 'failed';
    return [
      finishedEvent(
        facts,
        now,
        'model-error',
        `turn ${retry.turn} failed (${why}), ${retry.failuresInARow} failed request(s) in a row; its retry, backed off ${retry.delayMs} ms to ${retry.notBefore}, would start after the deadline ${facts.admitted!.limits.deadlineAt}`,
        null,
      ),
    ];
  }
  const backingOff = !!retry && now.getTime() < Date.parse(retry.notBefore);
  const canFinalize = () => {
    const reserve = facts.admitted!.limits.finalOutputReserve;
    const b = budgetOf(facts);
    return (
      (reserve?.modelRequests ?? 0) >= 1 &&
      (b.modelRequests.left ?? 1) >= 1 &&
      (b.outputTokens.left ?? 1) >= 1 &&
      (b.inputTokens.limit === null || b.inputTokens.used + b.inputTokens.carved + estimateInputTokens(facts) <= b.inputTokens.limit) &&
      (affordableOutputTokens(b, price, estimateInputTokens(facts)) ?? 1) >= 1 &&
      hasMaterial(facts)
    );
  };
  const startFinalization = (reason: EventData<'run.finalization.started'>['reason'], detail: string): RunEvent[] => {
    const unfinished: UnansweredPart[] = [
      {
        part: 'research not finished',
        reason: `ordinary research stopped (${reason}: ${detail}); the answer was written from the material gathered until then`,
      },
    ];
    return [
      makeEvent('run.finalization.started', ctx, 'finalization', { reason, detail, unfinished }, now),
      requestTurn(facts, model, now, { finalization: true, maxTokensPerRequest, price }),
    ];
  };
  // the deadline is close: with material and the reserve, answer from it now rather than research
  // until cut off (K9); the lead is at most a quarter of the Run's whole time, so a short Run still researches
  const leftMs = deadlineMs - now.getTime();
  const leadMs = Math.min(finalizationLeadMs, (deadlineMs - Date.parse(facts.admitted!.at)) / 4);
  if (leadMs > 0 && leftMs < leadMs && canFinalize()) {
    if (backingOff) return [];
    return startFinalization('deadline', `${Math.max(0, Math.round(leftMs / 1000))} s left before the deadline ${facts.admitted!.limits.deadlineAt}`);
  }
  const limit = researchLimit(facts, price, maxTokensPerRequest);
  if (limit) {
    const noAnswer = streak.length > 0 ? `; no answer was produced: ${streak.join('; ')}` : '';
    if (!canFinalize()) return [finishedEvent(facts, now, limit.reason, `${limit.detail}${noAnswer}`, null)];
    if (backingOff) return [];
    return startFinalization(limit.reason, limit.detail);
  }
  if (backingOff) return [];
  return [requestTurn(facts, model, now, { retryOf: streak.length > 0 ? last!.turn : undefined, maxTokensPerRequest, price })];
}

/**
 * Why each of the last turns made no progress, oldest first (empty when the last turn made some).
 * `repliesOnly`: count only what the model sent (empty, cut, incomplete or malformed replies), not
 * requests that failed (HTTP errors, timeouts, connection losses); those are skipped, not counted.
 */
function fruitlessStreak(facts: RunFacts, repliesOnly = false): string[] {
  const out: string[] = [];
  for (let i = facts.turns.length - 1; i >= 0; i--) {
    const t = facts.turns[i]!;
    const why = fruitless(t);
    if (!why) break;
    if (repliesOnly && t.failed && t.failed.error.kind !== 'invalid-response') continue;
    out.unshift(why);
  }
  return out;
}

/**
 * `model.turn.requested` for the next turn with the ledger's reservation: `maxTokens` what remains
 * of research output tokens (the finalization request: the reserve, capped by what is left), and
 * the input estimate, when the Run has token limits. `maxTokensPerRequest` (the runtime's
 * `RUNPLANE_MODEL_MAX_TOKENS`: what the model accepts in one reply) caps `maxTokens`. With a
 * `price` (K7), the request records it with its money reservation (`price.reservedMicros`: the
 * input estimate and `maxTokens` at the price); under a money limit `maxTokens` is also capped by
 * what the money left pays for after the input estimate.
 */
function requestTurn(
  facts: RunFacts,
  model: string,
  now: Date,
  opts: { finalization?: boolean; retryOf?: number | undefined; maxTokensPerRequest?: number | undefined; price?: TokenPrice | undefined },
): RunEvent {
  const turn = facts.turns.length + 1;
  const limits = facts.admitted!.limits;
  const b = budgetOf(facts);
  const data: EventData<'model.turn.requested'> = { turn, model };
  const cap = opts.maxTokensPerRequest ?? Number.POSITIVE_INFINITY;
  if (b.outputTokens.limit !== null) {
    const reserve = limits.finalOutputReserve?.outputTokens ?? 0;
    const maxTokens = opts.finalization ? Math.min(reserve > 0 ? reserve : b.outputTokens.left!, b.outputTokens.left!) : b.outputTokens.researchLeft!;
    data.maxTokens = Math.max(1, Math.min(maxTokens, cap));
  } else if (Number.isFinite(cap)) data.maxTokens = cap;
  const price = opts.price;
  if (b.inputTokens.limit !== null || price) data.inputTokensEstimate = estimateInputTokens(facts);
  if (opts.finalization) data.purpose = 'finalization';
  if (opts.retryOf !== undefined) data.retryOf = opts.retryOf;
  if (price) {
    const input = data.inputTokensEstimate!;
    const paid = affordableOutputTokens(b, price, input);
    if (paid !== null) data.maxTokens = Math.max(1, Math.min(data.maxTokens ?? paid, paid));
    const { currency, inputMicrosPerMTok, outputMicrosPerMTok } = price;
    data.price = { currency, inputMicrosPerMTok, outputMicrosPerMTok, reservedMicros: reservationMicros(price, input, data.maxTokens ?? 0) };
  }
  return makeEvent('model.turn.requested', contextFrom(facts.lastEvent!), turn, data, now);
}

function finishedEvent(
  facts: RunFacts,
  now: Date,
  reason: ExecutionStopReason,
  detail: string,
  answerTurn: number | null,
  unfinished?: UnansweredPart[],
): RunEvent {
  return makeEvent(
    'run.execution.finished',
    contextFrom(facts.lastEvent!),
    'finished',
    { reason, detail, answerTurn, ...(unfinished ? { unfinished } : {}) },
    now,
  );
}

/**
 * The facts a model request is made from: those its decision read, with the finalization it
 * recorded with the request, if any (`run.finalization.started`, appended in the same batch as the
 * finalization turn's `model.turn.requested`), which {@link finalizationInstruction} reads. Without
 * it the finalization request said "its budget is spent" whatever the recorded reason (a
 * real-model trial; a deadline's finalization was mislabelled the same way). Pure.
 */
export function asDecided(facts: RunFacts, appended: readonly StoredEvent[]): RunFacts {
  return appended.filter((e) => e.event.type === 'run.finalization.started').reduce(evolve, facts);
}

/**
 * The instruction that ends the messages of the finalization request (K9): research is over, no
 * tools are offered; answer the user's ORIGINAL question (quoted, never an easier one) from the
 * material above, say what is unfinished, and list it in the unanswered block.
 */
export function finalizationInstruction(facts: RunFacts): { role: 'user'; content: string } {
  const fin = facts.finalization;
  const question = facts.admitted?.message.content ?? '';
  return {
    role: 'user',
    content: [
      `Research has stopped: ${fin ? `${fin.reason} (${fin.detail})` : 'its budget is spent'}. No more tools can be called.`,
      `Answer the original question now, from the material above only: "${question}".`,
      'Do not replace it with an easier question; narrow your claims where the material is thin.',
      'Say plainly what is unfinished or unverified, and list it in the closing runplane-unanswered block.',
    ].join(' '),
  };
}
