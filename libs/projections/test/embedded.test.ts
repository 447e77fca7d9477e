/**
 * The demo's embedded-database fallback: PGlite migrated through MikroORM's PGlite driver and
 * served over the PostgreSQL protocol, used by the same projection code as a real server.
 */
import { describe, expect, it } from '@jest/globals';
import { History } from '../../../test/support/history.js';
import { applyStoredEvent, createProjectionOrm, dumpProjectionRows, getRunView, migrateUp, startEmbeddedDatabase } from '@runplane/projections';

describe('embedded PostgreSQL (PGlite) fallback', () => {
  it('serves a migrated database that the ordinary projection code projects into', async () => {
    const db = await startEmbeddedDatabase({ dataDir: 'memory://' });
    try {
      expect(db.migrated.length).toBeGreaterThan(0);
      const orm = await createProjectionOrm({ databaseUrl: db.url, poolMax: 2 });
      try {
        expect(await migrateUp(orm)).toEqual([]); // already migrated through the PGlite driver
        const h = new History('run-embedded').admitted({ content: 'What does SPY hold?' }).turn(1, { content: 'It holds 503 securities.' });
        for (const stored of h.events) await applyStoredEvent(orm.em, stored);
        const view = await getRunView(orm, 'run-embedded');
        expect(view).toMatchObject({ runId: 'run-embedded', question: 'What does SPY hold?', modelRequests: 1, lastSeq: 3 });
        // a fact carrying U+0000 (which PostgreSQL text cannot hold) is projected with U+FFFD, not retried forever
        const nul = new History('run-nul').admitted({ content: 'SPY \u0000 QQQ' });
        await applyStoredEvent(orm.em, nul.events[0]!);
        const rows = (await dumpProjectionRows(orm)) as unknown as { messages: { run_id: string; content: string }[] };
        expect(rows.messages.find((m) => m.run_id === 'run-nul')?.content).toBe('SPY \uFFFD QQQ');
      } finally {
        await orm.close();
      }
    } finally {
      await db.close();
    }
  }, 60_000);
});
