/**
 * Budgets in money (K7) against the real processes, NATS JetStream, PostgreSQL and the scripted
 * model over HTTP. The model is priced 1 USD per million input tokens and 2 per million output
 * tokens (1 and 2 micro-units per token, `RUNPLANE_MODEL_PRICES`):
 * - a Run with a money limit of 10,000 micro-USD: its first request's `max_tokens` is capped by
 *   what the money pays for; the first turn (a tool call) costs 9,700 measured; a second request
 *   would not fit, so none is made: research ends `token-limit` as the token limits end it, the
 *   Run settles failed, the charged total stays within the limit and `GET /v1/runs/{id}` shows
 *   the cost;
 * - a money limit admission cannot grant (another currency than the model's price, over the
 *   ceiling) is refused with 400 naming the field.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { RunplaneHttpError } from '@runplane/client';
import type { RunEvent, StoredEvent } from '@runplane/contracts';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack('money', {
    RUNPLANE_MODEL_PRICES: JSON.stringify({ 'runplane-scripted-research': { inputPerMTok: 1, outputPerMTok: 2, currency: 'USD' } }),
    RUNPLANE_GRANT_CEILING_COST_MICROS: '1000000',
  });
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type).map((e) => e.event as Extract<RunEvent, { type: T }>);

describe('a Run with a money limit (K7)', () => {
  it('reserves within the limit, charges the measured cost, ends token-limit when a second turn would not fit, and GET shows the cost', async () => {
    const key = `money-${t.tag}`;
    await t.setScenario(
      {
        steps: [
          { reply: { content: '', toolCalls: [{ name: 'list_funds', arguments: {} }], usage: { promptTokens: 700, completionTokens: 4_500 } } },
        ],
        then: 'error',
      },
      key,
    );
    const { body } = await t.client.postMessage(`conv-${key}`, {
      clientMessageId: key,
      content: `[${key}] Which funds are there?`,
      budget: { maxCost: { micros: 10_000, currency: 'USD' } },
    });
    const events = await t.waitForSettlement(body.runId, 60_000);
    expect(ofType(events, 'run.admitted')[0]!.data.limits.maxCost).toEqual({ micros: 10_000, currency: 'USD' });
    const requested = ofType(events, 'model.turn.requested');
    expect(requested).toHaveLength(1); // the second turn was never requested
    const first = requested[0]!.data;
    expect(first.price).toMatchObject({ currency: 'USD', inputMicrosPerMTok: 1_000_000, outputMicrosPerMTok: 2_000_000 });
    // the reservation is the worst case at the price, and it fits the limit
    expect(first.price!.reservedMicros).toBe(first.inputTokensEstimate! + 2 * first.maxTokens!);
    expect(first.price!.reservedMicros).toBeLessThanOrEqual(10_000);
    expect(first.maxTokens).toBeLessThan(16_384); // capped by the money, not by the per-request cap
    const completed = ofType(events, 'model.turn.completed')[0]!.data;
    expect(completed.cost).toEqual({ currency: 'USD', measuredMicros: 700 + 9_000, unknownMaxMicros: 0 });
    const finished = ofType(events, 'run.execution.finished')[0]!.data;
    expect(finished).toMatchObject({ reason: 'token-limit' });
    expect(finished.detail).toContain('money budget: 9700 of 10000 micro-USD');
    expect(ofType(events, 'run.settled')[0]!.data.outcome).toBe('failed');
    // the charged total (measured + every unknown bound) never exceeds the limit
    const charged = [...ofType(events, 'model.turn.completed'), ...ofType(events, 'model.turn.failed')].reduce(
      (n, e) => n + (e.data.cost?.measuredMicros ?? 0) + (e.data.cost?.unknownMaxMicros ?? 0),
      0,
    );
    expect(charged).toBeLessThanOrEqual(10_000);
    const view = await eventually(
      async () => {
        const v = await t.client.getRun(body.runId);
        return v?.status === 'settled' ? v : null;
      },
      30_000,
      'the settled Run in the projection',
    );
    expect(view).toMatchObject({ maxCostMicros: 10_000, costCurrency: 'USD', costMicros: 9_700, costUnknownMaxMicros: 0 });
  }, 90_000);

  it('refuses a money limit in another currency than the price, or over the ceiling, with 400 naming the field', async () => {
    const refused = async (maxCost: { micros: number; currency: string }) => {
      const key = `money-refused-${maxCost.currency}-${maxCost.micros}-${t.tag}`;
      const err = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: 'Which funds are there?', budget: { maxCost } }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(RunplaneHttpError);
      return err as RunplaneHttpError;
    };
    const eur = await refused({ micros: 10_000, currency: 'EUR' });
    expect(eur.status).toBe(400);
    expect(eur.problem?.issues?.[0]).toMatchObject({ path: 'budget.maxCost.currency', message: expect.stringContaining('priced in USD') });
    const over = await refused({ micros: 2_000_000, currency: 'USD' });
    expect(over.status).toBe(400);
    expect(over.problem?.issues?.[0]).toMatchObject({ path: 'budget.maxCost.micros', message: expect.stringContaining('ceiling of 1000000') });
  }, 30_000);
});
