/** The demo's fallback NATS gets its own projection database (docs/fund-research.md "The demo's NATS and database"). */
import { describe, expect, it } from '@jest/globals';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { databaseUrlWith, dropDatabase, ensureDatabase } from '@runplane/projections';
import { forgetProjectionsOfAnotherLog, projectionDatabaseFor } from '../src/index.js';

describe('projectionDatabaseFor', () => {
  const url = 'postgres://runplane:secret@127.0.0.1:5432/runplane?sslmode=disable';

  it("keeps the configured database for the machine's own NATS", () => {
    expect(projectionDatabaseFor(url, { child: null })).toBe(url);
  });

  it('gives a NATS started by this process a database of its own on the same server (before: the same database)', () => {
    const child = spawn(process.execPath, ['-e', '0']);
    try {
      expect(projectionDatabaseFor(url, { child })).toBe('postgres://runplane:secret@127.0.0.1:5432/runplane_devnats?sslmode=disable');
      // one per state folder (each holds its own server's store): two clones never share one
      const a = projectionDatabaseFor(url, { child }, '/tmp/clone-a/.runplane');
      const b = projectionDatabaseFor(url, { child }, '/tmp/clone-b/.runplane');
      expect(a).toMatch(/\/runplane_devnats_[0-9a-f]{8}\?sslmode=disable$/);
      expect(b).not.toBe(a);
      expect(projectionDatabaseFor(url, { child }, '/tmp/clone-a/.runplane')).toBe(a);
    } finally {
      child.kill();
    }
  });
});

describe('forgetProjectionsOfAnotherLog (a store replaced under a kept projection database)', () => {
  const admin = 'postgresql://postgres@127.0.0.1:5432/postgres';
  const configured = databaseUrlWith(admin, 'runplane');
  /** Whether database `name` exists (ensureDatabase creates a missing one: dropped again at once). */
  const exists = async (name: string): Promise<boolean> => {
    const created = await ensureDatabase(admin, name);
    if (created) await dropDatabase(admin, name);
    return !created;
  };

  it('given a new log, when the stack has its own database, then that database is dropped; a kept log, a configured database and a missing one stay', async () => {
    const name = `rp_test_forget_${randomBytes(4).toString('hex')}`;
    const own = databaseUrlWith(admin, name);
    try {
      await ensureDatabase(admin, name);
      // a kept log: its projections are this log's
      expect(await forgetProjectionsOfAnotherLog({ newLog: false }, own, configured)).toBe(false);
      // the start could not tell
      expect(await forgetProjectionsOfAnotherLog({}, own, configured)).toBe(false);
      // the configured database is never the stack's to drop
      expect(await forgetProjectionsOfAnotherLog({ newLog: true }, own, own)).toBe(false);
      expect(await exists(name)).toBe(true);
      await ensureDatabase(admin, name);
      // a new log: the database of the old one goes
      expect(await forgetProjectionsOfAnotherLog({ newLog: true }, own, configured)).toBe(true);
      expect(await exists(name)).toBe(false);
      // nothing to drop
      expect(await forgetProjectionsOfAnotherLog({ newLog: true }, own, configured)).toBe(false);
    } finally {
      await dropDatabase(admin, name);
    }
  });
});
