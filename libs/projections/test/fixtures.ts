/**
 * Test fixtures: realistic Runs as event lists (built with the contracts' `makeEvent`, fixed
 * `occurredAt` times), and a helper appending them to a real event log with the per-owner
 * subject expectation (K6).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll } from '@jest/globals';
import type { MikroORM } from '@mikro-orm/postgresql';
import { makeEvent, sha256Hex, type EventContext, type Owner, type RunEvent, type StoredEvent } from '@runplane/contracts';
import type { EventLog } from '@runplane/eventlog';
import { createProjectionOrm, databaseUrlWith, dropDatabase, ensureDatabase, migrateUp } from '@runplane/projections';

export const uniqueTag = (): string => randomBytes(4).toString('hex');

/** The PostgreSQL server the tests make their databases on (`PROJECTIONS_TEST_ADMIN_URL`, trust auth). */
export const adminUrl = process.env.PROJECTIONS_TEST_ADMIN_URL ?? 'postgresql://postgres@127.0.0.1:5432/postgres';

/** A test's own projection database: its name, its URL, and the ORM open on it (from the first `beforeAll` on). */
export interface TestDatabase {
  readonly name: string;
  readonly url: string;
  readonly orm: MikroORM;
}

/**
 * A migrated projection database `rp_test_<label>_<8 hex>` for the enclosing file or `describe`:
 * created, opened and migrated in a `beforeAll` (registered here, so it runs before the caller's
 * own), closed and dropped in an `afterAll`.
 */
export function migratedTestDatabase(label: string): TestDatabase {
  const name = `rp_test_${label}_${uniqueTag()}`;
  const url = databaseUrlWith(adminUrl, name);
  let orm: MikroORM | undefined;
  beforeAll(async () => {
    await ensureDatabase(adminUrl, name);
    orm = await createProjectionOrm({ databaseUrl: url });
    await migrateUp(orm);
  });
  afterAll(async () => {
    await orm?.close();
    await dropDatabase(adminUrl, name);
  });
  return {
    name,
    url,
    get orm(): MikroORM {
      if (!orm) throw new Error(`the test database ${name} is not open yet (read it inside a hook or test)`);
      return orm;
    },
  };
}

export const ctxOf = (runId: string, conversationId = `conv-${runId}`): EventContext => ({
  runId,
  conversationId,
  correlationId: `msg-${runId}`,
  causationId: null,
});

/** `base` + `seconds`, as a Date (event times are fixed so rows are predictable). */
export const at = (seconds: number, base = Date.parse('2026-11-30T10:00:00.000Z')): Date => new Date(base + seconds * 1000);

export function admittedEvent(runId: string, content = 'Compare the holdings of fund A and fund B', t = 0) {
  return makeEvent(
    'run.admitted',
    ctxOf(runId),
    'admission',
    {
      message: { messageId: `msg-${runId}`, clientMessageId: `client-${runId}`, content, contentSha256: sha256Hex(content) },
      grant: { tools: ['list_funds', 'get_holdings', 'compare_holdings'], model: 'runplane-scripted-research' },
      limits: { maxModelRequests: 8, maxToolCalls: 16, deadlineAt: at(900).toISOString() },
    },
    at(t),
  );
}

/**
 * A complete research Run: two model turns, two tool calls (one succeeds by reference, one
 * fails), two passages (one revised), the answer published and the Run settled `completed`.
 */
export function researchRunEvents(runId: string): RunEvent[] {
  const c = ctxOf(runId);
  const usage = { promptTokens: 120, completionTokens: 30, totalTokens: 150 };
  const p0 = 'Fund A holds 42 positions; fund B holds 37.';
  const p0v2 = 'Fund A holds 42 positions; fund B holds 37 (as of 2026-09-30).';
  const p1 = 'The holdings of fund B could not be compared: the comparison tool failed.';
  return [
    admittedEvent(runId),
    makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'runplane-scripted-research' }, at(1)),
    makeEvent(
      'model.turn.completed',
      c,
      1,
      {
        turn: 1,
        content: '',
        toolCalls: [
          { toolCallId: 'call_1', name: 'get_holdings', argumentsText: '{"fund":"A"}' },
          { toolCallId: 'call_2', name: 'compare_holdings', argumentsText: '{"left":"A","right":"B"}' },
        ],
        finishReason: 'tool_calls',
        usage,
      },
      at(2),
    ),
    makeEvent('tool.call.proposed', c, 'call_1', { toolCallId: 'call_1', name: 'get_holdings', argumentsText: '{"fund":"A"}', turn: 1 }, at(2)),
    makeEvent(
      'tool.call.proposed',
      c,
      'call_2',
      { toolCallId: 'call_2', name: 'compare_holdings', argumentsText: '{"left":"A","right":"B"}', turn: 1 },
      at(2),
    ),
    makeEvent('tool.call.dispatched', c, 'call_1', { toolCallId: 'call_1', name: 'get_holdings' }, at(3)),
    makeEvent(
      'tool.call.receipt',
      c,
      'call_1',
      {
        toolCallId: 'call_1',
        name: 'get_holdings',
        status: 'succeeded',
        resultRef: { bucket: 'results', key: `${runId}/call_1`, sha256: 'b'.repeat(64), bytes: 2048 },
        durationMs: 41,
      },
      at(4),
    ),
    makeEvent('tool.call.dispatched', c, 'call_2', { toolCallId: 'call_2', name: 'compare_holdings' }, at(4)),
    makeEvent(
      'tool.call.receipt',
      c,
      'call_2',
      {
        toolCallId: 'call_2',
        name: 'compare_holdings',
        status: 'failed',
        error: { code: 'source_unavailable', message: 'fund B file missing' },
        durationMs: 12,
      },
      at(5),
    ),
    makeEvent('model.turn.requested', c, 2, { turn: 2, model: 'runplane-scripted-research' }, at(6)),
    makeEvent('model.turn.completed', c, 2, { turn: 2, content: `${p0}\n\n${p1}`, toolCalls: [], finishReason: 'stop', usage }, at(8)),
    makeEvent('run.execution.finished', c, 'finished', { reason: 'answered', detail: 'turn 2 answered', answerTurn: 2 }, at(8)),
    makeEvent('passage.committed', c, 'p0/1', { passageId: 'p0', index: 0, version: 1, text: p0, sourceTurn: 2, sha256: sha256Hex(p0) }, at(9)),
    makeEvent('passage.committed', c, 'p1/1', { passageId: 'p1', index: 1, version: 1, text: p1, sourceTurn: 2, sha256: sha256Hex(p1) }, at(9)),
    makeEvent('passage.committed', c, 'p0/2', { passageId: 'p0', index: 0, version: 2, text: p0v2, sourceTurn: 2, sha256: sha256Hex(p0v2) }, at(10)),
    makeEvent('answer.published', c, 'answer', { passageIds: ['p0', 'p1'], characters: p0v2.length + p1.length, sourceTurn: 2 }, at(10)),
    makeEvent(
      'run.settled',
      c,
      'settled',
      {
        outcome: 'completed',
        reason: 'answered; compare_holdings failed',
        passageIds: ['p0', 'p1'],
        receipts: [
          { toolCallId: 'call_1', name: 'get_holdings', status: 'succeeded' },
          { toolCallId: 'call_2', name: 'compare_holdings', status: 'failed' },
        ],
        usage: { modelRequests: 2, toolCalls: 2, promptTokens: 240, completionTokens: 60 },
      },
      at(11),
    ),
  ];
}

/** A short failing Run whose tool call id (`call_1`) collides with the research Run's. */
export function failingRunEvents(runId: string): RunEvent[] {
  const c = ctxOf(runId);
  return [
    admittedEvent(runId, 'List the funds', 0.5),
    makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'runplane-scripted-research' }, at(1.5)),
    makeEvent(
      'model.turn.completed',
      c,
      1,
      {
        turn: 1,
        content: '',
        toolCalls: [{ toolCallId: 'call_1', name: 'list_funds', argumentsText: '{' }],
        finishReason: 'tool_calls',
        usage: null,
      },
      at(2.5),
    ),
    makeEvent('tool.call.proposed', c, 'call_1', { toolCallId: 'call_1', name: 'list_funds', argumentsText: '{', turn: 1 }, at(2.5)),
    makeEvent(
      'tool.call.receipt',
      c,
      'call_1',
      {
        toolCallId: 'call_1',
        name: 'list_funds',
        status: 'denied',
        error: { code: 'invalid_arguments', message: 'arguments are not JSON' },
        durationMs: 0,
      },
      at(2.6),
    ),
    makeEvent('model.turn.requested', c, 2, { turn: 2, model: 'runplane-scripted-research' }, at(3)),
    makeEvent('model.turn.failed', c, 2, { turn: 2, error: { kind: 'http', status: 500, message: 'upstream error' } }, at(4)),
    makeEvent('run.execution.finished', c, 'finished', { reason: 'model-error', detail: 'HTTP 500', answerTurn: null }, at(4)),
    makeEvent(
      'run.settled',
      c,
      'settled',
      {
        outcome: 'failed',
        reason: 'model-error',
        passageIds: [],
        receipts: [{ toolCallId: 'call_1', name: 'list_funds', status: 'denied' }],
        usage: { modelRequests: 2, toolCalls: 0, promptTokens: 0, completionTokens: 0 },
      },
      at(5),
    ),
  ];
}

/** Round-robin interleaving of several Runs' events (as concurrent Runs land in one stream). */
export function interleave(...runs: RunEvent[][]): RunEvent[] {
  const out: RunEvent[] = [];
  for (let i = 0; runs.some((r) => i < r.length); i++) for (const r of runs) if (i < r.length) out.push(r[i]!);
  return out;
}

/**
 * Appends events in order, each expecting the last sequence of its own owner subject (K6).
 * Returns the stored events as the log assigned them.
 */
export async function appendAll(log: EventLog, events: RunEvent[]): Promise<StoredEvent[]> {
  const last = new Map<string, number>();
  const out: StoredEvent[] = [];
  for (const event of events) {
    const key = `${event.runId}/${event.owner satisfies Owner}`;
    const { seq, stored } = await log.append(event, last.get(key) ?? 0);
    last.set(key, seq);
    out.push(stored); // as a reader sees it: with its back-link (`prevSeq`) and writer
  }
  return out;
}

/** Stored events with consecutive sequences from `from`, for tests without a log. */
export function storedInOrder(events: RunEvent[], from = 1): StoredEvent[] {
  return events.map((event, i) => ({ seq: from + i, subject: `t.run.${event.runId}.${event.owner}`, event }));
}
