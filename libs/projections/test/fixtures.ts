/**
 * Test fixtures: realistic Runs as event lists (built with the contracts' `makeEvent`, fixed
 * `occurredAt` times), and a helper appending them to a real event log with the per-owner
 * subject expectation (K6).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll } from '@jest/globals';
import type { MikroORM } from '@mikro-orm/postgresql';
import pg from 'pg';
import { makeEvent, type Owner, type RunEvent, type StoredEvent } from '@runplane/contracts';
import type { EventLog } from '@runplane/eventlog';
import { assertDatabaseName, createProjectionOrm, databaseUrlWith, dropDatabase, ensureDatabase, migrateUp } from '@runplane/projections';
import { admittedEvent, at, ctxOf, researchRunEvents } from './research-run.js';

export { admittedEvent, at, ctxOf, researchRunEvents };

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
 * Creates the projection database `name` on {@link adminUrl} (unless it exists), opens it and
 * migrates it: its URL and the open ORM. The caller closes the ORM and drops the database.
 */
export async function openMigratedDatabase(name: string): Promise<{ url: string; orm: MikroORM }> {
  await ensureDatabase(adminUrl, name);
  const url = databaseUrlWith(adminUrl, name);
  const orm = await createProjectionOrm({ databaseUrl: url });
  await migrateUp(orm);
  return { url, orm };
}

/** The migrated database {@link copyOfMigratedDatabase} copies, one per test file (made on first use). */
const templateName = `rp_test_template_${uniqueTag()}`;
let template: Promise<void> | undefined;
afterAll(async () => {
  if (!template) return;
  await template.catch(() => undefined);
  await dropDatabase(adminUrl, templateName);
});

/**
 * Creates the projection database `name` on {@link adminUrl} as a copy of a database this test
 * file migrated once (`CREATE DATABASE ... TEMPLATE`), and opens it: its URL and the open ORM. A
 * copy took 20 to 100 ms, against 250 to 500 ms to create a database and run every migration on
 * it, so a file that makes many scratch databases migrates once. The caller closes the ORM and
 * drops the database; the template goes after the file.
 * @throws when the server refuses (a database `name` that exists already included).
 */
export async function copyOfMigratedDatabase(name: string): Promise<{ url: string; orm: MikroORM }> {
  assertDatabaseName(name);
  template ??= (async () => {
    await ensureDatabase(adminUrl, templateName);
    const orm = await createProjectionOrm({ databaseUrl: databaseUrlWith(adminUrl, templateName), poolMax: 1 });
    try {
      await migrateUp(orm);
    } finally {
      await orm.close(); // a template is copied only while no session is connected to it
    }
  })();
  await template;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`create database "${name}" template "${templateName}"`);
  } finally {
    await admin.end();
  }
  const url = databaseUrlWith(adminUrl, name);
  return { url, orm: await createProjectionOrm({ databaseUrl: url }) };
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
    ({ orm } = await openMigratedDatabase(name));
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

/**
 * `{ [key]: value }` for every key: the columns of an expected row that share one value (every
 * counter 0, every column not set yet null), so an exact expectation names them by what they are.
 */
export const columns = <K extends string, V>(value: V, ...keys: K[]): Record<K, V> =>
  Object.fromEntries(keys.map((key) => [key, value])) as Record<K, V>;

/**
 * The budget columns of a Run admitted with only the request and tool-call limits (every fixture
 * Run here): no token, money or reserve limit, no no-progress limit, nothing spent.
 */
export const unlimitedBudgetColumns = {
  ...columns(null, 'maxInputTokens', 'maxOutputTokens', 'maxCostMicros', 'costCurrency'),
  ...columns(0, 'costMicros', 'costUnknownMaxMicros'),
  ...columns(null, 'reserveModelRequests', 'reserveOutputTokens', 'noProgressSeconds'),
};

/** What {@link researchRunEvents} settles to, as its Run row and its view hold it: the outcome and the counts. */
export const researchRunSettled = {
  status: 'settled',
  outcome: 'completed',
  ...columns(2, 'modelRequests', 'toolCalls', 'passages'),
  promptTokens: 240,
  completionTokens: 60,
  unknownUsageTurns: 0,
} as const;

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
export async function appendAll(log: EventLog, events: RunEvent[], opts: { gapMs?: number } = {}): Promise<StoredEvent[]> {
  const last = new Map<string, number>();
  const out: StoredEvent[] = [];
  for (const event of events) {
    const key = `${event.runId}/${event.owner satisfies Owner}`;
    const { seq, stored } = await log.append(event, last.get(key) ?? 0);
    last.set(key, seq);
    out.push(stored); // as a reader sees it: with its back-link (`prevSeq`) and writer
    if (opts.gapMs) await new Promise((r) => setTimeout(r, opts.gapMs));
  }
  return out;
}

/** Stored events with consecutive sequences from `from`, for tests without a log. */
export function storedInOrder(events: RunEvent[], from = 1): StoredEvent[] {
  return events.map((event, i) => ({ seq: from + i, subject: `t.run.${event.runId}.${event.owner}`, event }));
}
