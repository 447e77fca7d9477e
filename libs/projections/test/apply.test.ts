import { describe, expect, it } from '@jest/globals';
import { makeEvent, RunView } from '@runplane/contracts';
import { OrphanEventError, applyStoredEvent, dumpProjectionRows, getRunView, migrateUp } from '@runplane/projections';
import {
  admittedEvent,
  at,
  ctxOf,
  migratedTestDatabase,
  researchRunEvents,
  researchRunSettled,
  storedInOrder,
  uniqueTag,
  unlimitedBudgetColumns,
} from './fixtures.js';

const db = migratedTestDatabase('apply');

describe('migrations', () => {
  it('given a migrated database, when migrating again, then nothing is applied (idempotent start-up)', async () => {
    expect(await migrateUp(db.orm)).toEqual([]);
  });

  it('given the migrated tables, then the entities agree with every column (the schema diff only drops what entities do not declare: FKs, checks, indexes)', async () => {
    const statements = (await db.orm.schema.getUpdateSchemaSQL({ wrap: false }))
      .split(';')
      .map((s) => s.trim())
      .filter(Boolean);
    expect(statements.filter((s) => !/^(alter table "\w+" drop constraint "\w+"|drop index "\w+")$/.test(s))).toEqual([]);
  });
});

describe('applyStoredEvent (K11 idempotency)', () => {
  it('given seq 1,2,2,1 of one Run, then applied, applied, skipped, skipped, and the rows after the skips equal the rows before', async () => {
    const runId = `idem-${uniqueTag()}`;
    const [s1, s2] = storedInOrder(researchRunEvents(runId).slice(0, 2), 1);
    expect((await applyStoredEvent(db.orm.em, s1!)).status).toBe('applied');
    expect((await applyStoredEvent(db.orm.em, s2!)).status).toBe('applied');
    const afterTwo = await dumpProjectionRows(db.orm);
    const again = await applyStoredEvent(db.orm.em, s2!);
    const older = await applyStoredEvent(db.orm.em, s1!);
    expect([again.status, older.status]).toEqual(['skipped', 'skipped']);
    expect(again.previousLastSeq).toBe(2);
    expect(await dumpProjectionRows(db.orm)).toEqual(afterTwo);
    expect(await getRunView(db.orm, runId)).toMatchObject({ status: 'running', modelRequests: 1, lastSeq: 2 });
  });

  it('given a Run past a tool receipt, when the receipt and its dispatch are redelivered, then the counters and the tool call row do not change', async () => {
    const runId = `redeliver-${uniqueTag()}`;
    const stored = storedInOrder(researchRunEvents(runId).slice(0, 9), 100);
    for (const s of stored) expect((await applyStoredEvent(db.orm.em, s)).status).toBe('applied');
    const before = await dumpProjectionRows(db.orm);
    for (const s of stored.slice(5, 9)) expect((await applyStoredEvent(db.orm.em, s)).status).toBe('skipped');
    expect(await dumpProjectionRows(db.orm)).toEqual(before);
    expect(await getRunView(db.orm, runId)).toMatchObject({ toolCalls: 2, modelRequests: 1, lastSeq: 108 });
  });

  it('given two concurrent deliveries of a Run admission, then exactly one applies', async () => {
    const runId = `race-${uniqueTag()}`;
    const [s1] = storedInOrder([admittedEvent(runId)], 500);
    const results = await Promise.all([applyStoredEvent(db.orm.em, s1!), applyStoredEvent(db.orm.em, s1!), applyStoredEvent(db.orm.em, s1!)]);
    expect(results.map((r) => r.status).sort()).toEqual(['applied', 'skipped', 'skipped']);
  });

  it('given no admission, when another event of the Run arrives, then it is refused and nothing is written', async () => {
    const runId = `orphan-${uniqueTag()}`;
    const before = await dumpProjectionRows(db.orm);
    const event = makeEvent('model.turn.requested', ctxOf(runId), 1, { turn: 1, model: 'm' }, at(1));
    await expect(applyStoredEvent(db.orm.em, { seq: 900, subject: `t.run.${runId}.runtime`, event })).rejects.toBeInstanceOf(OrphanEventError);
    expect(await dumpProjectionRows(db.orm)).toEqual(before);
  });
});

describe('getRunView', () => {
  it('given a fully projected Run, then the view is the contracts RunView of the settled Run', async () => {
    const runId = `view-${uniqueTag()}`;
    const stored = storedInOrder(researchRunEvents(runId), 1000);
    for (const s of stored) await applyStoredEvent(db.orm.em, s);
    const view = await getRunView(db.orm, runId);
    expect(RunView.parse(view)).toEqual({
      runId,
      // admitted with no principal (authentication off): whose Run it is, shown to admins only by the API
      principal: null,
      conversationId: `conv-${runId}`,
      messageId: `msg-${runId}`,
      clientMessageId: `client-${runId}`,
      question: 'Compare the holdings of fund A and fund B',
      ...researchRunSettled,
      reason: 'answered; compare_holdings failed',
      admittedAt: '2026-11-30T10:00:00.000Z',
      settledAt: '2026-11-30T10:00:11.000Z',
      maxModelRequests: 8,
      maxToolCalls: 16,
      ...unlimitedBudgetColumns,
      deadlineAt: '2026-11-30T10:15:00.000Z',
      startedAt: '2026-11-30T10:00:01.000Z',
      queuedMs: 1000,
      executionEndedAt: '2026-11-30T10:00:08.000Z',
      executingMs: 7000,
      lastProgressAt: '2026-11-30T10:00:08.000Z',
      clarificationId: null,
      lastSeq: 1000 + stored.length - 1,
    });
    const dump = await dumpProjectionRows(db.orm);
    expect(dump.passages.filter((p) => p.run_id === runId).map((p) => [p.passage_id, p.version])).toEqual([
      ['p0', 2],
      ['p1', 1],
    ]);
    expect(
      dump.model_turns.filter((t) => t.run_id === runId).map((t) => [t.turn, t.status, t.duration_ms, t.prompt_tokens, t.first_text_at !== null]),
    ).toEqual([
      [1, 'completed', 1000, 120, false],
      [2, 'completed', 2000, 120, true],
    ]);
    expect(dump.tool_calls.filter((t) => t.run_id === runId).map((t) => [t.tool_call_id, t.status, t.error_code])).toEqual([
      ['call_1', 'succeeded', null],
      ['call_2', 'failed', 'source_unavailable'],
    ]);
  });

  it('given an unknown Run, then null', async () => {
    expect(await getRunView(db.orm, 'nothing-here')).toBeNull();
  });
});
