/**
 * The Run's cost in the projection (K7) equals the ledger's: the projection sums the cost each
 * turn's outcome records (computed once by the runtime with `turnCostOf`) and counts the
 * reservation of the turn in flight, while libs/run-facts `budgetOf` folds the same rule from
 * scratch. Given a Run with measured, unknown-usage, HTTP-failed, never-sent and in-flight turns,
 * after every event the live (incremental) row's cost equals the cost rebuilt from all events so far.
 */
import { describe, expect, it } from '@jest/globals';
import { makeEvent, type EventData, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { evolveRun, type RunRow } from '@runplane/projections';
import { budgetOf, foldRun, turnCostOf } from '@runplane/run-facts';
import { admittedEvent, at, ctxOf } from './fixtures.js';

const runId = 'run-cost';
const c = ctxOf(runId);
const price = { currency: 'USD', inputMicrosPerMTok: 3_000_000, outputMicrosPerMTok: 15_000_000 };

/** The Run's events: each outcome carries the cost the runtime records (`turnCostOf` of its request). */
function costedRun(): RunEvent[] {
  const events: RunEvent[] = [admittedEvent(runId)];
  let t = 1;
  const request = (turn: number, input: number, maxTokens: number): EventData<'model.turn.requested'> => {
    const data = { turn, model: 'm', maxTokens, inputTokensEstimate: input, price: { ...price, reservedMicros: input * 3 + maxTokens * 15 } };
    events.push(makeEvent('model.turn.requested', c, turn, data, at(t++)));
    return data;
  };
  const complete = (req: EventData<'model.turn.requested'>, usage: EventData<'model.turn.completed'>['usage']) => {
    const data: EventData<'model.turn.completed'> = { turn: req.turn, content: 'x', toolCalls: [], finishReason: 'length', usage };
    data.cost = turnCostOf(req, data, null)!;
    events.push(makeEvent('model.turn.completed', c, req.turn, data, at(t++)));
  };
  const fail = (req: EventData<'model.turn.requested'>, error: EventData<'model.turn.failed'>['error']) => {
    const data: EventData<'model.turn.failed'> = { turn: req.turn, error };
    data.cost = turnCostOf(req, null, data)!;
    events.push(makeEvent('model.turn.failed', c, req.turn, data, at(t++)));
  };
  complete(request(1, 700, 1_000), { promptTokens: 812, completionTokens: 333, totalTokens: 1_145 });
  complete(request(2, 900, 1_000), null); // a reply without usage: up to its reservation
  fail(request(3, 950, 800), { kind: 'http', status: 500, message: 'boom' }); // up to its input part
  fail(request(4, 950, 800), { kind: 'not-sent', status: null, message: 'paused' }); // nothing
  fail(request(5, 960, 700), { kind: 'timeout', status: null, message: 'cut' }); // up to its reservation
  request(6, 1_000, 500); // in flight: its reservation
  return events;
}

describe('the projected cost equals the ledger (K7)', () => {
  it('given priced turns of every kind, after each event, then the live row cost equals budgetOf rebuilt from the events so far', () => {
    const stored: StoredEvent[] = costedRun().map((event, i) => ({ seq: i + 1, subject: `t.run.${runId}.${event.owner}`, event }));
    let row: RunRow | null = null;
    for (let i = 0; i < stored.length; i++) {
      row = evolveRun(row, stored[i]!)!;
      const ledger = budgetOf(foldRun(runId, stored.slice(0, i + 1))).cost;
      expect({ measured: row.costMicros, unknownMax: row.costUnknownMaxMicros }).toEqual({
        measured: ledger.measured,
        unknownMax: ledger.unknownMax,
      });
    }
    expect(row).toMatchObject({
      costCurrency: 'USD',
      costMicros: 812 * 3 + 333 * 15,
      costUnknownMaxMicros: 900 * 3 + 1_000 * 15 + 950 * 3 + 0 + (960 * 3 + 700 * 15) + (1_000 * 3 + 500 * 15),
      costInFlightMicros: 1_000 * 3 + 500 * 15,
    });
  });
});
