/**
 * `quotaUsageOf` over real PostgreSQL: what admission's per-principal quotas count. A principal's
 * Runs not settled, and those admitted after a moment, oldest first; child Runs (reserved
 * `child.` message ids, charged to their parent's grant) and other principals' Runs not counted;
 * null counts the Runs admitted without a principal (authentication disabled); those parked on a
 * question to a human are listed with their deadlines. `costChargesOf`:
 * the priced Runs admitted after a moment with the most each costs (measured plus the unknown
 * upper bound, a turn in flight at its reservation), child Runs included.
 */
import { beforeAll, describe, expect, it } from '@jest/globals';
import { childClientMessageId, makeEvent, sha256Hex, type EventData } from '@runplane/contracts';
import { applyStoredEvent, costChargesOf, quotaUsageOf } from '@runplane/projections';
import { turnCostOf } from '@runplane/run-facts';
import { at, ctxOf, migratedTestDatabase, storedInOrder, uniqueTag } from './fixtures.js';

const db = migratedTestDatabase('quota');
const tag = uniqueTag();
const id = (name: string) => `${name}-${tag}`;

function admitted(runId: string, principal: string | null, seconds: number, clientMessageId = `client-${runId}`) {
  const content = `question of ${runId}`;
  return makeEvent(
    'run.admitted',
    ctxOf(runId),
    'admission',
    {
      message: { messageId: `msg-${runId}`, clientMessageId, content, contentSha256: sha256Hex(content) },
      grant: { tools: ['list_funds'], model: 'runplane-scripted-research' },
      limits: { maxModelRequests: 8, maxToolCalls: 16, deadlineAt: at(900).toISOString() },
      ...(principal ? { principal } : {}),
    },
    at(seconds),
  );
}
const settled = (runId: string, seconds: number) =>
  makeEvent(
    'run.settled',
    ctxOf(runId),
    'settled',
    {
      outcome: 'canceled',
      reason: 'canceled',
      passageIds: [],
      receipts: [],
      usage: { modelRequests: 0, toolCalls: 0, promptTokens: 0, completionTokens: 0 },
    },
    at(seconds),
  );

/** 1 micro-USD per input and per output token. */
const price = { currency: 'USD', inputMicrosPerMTok: 1_000_000, outputMicrosPerMTok: 1_000_000 };
const requested = (): EventData<'model.turn.requested'> => ({
  turn: 1,
  model: 'runplane-scripted-research',
  maxTokens: 1_000,
  inputTokensEstimate: 500,
  price: { ...price, reservedMicros: 1_500 },
});
const turnRequested = (runId: string, seconds: number) => makeEvent('model.turn.requested', ctxOf(runId), 1, requested(), at(seconds));
/** Turn 1 completed with 400 input and 100 output tokens: 500 micro-USD measured. */
function turnCompleted(runId: string, seconds: number) {
  const data: EventData<'model.turn.completed'> = {
    turn: 1,
    content: 'x',
    toolCalls: [],
    finishReason: 'stop',
    usage: { promptTokens: 400, completionTokens: 100, totalTokens: 500 },
  };
  data.cost = turnCostOf(requested(), data, null)!;
  return makeEvent('model.turn.completed', ctxOf(runId), 1, data, at(seconds));
}

beforeAll(async () => {
  const events = [
    admitted(id('a0'), 'alice', 0),
    admitted(id('a1'), 'alice', 10),
    admitted(id('c1'), 'alice', 11, childClientMessageId(id('a1'), 'call_1')), // a child of a1: charged to a1's grant
    admitted(id('a2'), 'alice', 20),
    admitted(id('b1'), 'bob', 15),
    admitted(id('n1'), null, 16),
    settled(id('a0'), 30),
    turnRequested(id('a1'), 31),
    turnCompleted(id('a1'), 32),
    turnRequested(id('c1'), 33),
    turnCompleted(id('c1'), 34),
    turnRequested(id('a2'), 35), // in flight
    // dave: one Run parked on a question to a human, one executing
    admitted(id('w1'), 'dave', 40),
    makeEvent(
      'wait.opened',
      ctxOf(id('w1')),
      'w',
      { waitId: 'w', toolCallId: 'q', turn: 1, question: 'Which?', expiresAt: at(800).toISOString() },
      at(41),
    ),
    admitted(id('w2'), 'dave', 42),
  ];
  for (const s of storedInOrder(events)) await applyStoredEvent(db.orm.em, s);
});

describe('quotaUsageOf', () => {
  it("given alice's three Runs (one settled) and a child Run, then two are active and the child is not counted", async () => {
    const usage = await quotaUsageOf(db.orm, 'alice', at(-1));
    expect(usage).toEqual({
      activeRuns: 2,
      admittedSince: [at(0), at(10), at(20)].map((d) => d.toISOString()),
      admittedSinceRunIds: [id('a0'), id('a1'), id('a2')],
      awaitingHuman: [],
    });
  });

  it("given dave's Run parked on a question to a human and another executing, then both are active and the parked one is listed with its deadline", async () => {
    const usage = await quotaUsageOf(db.orm, 'dave', at(-1));
    expect(usage.activeRuns).toBe(2);
    expect(usage.awaitingHuman).toEqual([{ deadlineAt: at(900).toISOString() }]);
  });

  it('given a window start, then only the Runs admitted after it, oldest first', async () => {
    expect((await quotaUsageOf(db.orm, 'alice', at(10))).admittedSince).toEqual([at(20).toISOString()]);
  });

  it('given another principal, or none (authentication disabled), then only its own Runs', async () => {
    expect(await quotaUsageOf(db.orm, 'bob', at(-1))).toEqual({
      activeRuns: 1,
      admittedSince: [at(15).toISOString()],
      admittedSinceRunIds: [id('b1')],
      awaitingHuman: [],
    });
    expect((await quotaUsageOf(db.orm, null, at(-1))).admittedSince).toEqual([at(16).toISOString()]);
    expect((await quotaUsageOf(db.orm, null, at(-1))).activeRuns).toBe(1);
    expect(await quotaUsageOf(db.orm, 'carol', at(-1))).toEqual({ activeRuns: 0, admittedSince: [], admittedSinceRunIds: [], awaitingHuman: [] });
  });
});

describe('quotaUsageOf while the projector writes', () => {
  it("given erin's Runs projected one by one while her usage is read again and again, then every read counts each of her unsettled Runs it lists as active (one snapshot: admission drops the reservation of a listed Run)", async () => {
    const total = 120;
    const writers = 4;
    let writing = writers;
    // four writers in parallel, as a projector's batch and other replicas commit
    const writes = Promise.all(
      Array.from({ length: writers }, async (_, w) => {
        try {
          const events = Array.from({ length: total / writers }, (_, i) => admitted(id(`e${w}-${i}`), 'erin', 100 + i));
          for (const s of storedInOrder(events)) await applyStoredEvent(db.orm.em, s);
        } finally {
          writing--;
        }
      }),
    );
    const torn: string[] = [];
    let reads = 0;
    const reader = async () => {
      while (writing > 0) {
        const usage = await quotaUsageOf(db.orm, 'erin', at(-1));
        reads++;
        // none of erin's Runs settles: each listed one must be one of activeRuns
        if (usage.activeRuns !== usage.admittedSinceRunIds.length)
          torn.push(`${usage.activeRuns} active, ${usage.admittedSinceRunIds.length} listed`);
      }
    };
    await Promise.all([reader(), reader(), reader(), reader()]);
    await writes;
    expect(reads).toBeGreaterThan(0);
    expect(torn).toEqual([]);
    expect((await quotaUsageOf(db.orm, 'erin', at(-1))).activeRuns).toBe(total);
  });
});

describe('costChargesOf', () => {
  it("given alice's priced Runs (a1 measured, its child c1 measured, a2 in flight) and an unpriced one, then each with the most it costs, oldest first", async () => {
    expect(await costChargesOf(db.orm, 'alice', at(-1))).toEqual([
      { admittedAt: at(10).toISOString(), currency: 'USD', upperMicros: 500 },
      { admittedAt: at(11).toISOString(), currency: 'USD', upperMicros: 500 },
      { admittedAt: at(20).toISOString(), currency: 'USD', upperMicros: 1_500 }, // the reservation, never 0
    ]);
  });

  it('given a window start, then only the Runs admitted after it; another principal without priced Runs has none', async () => {
    expect((await costChargesOf(db.orm, 'alice', at(11))).map((c) => c.upperMicros)).toEqual([1_500]);
    expect(await costChargesOf(db.orm, 'bob', at(-1))).toEqual([]);
    expect(await costChargesOf(db.orm, null, at(-1))).toEqual([]);
  });
});
