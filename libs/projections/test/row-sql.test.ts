import { describe, expect, it } from '@jest/globals';
import type { EntityMetadata } from '@mikro-orm/core';
import { makeEvent } from '@runplane/contracts';
import {
  MessageEntity,
  ModelTurnEntity,
  PROJECTION_COLUMNS,
  PassageEntity,
  RunEntity,
  ToolCallEntity,
  applyStoredEvents,
  createProjectionOrm,
  dumpProjectionRows,
  withoutNul,
} from '@runplane/projections';
import { admittedEvent, at, ctxOf, migratedTestDatabase, researchRunEvents, storedInOrder, uniqueTag } from './fixtures.js';

const db = migratedTestDatabase('rowsql');

/** The transaction id that last wrote each row of the projection tables, by table and primary key. */
async function writers(): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const t of Object.values(PROJECTION_COLUMNS)) {
    const key = t.key.map((k) => `"${k}"::text`).join(` || '/' || `);
    const rows = await db.orm.em.fork().execute<{ k: string; x: string }[]>(`select ${key} as k, xmin::text as x from "${t.table}"`);
    for (const r of rows) out[`${t.table}[${r.k}]`] = r.x;
  }
  return out;
}

describe('the write path columns (plain SQL, no unit of work)', () => {
  it('given the ORM metadata of the entities, then PROJECTION_COLUMNS names every column of every table, with the same property names', () => {
    const entities = { runs: RunEntity, messages: MessageEntity, passages: PassageEntity, toolCalls: ToolCallEntity, modelTurns: ModelTurnEntity };
    for (const [name, entity] of Object.entries(entities)) {
      const meta: EntityMetadata = db.orm.getMetadata().get(entity as never);
      const fromMeta = Object.values(meta.properties)
        .map((p) => [p.name, p.fieldNames[0]])
        .sort();
      const spec = PROJECTION_COLUMNS[name as keyof typeof PROJECTION_COLUMNS];
      expect(spec.table).toBe(meta.tableName);
      expect(spec.columns.map(([property, column]) => [property, column]).sort()).toEqual(fromMeta);
      expect([...spec.key].sort()).toEqual(meta.primaryKeys.map((k) => meta.properties[k]!.fieldNames[0]).sort());
    }
  });

  it('given a projected Run, when a batch changes only its Run row, then only that row is written; a batch of redeliveries writes nothing', async () => {
    const runId = `run-w-${uniqueTag()}`;
    const all = storedInOrder(researchRunEvents(runId), 1);
    const published = all.findIndex((s) => s.event.type === 'answer.published');
    expect((await applyStoredEvents(db.orm.em, all.slice(0, published))).every((r) => r.status === 'applied')).toBe(true);
    const before = await writers();

    // answer.published touches the Run row only
    expect((await applyStoredEvents(db.orm.em, [all[published]!])).map((r) => r.status)).toEqual(['applied']);
    const after = await writers();
    const rewritten = Object.keys(after).filter((k) => after[k] !== before[k]);
    expect(rewritten).toEqual([`runs[${runId}]`]);

    // redeliveries: every event skipped, no row written
    expect((await applyStoredEvents(db.orm.em, all.slice(0, published + 1))).every((r) => r.status === 'skipped')).toBe(true);
    expect(await writers()).toEqual(after);
  });

  it('given times with milliseconds and a session in another time zone, then the rows read back carry the same ISO-8601 UTC times', async () => {
    const runId = `run-tz-${uniqueTag()}`;
    const c = ctxOf(runId);
    const t0 = new Date('2026-11-30T23:59:59.987Z');
    await applyStoredEvents(db.orm.em, storedInOrder([admittedEvent(runId, 'times', 0)], 1));
    // the next batch reads the Run row back (in sessions whose time zone is not UTC) and writes it again
    await db.orm.em.fork().execute(`alter database "${db.name}" set timezone to 'Asia/Kolkata'`);
    const other = await createProjectionOrm({ databaseUrl: db.url });
    try {
      expect((await other.em.fork().execute<{ TimeZone: string }[]>('show timezone'))[0]!.TimeZone).toBe('Asia/Kolkata');
      const requested = makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'm' }, t0);
      const [r] = await applyStoredEvents(other.em, storedInOrder([requested], 2));
      expect(r!.status).toBe('applied');
    } finally {
      await other.close();
      await db.orm.em.fork().execute(`alter database "${db.name}" reset timezone`);
    }
    const dump = await dumpProjectionRows(db.orm);
    const run = dump.runs.find((row) => row.run_id === runId)!;
    const turn = dump.model_turns.find((row) => row.run_id === runId)!;
    expect(new Date(String(run.admitted_at)).toISOString()).toBe(at(0).toISOString());
    expect(new Date(String(run.started_at)).toISOString()).toBe(t0.toISOString());
    expect(new Date(String(turn.requested_at)).toISOString()).toBe(t0.toISOString());
  });

  it('given text with U+0000 or a lone surrogate, then withoutNul puts U+FFFD in its place, and returns clean values themselves (no copy)', () => {
    const clean = { a: ['x', { b: 'y' }], n: 1, z: null };
    expect(withoutNul(clean)).toBe(clean);
    expect(withoutNul({ a: ['x\u0000y', 'ok'], s: 'a\ud800b' })).toEqual({ a: ['x\uFFFDy', 'ok'], s: 'a\uFFFDb' });
  });
});
