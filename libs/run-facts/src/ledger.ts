/**
 * The Run's one usage ledger (K7: budgets are one ledger). Every count of what a Run used is made
 * here and nowhere else: the runtime's decisions ({@link budgetOf}), the settlement's usage
 * ({@link usageOf}), the auditor's checks, and the projections' usage columns, which apply the same
 * per-turn charges event by event ({@link turnChargeOf}, {@link outcomeChargeOf},
 * {@link chargeUsage}), so a rebuilt projection equals the ledger of the log.
 *
 * The unit of the ledger is one model turn's charge ({@link TurnCharge}): what its request and
 * its first outcome charge. The Run's totals are the sum of its turns' charges; an event that
 * changes a turn replaces that turn's charge ({@link chargeUsage}: minus before, plus after).
 */
import type { EventData, TokenPrice, TurnCost } from '@runplane/contracts';
import type { RunFacts } from './fold.js';

/**
 * What the Run's children were carved from its limits (K7): the sum of their model requests and
 * tool calls. The parent is charged with the whole carve, whatever the child uses: nothing comes back.
 */
export function carvedForChildren(facts: RunFacts): {
  modelRequests: number;
  toolCalls: number;
  inputTokens: number;
  outputTokens: number;
  costMicros: number;
} {
  let modelRequests = 0;
  let toolCalls = 0;
  let inputTokens = 0;
  let outputTokens = 0;
  let costMicros = 0;
  for (const c of facts.children.values()) {
    modelRequests += c.limits.maxModelRequests;
    toolCalls += c.limits.maxToolCalls;
    inputTokens += c.limits.maxInputTokens ?? 0;
    outputTokens += c.limits.maxOutputTokens ?? 0;
    costMicros += c.limits.maxCost?.micros ?? 0;
  }
  return { modelRequests, toolCalls, inputTokens, outputTokens, costMicros };
}

/**
 * What `tokens` tokens cost at `microsPerMTok` (micro-units per million tokens), whole
 * micro-units rounded up (K7: integers on the ledger, never under-charged). Exact for every
 * product below 2^53 (tokens x price up to 9e15: e.g. 10^7 tokens at 900 units per million).
 */
export function tokensCostMicros(tokens: number, microsPerMTok: number): number {
  return Math.ceil((tokens * microsPerMTok) / 1_000_000);
}

/**
 * The money reservation of a model request (K7): its input estimate at the input price plus its
 * `max_tokens` at the output price, micro-units.
 */
export function reservationMicros(price: TokenPrice, inputTokens: number, maxTokens: number): number {
  return tokensCostMicros(inputTokens, price.inputMicrosPerMTok) + tokensCostMicros(maxTokens, price.outputMicrosPerMTok);
}

/**
 * What one model turn cost (`TurnCost`, K7), from its request's price and reservation
 * (`model.turn.requested` `price`) and its outcome, or null when the request carried no price.
 * The one place where usage becomes money: the runtime records this on the turn's outcome, and
 * {@link budgetOf} sums it. Usage reported: measured at the price, nothing unknown. Otherwise the
 * turn's cost is unknown, between 0 and its reservation (`unknownMaxMicros`), never 0: the whole
 * reservation while in flight, after a reply without usage, a timeout, a connection loss or an
 * invalid reply; its input part only when the provider generated nothing (an HTTP error reply, a
 * refused connection); nothing for a request never sent (`not-sent`).
 */
export function turnCostOf(
  request: EventData<'model.turn.requested'>,
  completed: EventData<'model.turn.completed'> | null,
  failed: EventData<'model.turn.failed'> | null,
): TurnCost | null {
  const price = request.price;
  if (!price) return null;
  const u = completed?.usage;
  if (u) {
    const measuredMicros =
      tokensCostMicros(u.promptTokens, price.inputMicrosPerMTok) + tokensCostMicros(u.completionTokens, price.outputMicrosPerMTok);
    return { currency: price.currency, measuredMicros, unknownMaxMicros: 0 };
  }
  let unknownMaxMicros = price.reservedMicros;
  if (failed?.error.kind === 'not-sent') unknownMaxMicros = 0;
  else if (failed?.error.kind === 'http' || failed?.error.refused)
    unknownMaxMicros = Math.min(price.reservedMicros, tokensCostMicros(request.inputTokensEstimate ?? 0, price.inputMicrosPerMTok));
  return { currency: price.currency, measuredMicros: 0, unknownMaxMicros };
}

/** Characters per token of the ledger's estimates (K7): a flagged estimate, never a measurement. */
export const CHARS_PER_TOKEN = 4;

/** Fixed prompt overhead of a request (system prompt and tool definitions), tokens, in the estimates. */
export const PROMPT_OVERHEAD_TOKENS = 600;

/**
 * Estimated prompt tokens of the Run's next model request, from its facts alone (so the decider
 * can reserve it, K7): characters / {@link CHARS_PER_TOKEN} of the question, every completed
 * turn's text and call arguments, and every receipt (inline results as JSON; a stored result by
 * its recorded size), plus {@link PROMPT_OVERHEAD_TOKENS}.
 */
export function estimateInputTokens(facts: RunFacts): number {
  let chars = facts.admitted?.message.content.length ?? 0;
  for (const t of facts.turns) {
    const done = t.completed;
    if (!done) continue;
    chars += done.content.length;
    for (const c of done.toolCalls) chars += c.name.length + c.argumentsText.length + 40;
  }
  for (const c of facts.toolCalls.values()) {
    const r = c.receipt;
    if (!r) continue;
    chars += r.resultRef ? r.resultRef.bytes : JSON.stringify(r.result ?? r.error ?? null).length + 40;
  }
  return PROMPT_OVERHEAD_TOKENS + Math.ceil(chars / CHARS_PER_TOKEN);
}

/** A ledger line: what a limit allows, what was used, what is left (K7). Token lines split measured from estimated use. */
export interface LedgerLine {
  /** The limit, or null when the Run has none for this line. */
  limit: number | null;
  /** Used by this Run's own requests or calls (measured plus estimated, for tokens). */
  used: number;
  /** Carved out for child Runs (charged in full, whatever the child uses). */
  carved: number;
  /** Kept for the finalization request; research cannot spend it. */
  reserve: number;
  /** What research may still spend: `limit - reserve - used - carved` (>= 0), or null without a limit. */
  researchLeft: number | null;
  /** What is left including the reserve: `limit - used - carved` (>= 0), or null without a limit. */
  left: number | null;
}

/** The Run's budget ledger (see {@link budgetOf}). */
export interface Ledger {
  modelRequests: LedgerLine;
  toolCalls: LedgerLine;
  inputTokens: LedgerLine & { measured: number; estimated: number };
  outputTokens: LedgerLine & { measured: number; estimated: number };
  /**
   * Money (K7), micro-units of `currency`: `used` is `measured` (usage reported, at the price its
   * request recorded) plus `unknownMax` (the upper bound of every turn whose usage is unknown or in
   * flight, `turnCostOf`): the Run cost between `measured` and `used`. The limit is `maxCost`
   * (null: not limited by money); no part of it is kept for finalization. `currency`: the limit's,
   * else the priced turns', else null.
   */
  cost: LedgerLine & { measured: number; unknownMax: number; currency: string | null };
  /** Requests whose token usage the model did not report: their tokens are in `estimated`, flagged (K7, K9). */
  unknownUsageTurns: number;
  /** True once the Run moved into finalization-only (then only the reserve may be spent). */
  finalizing: boolean;
}

/**
 * One model turn's entry on the ledger (K7): what its request and first outcome charge. Tokens are
 * MEASURED where the model reported usage, else ESTIMATED and flagged (`unknownUsage` 1, never 0
 * measured, K9); money in micro-units of `currency`, measured plus the upper bound of unknown usage.
 */
export interface TurnCharge {
  /** 1 for a request made, 0 for one never sent (`not-sent`: the provider received nothing). */
  modelRequests: number;
  /** Tokens the model reported (0 when it did not). */
  promptTokens: number;
  completionTokens: number;
  /** Tokens charged as an estimate because usage is unknown (see {@link budgetOf}). */
  promptEstimated: number;
  completionEstimated: number;
  /** 1 when the turn's usage is unknown (no usage reported, failed, cut, in flight), else 0. */
  unknownUsage: number;
  /** Cost measured from reported usage, micro-units (`TurnCost.measuredMicros`). */
  costMicros: number;
  /** Upper bound of the cost of unknown usage, micro-units (`TurnCost.unknownMaxMicros`, K7: never 0 while unknown). */
  costUnknownMaxMicros: number;
  /** The currency of the turn's price, or null when the request carried none. */
  currency: string | null;
}

/**
 * The counts of a turn's outcome that need nothing of its request (K7, K9): a model request unless
 * never sent (`not-sent`); tokens measured when the model reported usage; otherwise unknown usage.
 * A turn in flight (no outcome: `outcome` null) is a request with unknown usage. `cost`: what the
 * turn costs (`turnCostOf`), null when unpriced. Used by {@link turnChargeOf} and, with the cost
 * recorded on the outcome, by {@link outcomeChargeOf}.
 */
function chargeOf(
  completed: EventData<'model.turn.completed'> | null,
  failed: EventData<'model.turn.failed'> | null,
  cost: TurnCost | null,
  estimated: { prompt: number; completion: number },
): TurnCharge {
  const money = { costMicros: cost?.measuredMicros ?? 0, costUnknownMaxMicros: cost?.unknownMaxMicros ?? 0, currency: cost?.currency ?? null };
  const none = { promptTokens: 0, completionTokens: 0, promptEstimated: 0, completionEstimated: 0 };
  if (!completed && failed?.error.kind === 'not-sent') return { modelRequests: 0, unknownUsage: 0, ...none, ...money };
  const u = completed?.usage;
  if (u) return { modelRequests: 1, unknownUsage: 0, ...none, promptTokens: u.promptTokens, completionTokens: u.completionTokens, ...money };
  return { modelRequests: 1, unknownUsage: 1, ...none, promptEstimated: estimated.prompt, completionEstimated: estimated.completion, ...money };
}

/**
 * The ledger's charge of one model turn (K7) from its request and its outcome (`completed` or
 * `failed`, both null while in flight): see {@link budgetOf} for the rule of each case, and
 * {@link turnCostOf} for its money.
 */
export function turnChargeOf(
  request: EventData<'model.turn.requested'>,
  completed: EventData<'model.turn.completed'> | null,
  failed: EventData<'model.turn.failed'> | null,
): TurnCharge {
  let completion = 0;
  if (completed) {
    const chars = completed.content.length + completed.toolCalls.reduce((n, c) => n + c.name.length + c.argumentsText.length, 0);
    completion = Math.ceil(chars / CHARS_PER_TOKEN);
  } else if (!(failed?.error.kind === 'http' || failed?.error.refused)) completion = request.maxTokens ?? 0;
  return chargeOf(completed, failed, turnCostOf(request, completed, failed), { prompt: request.inputTokensEstimate ?? 0, completion });
}

/**
 * The charge of a turn's outcome as the outcome event records it (K7), for a reader that keeps no
 * request per turn (the projections): the counts of {@link turnChargeOf} and the cost recorded on
 * the outcome (`cost`, computed by the runtime with {@link turnCostOf} from the request), without
 * the token estimates. Equal to {@link turnChargeOf} of the same turn but for the estimates.
 */
export function outcomeChargeOf(
  outcome:
    { type: 'model.turn.completed'; data: EventData<'model.turn.completed'> } | { type: 'model.turn.failed'; data: EventData<'model.turn.failed'> },
): TurnCharge {
  const none = { prompt: 0, completion: 0 };
  return outcome.type === 'model.turn.completed'
    ? chargeOf(outcome.data, null, outcome.data.cost ?? null, none)
    : chargeOf(null, outcome.data, outcome.data.cost ?? null, none);
}

/**
 * The charge of a turn in flight whose request reserved `reservedMicros` (its `price.reservedMicros`,
 * 0 when unpriced), without token estimates: a request with unknown usage, its whole reservation the
 * upper bound of its cost (K7). Equal to {@link turnChargeOf} of the request alone but for the
 * estimates and the currency (null: a charge being replaced adds no currency).
 */
export function inFlightCharge(reservedMicros: number, currency: string | null = null): TurnCharge {
  return { ...chargeOf(null, null, null, { prompt: 0, completion: 0 }), costUnknownMaxMicros: reservedMicros, currency };
}

/**
 * The Run's usage totals (K7): the sum of its turns' {@link TurnCharge}s and the tool calls
 * dispatched. Field names are the projections' `runs` columns.
 */
export interface UsageTotals {
  /** Model requests made (retries included; a request never sent is none). */
  modelRequests: number;
  /** Tool calls dispatched (the tools deny the rest). */
  toolCalls: number;
  /** Tokens measured, summed over the turns that reported usage (a lower bound while `unknownUsageTurns` > 0). */
  promptTokens: number;
  completionTokens: number;
  /** Tokens estimated for turns whose usage is unknown (flagged, never measured). */
  promptEstimated: number;
  completionEstimated: number;
  /** Requests whose usage is unknown (in flight included): never counted as 0 tokens (K9). */
  unknownUsageTurns: number;
  /** Cost measured, micro-units. */
  costMicros: number;
  /** Upper bound of the cost of unknown usage, micro-units: the Run cost between `costMicros` and their sum. */
  costUnknownMaxMicros: number;
  /** The currency of the first priced turn, null while none is priced. */
  costCurrency: string | null;
}

/** Usage totals before anything was used. */
export const NO_USAGE: UsageTotals = {
  modelRequests: 0,
  toolCalls: 0,
  promptTokens: 0,
  completionTokens: 0,
  promptEstimated: 0,
  completionEstimated: 0,
  unknownUsageTurns: 0,
  costMicros: 0,
  costUnknownMaxMicros: 0,
  costCurrency: null,
};

/**
 * One step of the ledger (K7), pure: `totals` with one turn's charge replaced, `before` (null for a
 * turn new on the ledger) by `after`. Summing every turn's charge from {@link NO_USAGE} with this
 * step, in any order and however often a turn's charge was replaced on the way, gives the same
 * totals: the fold of the runtime, the settlement and a projection applying events one by one agree.
 */
export function chargeUsage(totals: UsageTotals, before: TurnCharge | null, after: TurnCharge): UsageTotals {
  const d = (k: Exclude<keyof TurnCharge, 'currency'>) => after[k] - (before?.[k] ?? 0);
  return {
    modelRequests: totals.modelRequests + d('modelRequests'),
    toolCalls: totals.toolCalls,
    promptTokens: totals.promptTokens + d('promptTokens'),
    completionTokens: totals.completionTokens + d('completionTokens'),
    promptEstimated: totals.promptEstimated + d('promptEstimated'),
    completionEstimated: totals.completionEstimated + d('completionEstimated'),
    unknownUsageTurns: totals.unknownUsageTurns + d('unknownUsage'),
    costMicros: totals.costMicros + d('costMicros'),
    costUnknownMaxMicros: totals.costUnknownMaxMicros + d('costUnknownMaxMicros'),
    costCurrency: totals.costCurrency ?? after.currency,
  };
}

/** The Run's usage totals from its facts (K7): every turn's {@link turnChargeOf}, and the tool calls dispatched. */
export function usageTotalsOf(facts: RunFacts): UsageTotals {
  let totals = NO_USAGE;
  for (const t of facts.turns) totals = chargeUsage(totals, null, turnChargeOf(t.request, t.completed, t.failed));
  let toolCalls = 0;
  for (const c of facts.toolCalls.values()) if (c.dispatched) toolCalls += 1;
  return { ...totals, toolCalls };
}

/**
 * The Run's one budget ledger (K7), a pure fold of its facts: model requests (every requested
 * turn counts, retries included), tool calls (dispatched: the tools deny the rest), input and output tokens,
 * the final-output reserve and what was carved for children. Tokens are MEASURED where the model
 * reported usage; a turn without usage (no usage chunk, failed, cut, never ended) is charged an
 * ESTIMATE, flagged in `estimated` and `unknownUsageTurns`, never 0 measured: its reservation
 * (`inputTokensEstimate`, and `maxTokens` when it may have generated: a timeout, a connection
 * loss, a process that died) or, for a reply received without usage, its text's length / 4. An
 * HTTP error reply, or a refused connection (`refused`: the request never reached the provider),
 * is charged its input estimate only (the provider generated nothing). A request
 * never sent (`not-sent`: the limiter's pause ends after the deadline) is charged nothing, neither
 * tokens nor a model request: the provider received nothing.
 */
export function budgetOf(facts: RunFacts): Ledger {
  const limits = facts.admitted?.limits;
  const carved = carvedForChildren(facts);
  const u = usageTotalsOf(facts);
  const reserve = limits?.finalOutputReserve;
  const line = (limit: number | undefined, used: number, carvedN: number, reserveN: number): LedgerLine => ({
    limit: limit ?? null,
    used,
    carved: carvedN,
    reserve: limit === undefined ? 0 : reserveN,
    researchLeft: limit === undefined ? null : Math.max(0, limit - reserveN - used - carvedN),
    left: limit === undefined ? null : Math.max(0, limit - used - carvedN),
  });
  return {
    modelRequests: line(limits?.maxModelRequests, u.modelRequests, carved.modelRequests, reserve?.modelRequests ?? 0),
    toolCalls: line(limits?.maxToolCalls, u.toolCalls, carved.toolCalls, 0),
    inputTokens: {
      ...line(limits?.maxInputTokens, u.promptTokens + u.promptEstimated, carved.inputTokens, 0),
      measured: u.promptTokens,
      estimated: u.promptEstimated,
    },
    outputTokens: {
      ...line(limits?.maxOutputTokens, u.completionTokens + u.completionEstimated, carved.outputTokens, reserve?.outputTokens ?? 0),
      measured: u.completionTokens,
      estimated: u.completionEstimated,
    },
    cost: {
      ...line(limits?.maxCost?.micros, u.costMicros + u.costUnknownMaxMicros, carved.costMicros, 0),
      measured: u.costMicros,
      unknownMax: u.costUnknownMaxMicros,
      currency: limits?.maxCost?.currency ?? u.costCurrency,
    },
    unknownUsageTurns: u.unknownUsageTurns,
    finalizing: facts.finalization !== null,
  };
}

/**
 * The usage a settlement records (`run.settled` `usage`, K7, K9), from the ledger
 * ({@link usageTotalsOf}): model requests (a request never sent is none), dispatched tool calls,
 * the tokens MEASURED, and the requests whose usage is unknown (completed without a usage chunk,
 * failed, cut, or never completed because the process died), never counted as 0 tokens.
 */
export function usageOf(facts: RunFacts): EventData<'run.settled'>['usage'] & { unknownUsageTurns: number } {
  const { modelRequests, toolCalls, promptTokens, completionTokens, unknownUsageTurns } = usageTotalsOf(facts);
  return { modelRequests, toolCalls, promptTokens, completionTokens, unknownUsageTurns };
}
