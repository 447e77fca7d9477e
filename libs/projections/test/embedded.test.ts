/**
 * The demo's embedded-database fallback: PGlite migrated through MikroORM's PGlite driver and
 * served over the PostgreSQL protocol, used by the same projection code as a real server. PGlite
 * runs in a process of its own (test/support/embedded-database.mjs, the built library), as in the
 * demo, where the services reach it over the protocol; inside Jest's module VM its WASM start alone
 * took about 40 s on a loaded 2-core machine.
 */
import { describe, expect, it } from '@jest/globals';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { History } from '../../../test/support/history.js';
import { applyStoredEvent, createProjectionOrm, dumpProjectionRows, getRunView, migrateUp } from '@runplane/projections';

/**
 * Starts the embedded database in its own process; `close` ends its stdin and waits for it to exit.
 * The process runs PGlite's WASM on V8's baseline compiler alone (`--liftoff-only`): its start is
 * one pass over initdb and the migrations, which V8's optimising tier only made dearer (measured
 * alone: 7.9 s wall and 8.5 s CPU to start and stop it, 4.6 s and 4.5 s without that tier). The
 * same code runs; only how V8 compiles it differs.
 */
async function startEmbeddedDatabase(): Promise<{ url: string; migrated: string[]; close(): Promise<void> }> {
  const script = fileURLToPath(new URL('../../../test/support/embedded-database.mjs', import.meta.url));
  const child = spawn(process.execPath, ['--liftoff-only', script], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const [line] = (await Promise.race([
    once(createInterface({ input: child.stdout }), 'line'),
    once(child, 'exit').then(([code]) => {
      throw new Error(`the embedded database exited (${code}) before it served`);
    }),
  ])) as [string];
  const { url, migrated } = JSON.parse(line) as { url: string; migrated: string[] };
  return {
    url,
    migrated,
    async close() {
      const exited = once(child, 'exit');
      child.stdin.end();
      await exited;
    },
  };
}

describe('embedded PostgreSQL (PGlite) fallback', () => {
  it('serves a migrated database that the ordinary projection code projects into', async () => {
    const db = await startEmbeddedDatabase();
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
