/**
 * `runplane projections rebuild` stopped with SIGINT while it works leaves no database behind: its
 * fresh `<live>_rebuild_<timestamp>` database is dropped before the command ends, the live one is
 * untouched, and stderr says it stopped (commands.ts `stoppable`, projections `rebuildProjections`
 * with its signal). The built CLI against the suite's nats-server and the machine's PostgreSQL.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { MikroORM } from '@mikro-orm/postgresql';
import { EventLog } from '@runplane/eventlog';
import { databaseUrlWith, dropDatabase } from '@runplane/projections';
import { adminUrl, appendAll, openMigratedDatabase, researchRunEvents, uniqueTag } from '../../../libs/projections/test/fixtures.js';
import { SHARED_NATS_URL, SUITE_NATS, suiteNatsEnv } from '../../../test/support/nats-server.js';

const tag = uniqueTag();
const liveDb = `rp_test_rbsig_${tag}`;
const stream = `RPTEST_RBSIG_${tag}`;
const prefix = `trbs${tag}`;
/** Runs in the log: enough events that the replay outlasts the wait for its database to appear. */
const RUNS = 60;
let log: EventLog;
let live: MikroORM;

/** The databases of the server whose names start with `prefix`. */
async function databasesLike(start: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    return (await client.query<{ datname: string }>('select datname from pg_database where starts_with(datname, $1)', [start])).rows.map(
      (r) => r.datname,
    );
  } finally {
    await client.end();
  }
}

beforeAll(async () => {
  log = await EventLog.connect({ ...SUITE_NATS, natsUrl: SHARED_NATS_URL, stream, prefix });
  ({ orm: live } = await openMigratedDatabase(liveDb));
  await appendAll(log, Array.from({ length: RUNS }, (_, i) => researchRunEvents(`r${i}-${tag}`)).flat());
}, 120_000);
afterAll(async () => {
  await live?.close();
  for (const db of [liveDb, ...(await databasesLike(`${liveDb}_rebuild_`))]) await dropDatabase(adminUrl, db);
  await log?.destroyStream();
  await log?.close();
});

describe('projections rebuild and SIGINT', () => {
  it('given SIGINT once its fresh database exists, then the command ends saying it stopped, that database is gone, and the live one stands', async () => {
    const child = spawn(process.execPath, [fileURLToPath(new URL('../dist/main.js', import.meta.url)), 'projections', 'rebuild'], {
      env: {
        ...process.env,
        NO_COLOR: '1',
        ...suiteNatsEnv(),
        RUNPLANE_STREAM: stream,
        RUNPLANE_SUBJECT_PREFIX: prefix,
        DATABASE_URL: databaseUrlWith(adminUrl, liveDb),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    let stdout = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    // the signal once the rebuild has made its database (it replays the log into it next)
    let made: string[] = [];
    const end = Date.now() + 60_000;
    while (made.length === 0 && child.exitCode === null && Date.now() < end) {
      made = await databasesLike(`${liveDb}_rebuild_`);
      if (made.length === 0) await new Promise((r) => setTimeout(r, 10));
    }
    expect(made).toHaveLength(1);
    child.kill('SIGINT');
    const code = await exited;
    expect({ code, stopped: stderr.includes('SIGINT: stopping') }).toEqual({ code: 1, stopped: true });
    expect(stderr).toContain(`its database ${made[0]} was dropped`);
    expect(stdout).not.toContain('identical');
    expect(await databasesLike(`${liveDb}_rebuild_`)).toEqual([]);
    expect(await databasesLike(liveDb)).toEqual([liveDb]);
  }, 120_000);
});
