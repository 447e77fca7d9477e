/**
 * postgresReachable against the machine's real PostgreSQL (127.0.0.1:5432): a server that refuses a
 * connection for a passing reason is tried again, a server that does not listen answers false at once.
 * A CI run had a stack's start report "PostgreSQL is not reachable" while another file's 96 Runs held
 * the machine: one 2 s connect attempt was the whole judgement.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import getPort from 'get-port';
import pg from 'pg';
import { passingDatabaseRefusal, postgresReachable } from '../src/index.js';

const ADMIN = process.env.RUNPLANE_TEST_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

describe('postgresReachable', () => {
  // a role of its own that may hold one connection at a time: a second connect is refused with 53300
  const role = `rp_reach_${randomBytes(4).toString('hex')}`;
  let admin: pg.Client;

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: ADMIN });
    await admin.connect();
    await admin.query(`CREATE ROLE ${role} LOGIN CONNECTION LIMIT 1`);
  });

  afterAll(async () => {
    await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
    await admin.query(`DROP ROLE IF EXISTS ${role}`);
    await admin.end();
  });

  it('given the server refuses with too many connections, when one is freed 800 ms later, then it is reachable (before: false at the first refusal)', async () => {
    const url = `postgres://${role}@127.0.0.1:5432/postgres`;
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    // the refusal is real: a plain connect now fails with 53300
    const probe = new pg.Client({ connectionString: url });
    const refused = await probe.connect().then(
      () => null,
      (e: unknown) => e,
    );
    await probe.end().catch(() => undefined);
    expect((refused as { code?: string })?.code).toBe('53300');
    expect(passingDatabaseRefusal(refused)).toBe('too many clients');

    const started = Date.now();
    setTimeout(() => void holder.end(), 800);
    await expect(postgresReachable(url, 10_000)).resolves.toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(700);
  });

  it('given the refusal lasts past the patience, then false', async () => {
    const url = `postgres://${role}@127.0.0.1:5432/postgres`;
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    try {
      const started = Date.now();
      await expect(postgresReachable(url, 1_000)).resolves.toBe(false);
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      await holder.end();
    }
  });

  it('given nothing listens on the port, then false at once (the CLI falls back to its embedded database without waiting)', async () => {
    const port = await getPort();
    const started = Date.now();
    await expect(postgresReachable(`postgres://postgres@127.0.0.1:${port}/postgres`, 30_000)).resolves.toBe(false);
    expect(Date.now() - started).toBeLessThan(2_000);
  });
});
