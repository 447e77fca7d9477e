/**
 * The one usage ledger (K7), given/when/then: a turn's charge by its outcome (measured, unknown
 * usage as a range up to its reservation, an HTTP error, never sent, in flight), the totals the
 * runtime (`budgetOf`) and the settlement (`usageOf`) read, and the projection's usage columns,
 * applied event by event with the same charges, equal to the ledger of the log after every event.
 */
import { describe, expect, it } from '@jest/globals';
import type { EventData, StoredEvent } from '@runplane/contracts';
import { evolveModelTurn, evolveRun, evolveToolCall, touchedKeys, type ModelTurnRow, type RunRow, type ToolCallRow } from '@runplane/projections';
import {
  budgetOf,
  chargeUsage,
  foldRun,
  NO_USAGE,
  reservationMicros,
  turnChargeOf,
  turnCostOf,
  usageOf,
  usageTotalsOf,
  type TurnCharge,
} from '@runplane/run-facts';
import { History } from '../../../test/support/history.js';

const price = { currency: 'USD', inputMicrosPerMTok: 3_000_000, outputMicrosPerMTok: 15_000_000 };
/** A priced request as the runtime records it: the input estimate and `max_tokens`, reserved at the price (K7). */
const priced = (
  turn: number,
  input: number,
  maxTokens: number,
  extra: Partial<EventData<'model.turn.requested'>> = {},
): EventData<'model.turn.requested'> => ({
  turn,
  model: 'scripted',
  maxTokens,
  inputTokensEstimate: input,
  price: { ...price, reservedMicros: reservationMicros(price, input, maxTokens) },
  ...extra,
});

/** Builds a Run's log whose outcomes carry the cost the runtime records on them (`turnCostOf` of the request). */
class PricedRun extends History {
  private readonly requests = new Map<number, EventData<'model.turn.requested'>>();
  request(data: EventData<'model.turn.requested'>): this {
    this.requests.set(data.turn, data);
    return this.add('model.turn.requested', data.turn, data);
  }
  completed(turn: number, usage: EventData<'model.turn.completed'>['usage'], content = 'Fund A holds 42 positions.'): this {
    const data: EventData<'model.turn.completed'> = { turn, content, toolCalls: [], finishReason: 'stop', usage };
    const cost = turnCostOf(this.requests.get(turn)!, data, null);
    if (cost) data.cost = cost;
    return this.add('model.turn.completed', turn, data);
  }
  failed(turn: number, error: EventData<'model.turn.failed'>['error']): this {
    const data: EventData<'model.turn.failed'> = { turn, error };
    const cost = turnCostOf(this.requests.get(turn)!, null, data);
    if (cost) data.cost = cost;
    return this.add('model.turn.failed', turn, data);
  }
}

const usage = (promptTokens: number, completionTokens: number) => ({ promptTokens, completionTokens, totalTokens: promptTokens + completionTokens });

describe('the ledger: one turn charge (K7, K9)', () => {
  it('given a priced request, when the model reports usage, then the turn is charged its measured tokens at the price and nothing unknown', () => {
    const req = priced(1, 700, 1_000);
    const charge = turnChargeOf(req, { turn: 1, content: 'x', toolCalls: [], finishReason: 'stop', usage: usage(812, 333) }, null);
    expect(charge).toEqual({
      modelRequests: 1,
      promptTokens: 812,
      completionTokens: 333,
      promptEstimated: 0,
      completionEstimated: 0,
      unknownUsage: 0,
      costMicros: 812 * 3 + 333 * 15,
      costUnknownMaxMicros: 0,
      currency: 'USD',
    } satisfies TurnCharge);
  });

  it('given a priced request, when the reply reports no usage, then its usage is unknown: no token measured, estimates flagged, its cost a range from 0 up to its whole reservation (never 0)', () => {
    const req = priced(1, 900, 1_000);
    const charge = turnChargeOf(req, { turn: 1, content: 'abcdefgh', toolCalls: [], finishReason: 'stop', usage: null }, null);
    expect(charge).toMatchObject({
      modelRequests: 1,
      unknownUsage: 1,
      promptTokens: 0,
      completionTokens: 0,
      promptEstimated: 900,
      completionEstimated: 2,
    });
    expect(charge.costMicros).toBe(0);
    expect(charge.costUnknownMaxMicros).toBe(req.price!.reservedMicros);
    expect(charge.costUnknownMaxMicros).toBe(900 * 3 + 1_000 * 15);
  });

  it('given a priced request, when it fails with an HTTP error or is never sent, then the error is charged its input part only and the unsent request nothing at all', () => {
    const req = priced(1, 950, 800);
    const http = turnChargeOf(req, null, { turn: 1, error: { kind: 'http', status: 500, message: 'boom' } });
    expect(http).toMatchObject({
      modelRequests: 1,
      unknownUsage: 1,
      promptEstimated: 950,
      completionEstimated: 0,
      costMicros: 0,
      costUnknownMaxMicros: 950 * 3,
    });
    const notSent = turnChargeOf(req, null, { turn: 1, error: { kind: 'not-sent', status: null, message: 'paused' } });
    expect(notSent).toMatchObject({
      modelRequests: 0,
      unknownUsage: 0,
      promptEstimated: 0,
      completionEstimated: 0,
      costMicros: 0,
      costUnknownMaxMicros: 0,
    });
  });

  it('given an unpriced request, when it is in flight, then it is a request with unknown usage, its reservation estimated, and no money', () => {
    const charge = turnChargeOf({ turn: 1, model: 'scripted', maxTokens: 400, inputTokensEstimate: 600 }, null, null);
    expect(charge).toEqual({
      modelRequests: 1,
      promptTokens: 0,
      completionTokens: 0,
      promptEstimated: 600,
      completionEstimated: 400,
      unknownUsage: 1,
      costMicros: 0,
      costUnknownMaxMicros: 0,
      currency: null,
    } satisfies TurnCharge);
  });
});

describe('the ledger: the Run totals every reader uses (K7)', () => {
  /** Measured, unknown (no usage chunk), HTTP-failed, never sent, timed out, and one still in flight. */
  const everyKind = () =>
    new PricedRun()
      .admitted({ limits: { maxCost: { micros: 200_000, currency: 'USD' } } })
      .request(priced(1, 700, 1_000))
      .completed(1, usage(812, 333))
      .request(priced(2, 900, 1_000))
      .completed(2, null)
      .request(priced(3, 950, 800))
      .failed(3, { kind: 'http', status: 500, message: 'boom' })
      .request(priced(4, 950, 800))
      .failed(4, { kind: 'not-sent', status: null, message: 'paused' })
      .request(priced(5, 960, 700))
      .failed(5, { kind: 'timeout', status: null, message: 'cut' })
      .request(priced(6, 1_000, 500));

  it('given turns of every kind, when the ledger is read, then the settlement usage, the budget and the summed turn charges say the same', () => {
    const facts = everyKind().facts;
    const totals = usageTotalsOf(facts);
    const measured = 812 * 3 + 333 * 15;
    const unknownMax = 900 * 3 + 1_000 * 15 + 950 * 3 + (960 * 3 + 700 * 15) + (1_000 * 3 + 500 * 15);
    expect(totals).toMatchObject({
      modelRequests: 5,
      promptTokens: 812,
      completionTokens: 333,
      unknownUsageTurns: 4,
      costMicros: measured,
      costUnknownMaxMicros: unknownMax,
    });
    expect(usageOf(facts)).toEqual({ modelRequests: 5, toolCalls: 0, promptTokens: 812, completionTokens: 333, unknownUsageTurns: 4 });
    const b = budgetOf(facts);
    expect(b.modelRequests.used).toBe(totals.modelRequests);
    expect(b.unknownUsageTurns).toBe(totals.unknownUsageTurns);
    expect(b.inputTokens).toMatchObject({ measured: 812, estimated: 900 + 950 + 960 + 1_000 });
    expect(b.outputTokens).toMatchObject({ measured: 333, estimated: Math.ceil('Fund A holds 42 positions.'.length / 4) + 700 + 500 });
    // unknown usage is priced as a range: the Run cost between the measured cost and measured + the unknown bound
    expect(b.cost).toMatchObject({ measured, unknownMax, used: measured + unknownMax, left: 200_000 - measured - unknownMax, currency: 'USD' });
    // the recorded cost of each outcome is the ledger's charge of that turn
    const summed = facts.turns.reduce((sum, t) => sum + (turnCostOf(t.request, t.completed, t.failed)?.unknownMaxMicros ?? 0), 0);
    expect(summed).toBe(unknownMax);
  });

  it('given the same charges, when they are applied in another order or a turn is charged in flight first and then replaced, then the totals are the same', () => {
    const facts = everyKind().facts;
    const charges = facts.turns.map((t) => [turnChargeOf(t.request, null, null), turnChargeOf(t.request, t.completed, t.failed)] as const);
    const direct = [...charges].reverse().reduce((u, [, done]) => chargeUsage(u, null, done), NO_USAGE);
    const replaced = charges.reduce((u, [inFlight, done]) => chargeUsage(chargeUsage(u, null, inFlight), inFlight, done), NO_USAGE);
    expect(replaced).toEqual(direct);
    expect(direct).toEqual({ ...usageTotalsOf(facts), toolCalls: 0 });
  });

  it('given a turn recorded with two outcomes, when folded, then only its first outcome is charged (as the projection keeps it)', () => {
    const h = new PricedRun()
      .admitted()
      .request(priced(1, 700, 1_000))
      .completed(1, usage(10, 5))
      .failed(1, { kind: 'timeout', status: null, message: 'late' });
    expect(h.facts.turns[0]!.failed).toBeNull();
    expect(usageOf(h.facts)).toMatchObject({ modelRequests: 1, promptTokens: 10, completionTokens: 5, unknownUsageTurns: 0 });
  });

  it('given a turn requested twice under one number, when folded, then it is one request on the ledger', () => {
    const h = new PricedRun()
      .admitted()
      .request(priced(1, 700, 1_000))
      .request(priced(1, 700, 1_000));
    expect(h.facts.turns).toHaveLength(1);
    expect(budgetOf(h.facts).modelRequests.used).toBe(1);
  });
});

/** Applies the events to the projection rows one by one, exactly as the adapter does (apply.ts): the rows a key touches are read before the Run rule. */
function project(events: readonly StoredEvent[]): (RunRow | null)[] {
  let run: RunRow | null = null;
  const turns = new Map<number, ModelTurnRow | null>();
  const calls = new Map<string, ToolCallRow | null>();
  const out: (RunRow | null)[] = [];
  for (const stored of events) {
    const keys = touchedKeys(stored);
    const toolCallBefore = keys.toolCallId ? (calls.get(keys.toolCallId) ?? null) : null;
    const turnBefore = keys.turn !== undefined ? (turns.get(keys.turn) ?? null) : null;
    run = evolveRun(run, stored, { toolCallBefore, ...(keys.turn !== undefined ? { turnBefore } : {}) });
    if (keys.toolCallId) calls.set(keys.toolCallId, evolveToolCall(toolCallBefore, stored));
    if (keys.turn !== undefined) turns.set(keys.turn, evolveModelTurn(turnBefore, stored));
    out.push(run);
  }
  return out;
}

describe('the ledger: a projection applies it event by event (K7, K11)', () => {
  it('given a Run with every kind of turn, tool calls and a second outcome of a turn, when projected event by event, then after every event the usage columns equal the ledger of the log so far', () => {
    const h = new PricedRun()
      .admitted({ limits: { maxCost: { micros: 500_000, currency: 'USD' } } })
      .request(priced(1, 700, 1_000))
      .completed(1, usage(812, 333))
      .proposed(1, 'a', 'list_funds')
      .dispatched('a', 'list_funds')
      .dispatched('a', 'list_funds')
      .receipt('a', 'list_funds', 'succeeded')
      .dispatched('ghost', 'list_funds') // a dispatch of no proposal: no tool call on the ledger
      .request(priced(2, 900, 1_000))
      .completed(2, null)
      .failed(2, { kind: 'timeout', status: null, message: 'a second outcome' })
      .request(priced(3, 950, 800))
      .failed(3, { kind: 'http', status: 500, message: 'boom' })
      .request(priced(4, 960, 700)) // never ended: charged its whole reservation...
      .request(priced(5, 1_000, 500)) // ...also once another request follows it
      .request(priced(5, 1_000, 500)) // a repeated request of a turn: one request
      .failed(5, { kind: 'not-sent', status: null, message: 'paused' });
    const rows = project(h.events);
    for (let i = 0; i < h.events.length; i++) {
      const facts = foldRun(h.runId, h.events.slice(0, i + 1));
      const ledger = usageTotalsOf(facts);
      const row = rows[i]!;
      expect({
        seq: h.events[i]!.seq,
        modelRequests: row.modelRequests,
        toolCalls: row.toolCalls,
        promptTokens: row.promptTokens,
        completionTokens: row.completionTokens,
        unknownUsageTurns: row.unknownUsageTurns,
        costMicros: row.costMicros,
        costUnknownMaxMicros: row.costUnknownMaxMicros,
        costCurrency: row.costCurrency,
      }).toEqual({
        seq: h.events[i]!.seq,
        modelRequests: ledger.modelRequests,
        toolCalls: ledger.toolCalls,
        promptTokens: ledger.promptTokens,
        completionTokens: ledger.completionTokens,
        unknownUsageTurns: ledger.unknownUsageTurns,
        costMicros: ledger.costMicros,
        costUnknownMaxMicros: ledger.costUnknownMaxMicros,
        costCurrency: budgetOf(facts).cost.currency,
      });
    }
    // the end state, spelled out: turn 4 (never ended) still counts its whole reservation
    expect(rows.at(-1)).toMatchObject({
      modelRequests: 4,
      toolCalls: 1,
      unknownUsageTurns: 3,
      costUnknownMaxMicros: 900 * 3 + 1_000 * 15 + 950 * 3 + (960 * 3 + 700 * 15),
    });
  });
});
