/**
 * What a test run killed at once leaves behind is removed by a later run's global set-up
 * (test/support/abandoned.js): a test database nobody is connected to, created long enough ago, is
 * dropped, one in use is not; a test folder under the temporary folder last changed long ago is
 * removed, a recent one and any folder of another name are not.
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { dropAbandonedDatabases, removeAbandonedFolders } from '../support/abandoned.js';

const SERVER = 'postgresql://postgres@127.0.0.1:5432';
const tag = `rp_sweep${randomBytes(4).toString('hex')}`;
const dir = mkdtempSync(join(tmpdir(), 'abandoned-test-'));
const admin = new pg.Client({ connectionString: `${SERVER}/postgres` });
let connected = false;
const holders: pg.Client[] = [];

afterAll(async () => {
  for (const c of holders) await c.end().catch(() => undefined);
  if (connected) {
    for (const name of [`${tag}_unused`, `${tag}_in_use`, `${tag}_recent`]) await admin.query(`drop database if exists "${name}"`);
    await admin.end();
  }
  rmSync(dir, { recursive: true, force: true });
});

async function databaseExists(name: string): Promise<boolean> {
  return (await admin.query('select 1 from pg_database where datname = $1', [name])).rowCount === 1;
}

describe('abandoned test databases and folders', () => {
  it('drops a test database nobody uses that is older than the bound, not one a session is connected to, nor a recent one', async () => {
    await admin.connect();
    connected = true;
    for (const name of [`${tag}_unused`, `${tag}_in_use`, `${tag}_recent`]) await admin.query(`create database "${name}"`);
    const holder = new pg.Client({ connectionString: `${SERVER}/${tag}_in_use` });
    holders.push(holder);
    await holder.connect();
    const ours = new RegExp(`^${tag}_`);
    // the default bound (12 h): a database made a moment ago stays
    expect(await dropAbandonedDatabases(`${SERVER}/postgres`, { pattern: ours })).toEqual([]);
    expect(await databaseExists(`${tag}_recent`)).toBe(true);
    // every database made before now counts as old: the one in use stays all the same
    await new Promise((r) => setTimeout(r, 1100)); // PG_VERSION's time has whole seconds
    const dropped = await dropAbandonedDatabases(`${SERVER}/postgres`, { olderThanH: 0, pattern: new RegExp(`^${tag}_(unused|in_use)$`) });
    expect(dropped).toEqual([`${tag}_unused`]);
    expect(await databaseExists(`${tag}_unused`)).toBe(false);
    expect(await databaseExists(`${tag}_in_use`)).toBe(true);
    expect(await databaseExists(`${tag}_recent`)).toBe(true);
  }, 30_000);

  it('removes a test folder last changed before the bound, not a recent one nor a folder of another name', () => {
    const old = (name: string) => {
      mkdirSync(join(dir, name));
      const thirteenHoursAgo = new Date(Date.now() - 13 * 3600_000);
      utimesSync(join(dir, name), thirteenHoursAgo, thirteenHoursAgo);
    };
    old('rp-partitions-AbC123');
    old('rp-nats-shared-xYz789');
    old('someone-else-AbC123');
    mkdirSync(join(dir, 'rp-token-Fre5h1'));
    expect(removeAbandonedFolders(dir).sort()).toEqual(['rp-nats-shared-xYz789', 'rp-partitions-AbC123']);
    expect(existsSync(join(dir, 'rp-token-Fre5h1'))).toBe(true);
    expect(existsSync(join(dir, 'someone-else-AbC123'))).toBe(true);
  });
});
