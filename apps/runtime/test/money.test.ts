/**
 * Budgets in money (K7), given/when/then on the runtime's decider: every request records its
 * model's price and reserves its worst case in money (input estimate x input price + max_tokens x
 * output price), capped by what the money limit has left; every outcome records what the turn
 * cost (measured from usage, or a range up to the reservation when usage is unknown, never 0);
 * research stops `token-limit` when the money left does not pay for the next request; a grant
 * whose money limit cannot be charged (an unpriced model, another currency, over the ceiling) is
 * never executed. Prices here: 1 micro-unit per input token, 2 per output token.
 */
import { describe, expect, it } from '@jest/globals';
import type { TokenPrice } from '@runplane/contracts';
import { decide, type ModelTurnResult } from '../src/decide.js';
import { budgetOf, estimateInputTokens, turnCostOf } from '@runplane/run-facts';
import { spec, type Expected } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const runtime = spec(decide);
const PRICE: TokenPrice = { currency: 'USD', inputMicrosPerMTok: 1_000_000, outputMicrosPerMTok: 2_000_000 };
const wake = { type: 'Wake', model: 'scripted', price: PRICE, maxTokensPerRequest: 16_384 } as const;
const ended = (turn: number, result: ModelTurnResult) => ({ type: 'ModelTurnEnded', turn, result }) as const;
const usd = (micros: number) => ({ maxCost: { micros, currency: 'USD' } });
const finishedWith = (reason: string, detail: unknown = expect.any(String)) =>
  ({ type: 'run.execution.finished', data: { reason, detail, answerTurn: null } }) as never;

/** The data of a priced request of `turn` reserving `input` tokens of input and `maxTokens` of output at {@link PRICE}. */
const pricedRequest = (turn: number, input: number, maxTokens: number) => ({
  turn,
  model: 'scripted',
  maxTokens,
  inputTokensEstimate: input,
  price: { ...PRICE, reservedMicros: input + 2 * maxTokens },
});

/** `h` with that priced request of `turn` recorded. */
function requested(h: History, turn: number, input: number, maxTokens: number): History {
  return h.add('model.turn.requested', turn, pricedRequest(turn, input, maxTokens));
}

/** Wakes the runtime on `h` and asserts that it requests a model turn, and nothing else, with `data`. */
const requestsOnWake = (h: History, data: Extract<Expected, { type: 'model.turn.requested' }>['data']) =>
  runtime
    .given(h)
    .when(wake)
    .then([{ type: 'model.turn.requested', data }]);

describe('money reservation before a model request (K7)', () => {
  it('given a money limit, when woken, then turn 1 records the price and reserves input estimate + max_tokens at it, max_tokens capped by the money left', () => {
    const h = new History().admitted({ limits: usd(20_000) });
    const est = estimateInputTokens(h.facts);
    const maxTokens = Math.floor((20_000 - est) / 2); // what the money pays for after the input estimate
    expect(maxTokens).toBeLessThan(16_384);
    requestsOnWake(h, pricedRequest(1, est, maxTokens));
  });

  it('given a money limit larger than the worst case, when woken, then max_tokens is the per-request cap and the reservation its worst case', () => {
    const h = new History().admitted({ limits: usd(1_000_000) });
    const est = estimateInputTokens(h.facts);
    requestsOnWake(h, expect.objectContaining({ maxTokens: 16_384, price: { ...PRICE, reservedMicros: est + 2 * 16_384 } }));
  });

  it('given a priced model and no money limit, when woken, then the request still records its price and reservation (cost is measured, not limited)', () => {
    const h = new History().admitted();
    const est = estimateInputTokens(h.facts);
    requestsOnWake(h, pricedRequest(1, est, 16_384));
  });
});

describe('money charged after a model turn (K7)', () => {
  const base = () => requested(new History().admitted({ limits: usd(50_000) }), 1, 700, 1_000);

  it('given a priced turn in flight, when it completes with usage, then model.turn.completed records the measured cost at the request price', () => {
    const reply: ModelTurnResult = {
      ok: true,
      turn: { content: 'answer', toolCalls: [], finishReason: 'stop', usage: { promptTokens: 650, completionTokens: 40, totalTokens: 690 } },
    };
    runtime
      .given(base())
      .when(ended(1, reply))
      .then([
        { type: 'model.turn.completed', data: expect.objectContaining({ cost: { currency: 'USD', measuredMicros: 650 + 80, unknownMaxMicros: 0 } }) },
        { type: 'run.execution.finished', data: expect.objectContaining({ reason: 'answered' }) },
      ]);
  });

  it('given a priced turn in flight, when it completes WITHOUT usage, then its cost is unknown up to the whole reservation, never 0', () => {
    const reply: ModelTurnResult = { ok: true, turn: { content: '', toolCalls: [], finishReason: 'stop', usage: null } };
    runtime
      .given(base())
      .when(ended(1, reply))
      .then([
        { type: 'model.turn.completed', data: expect.objectContaining({ cost: { currency: 'USD', measuredMicros: 0, unknownMaxMicros: 2_700 } }) },
      ]);
  });

  it('given a priced turn in flight, when it times out, then up to its reservation; an HTTP error: up to its input part; never sent: nothing', () => {
    const cost = (error: Extract<ModelTurnResult, { ok: false }>['error']) => {
      const failed = decide(base().facts, ended(1, { ok: false, error }), new Date('2026-01-01T00:00:00.000Z')).find(
        (e) => e.type === 'model.turn.failed',
      );
      return (failed?.data as { cost?: unknown } | undefined)?.cost;
    };
    expect(cost({ kind: 'timeout', status: null, message: 'cut' })).toEqual({ currency: 'USD', measuredMicros: 0, unknownMaxMicros: 2_700 });
    expect(cost({ kind: 'http', status: 401, message: 'no' })).toEqual({ currency: 'USD', measuredMicros: 0, unknownMaxMicros: 700 });
    expect(cost({ kind: 'connection', status: null, message: 'refused', refused: true })).toEqual({
      currency: 'USD',
      measuredMicros: 0,
      unknownMaxMicros: 700,
    });
    expect(cost({ kind: 'not-sent', status: null, message: 'paused past the deadline' })).toEqual({
      currency: 'USD',
      measuredMicros: 0,
      unknownMaxMicros: 0,
    });
  });

  it('given measured, unknown and in-flight turns, then the ledger charges measured + the unknown bounds against the limit, and turnCostOf is what it sums', () => {
    const h = base().add('model.turn.completed', 1, {
      turn: 1,
      content: 'x',
      toolCalls: [],
      finishReason: 'length',
      usage: { promptTokens: 600, completionTokens: 1_000, totalTokens: 1_600 },
    });
    requested(h, 2, 800, 500).add('model.turn.failed', 2, { turn: 2, error: { kind: 'connection', status: null, message: 'reset' } });
    requested(h, 3, 900, 100); // in flight
    const b = budgetOf(h.facts);
    expect(b.cost).toMatchObject({
      measured: 2_600,
      unknownMax: 1_800 + 1_100,
      used: 2_600 + 2_900,
      limit: 50_000,
      left: 50_000 - 5_500,
      currency: 'USD',
    });
    const summed = h.facts.turns.map((t) => turnCostOf(t.request, t.completed, t.failed)!);
    expect(summed.reduce((n, c) => n + c.measuredMicros + c.unknownMaxMicros, 0)).toBe(b.cost.used);
  });
});

describe('money limit reached: the token-limit path (K7)', () => {
  it('given measured cost that leaves too little for the next request, when woken, then research stops token-limit naming the money budget', () => {
    const h = requested(new History().admitted({ limits: usd(3_000) }), 1, 700, 1_000).add('model.turn.completed', 1, {
      turn: 1,
      content: '',
      toolCalls: [],
      finishReason: 'stop',
      usage: { promptTokens: 700, completionTokens: 900, totalTokens: 1_600 },
    });
    // 2,500 used: 500 left pays for the input estimate (> 600 tokens) not even once
    runtime
      .given(h)
      .when(wake)
      .then([finishedWith('token-limit', expect.stringContaining('money budget: 2500 of 3000 micro-USD'))]);
  });

  it('given a turn whose usage is unknown, when woken, then it counts as its whole reservation (not 0) and the next request does not fit', () => {
    const h = requested(new History().admitted({ limits: usd(3_000) }), 1, 700, 1_000).add('model.turn.failed', 1, {
      turn: 1,
      error: { kind: 'timeout', status: null, message: 'cut' },
    });
    runtime
      .given(h)
      .when(wake)
      .then([finishedWith('token-limit', expect.stringContaining('0 measured + up to 2700 for turns whose usage is unknown'))]);
  });

  it('given money for the input but fewer than 256 output tokens, when woken, then no starved request is made: token-limit', () => {
    const h = new History().admitted({ limits: usd(1_000) });
    const est = estimateInputTokens(h.facts);
    expect(1_000 - est).toBeLessThan(2 * 256);
    runtime
      .given(h)
      .when(wake)
      .then([finishedWith('token-limit')]);
  });

  it('given research stopped by money with material and a reserve, when woken, then the one finalization request is capped by the money left', () => {
    const h = new History().admitted({ limits: { ...usd(3_800), finalOutputReserve: { modelRequests: 1, outputTokens: 2_000 } } });
    requested(h, 1, 700, 1_000).add('model.turn.completed', 1, {
      turn: 1,
      content: 'Partial findings.',
      toolCalls: [],
      finishReason: 'length',
      usage: { promptTokens: 700, completionTokens: 1_000, totalTokens: 1_700 },
    });
    // 2,700 used, 1,100 left: after the input estimate it pays for fewer than 256 output tokens (no more research), but for some
    const est = estimateInputTokens(h.facts);
    const paid = Math.floor((1_100 - est) / 2);
    expect(paid).toBeGreaterThan(0);
    expect(paid).toBeLessThan(256);
    runtime
      .given(h)
      .when(wake)
      .then([
        { type: 'run.finalization.started', data: expect.objectContaining({ reason: 'token-limit' }) },
        {
          type: 'model.turn.requested',
          data: expect.objectContaining({ purpose: 'finalization', maxTokens: paid, price: { ...PRICE, reservedMicros: est + 2 * paid } }),
        },
      ]);
    expect(2_700 + est + 2 * paid).toBeLessThanOrEqual(3_800);
  });
});

describe('a money limit nothing can charge is never executed (K7)', () => {
  it('given a money-limited grant and an unpriced model, when woken, then grant-refused naming the model', () => {
    runtime
      .given(new History().admitted({ limits: usd(10_000) }))
      .when({ type: 'Wake', model: 'scripted' })
      .then([finishedWith('grant-refused', expect.stringContaining('model scripted has no configured price'))]);
  });

  it('given a money limit in EUR and a model priced in USD, when woken, then grant-refused naming both currencies', () => {
    runtime
      .given(new History().admitted({ limits: { maxCost: { micros: 10_000, currency: 'EUR' } } }))
      .when(wake)
      .then([finishedWith('grant-refused', expect.stringContaining('in EUR but model scripted is priced in USD'))]);
  });

  it("given a money limit over the deployment's ceiling, when woken, then grant-refused naming the ceiling", () => {
    const ceiling = { modelRequests: 64, toolCalls: 256, deadlineSeconds: 10 ** 9, inputTokens: 10 ** 9, outputTokens: 10 ** 9, costMicros: 5_000 };
    runtime
      .given(new History().admitted({ limits: usd(10_000) }))
      .when({ ...wake, ceiling })
      .then([finishedWith('grant-refused', expect.stringContaining('a money limit of 10000 micro-USD (ceiling 5000)'))]);
  });
});
