/**
 * Auditors' tools never write (K11: reads never append): `runplane timeline` and
 * `runplane projections rebuild` create no stream or database they did not find, and each error
 * names the server, stream or database it could not use; `timeline --json` carries the stored
 * headers the log's verification reads. The built CLI against the suite's nats-server and the
 * machine's PostgreSQL.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawnSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import getPort from 'get-port';
import pg from 'pg';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { JetStreamApiError, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { makeEvent } from '@runplane/contracts';
import { BATCH_ID, BATCH_SEQUENCE, EXPECTED_LAST_SUBJECT_SEQUENCE, EventLog, StreamNotFound } from '@runplane/eventlog';
import { SHARED_NATS, SHARED_NATS_URL, suiteNatsEnv, suiteNatsOptions } from '../../../test/support/nats-server.js';
import { admittedEvent, testContext } from '../../../test/support/events.js';

const tag = randomBytes(4).toString('hex');
const PG = 'postgresql://postgres@127.0.0.1:5432';
let nc: NatsConnection;
let jsm: JetStreamManager;

beforeAll(async () => {
  nc = await connect(suiteNatsOptions());
  jsm = await jetstreamManager(nc);
});
afterAll(async () => {
  await nc?.close();
});

/**
 * The CLI with the bus and database settings given, as the suite's user over TLS (the shared
 * server's, suiteNatsEnv; `env` may point it elsewhere).
 */
function cli(args: string[], env: Record<string, string>) {
  const base: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1', ...suiteNatsEnv(), ...env };
  return spawnSync(process.execPath, [fileURLToPath(new URL('../dist/main.js', import.meta.url)), ...args], {
    env: base,
    encoding: 'utf8',
    timeout: 60_000,
  });
}

async function streamExists(name: string): Promise<boolean> {
  try {
    await jsm.streams.info(name);
    return true;
  } catch (e) {
    if (e instanceof JetStreamApiError && e.status === 404) return false;
    throw e;
  }
}

/** The databases of this server whose names start with `prefix`. */
async function databasesLike(prefix: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: `${PG}/postgres` });
  await client.connect();
  try {
    const r = await client.query<{ datname: string }>('select datname from pg_database where starts_with(datname, $1)', [prefix]);
    return r.rows.map((row) => row.datname);
  } finally {
    await client.end();
  }
}

const ctx = testContext;
const admitted = (runId: string) => admittedEvent(runId, 9);
const turn = (runId: string, n: number) => makeEvent('model.turn.requested', ctx(runId), n, { turn: n, model: 'm' }, new Date());

describe('auditors’ tools open the log read-only (K11)', () => {
  it('timeline against a server without the stream exits 1 naming the server and the stream, and the stream still does not exist', async () => {
    const stream = `RPT_RO_MISSING_${tag}`;
    const run = cli(['timeline', randomUUID()], { NATS_URL: SHARED_NATS_URL, RUNPLANE_STREAM: stream, RUNPLANE_SUBJECT_PREFIX: `tro${tag}` });
    expect(run.status).toBe(1);
    expect(run.stderr).toContain(`stream ${stream} does not exist on NATS at ${SHARED_NATS_URL}`);
    expect(run.stderr).toContain('nothing was created');
    expect(await streamExists(stream)).toBe(false);
    // the library refuses the same way, with its own error class
    await expect(EventLog.connect({ ...SHARED_NATS, stream, prefix: `tro${tag}`, create: false })).rejects.toBeInstanceOf(StreamNotFound);
    expect(await streamExists(stream)).toBe(false);
  });

  it('audit against a server without the stream exits 1 naming the server and the stream, and the stream still does not exist', async () => {
    const stream = `RPT_RO_AUDIT_${tag}`;
    for (const args of [
      ['audit', '--all'],
      ['audit', '--run', randomUUID()],
    ]) {
      const run = cli(args, { NATS_URL: SHARED_NATS_URL, RUNPLANE_STREAM: stream, RUNPLANE_SUBJECT_PREFIX: `tro${tag}` });
      expect([args, run.status]).toEqual([args, 1]);
      expect(run.stderr).toContain(`stream ${stream} does not exist on NATS at ${SHARED_NATS_URL}`);
    }
    expect(await streamExists(stream)).toBe(false);
  });

  it('timeline against a NATS URL where no server listens names that server', async () => {
    const url = `nats://127.0.0.1:${await getPort({ host: '127.0.0.1' })}`;
    const run = cli(['timeline', randomUUID()], { NATS_URL: url });
    expect(run.status).toBe(1);
    expect(run.stderr).toContain(`cannot connect to NATS at ${url}`);
  });

  it('projections rebuild against a server without the stream fails naming it, creating neither the stream nor a database', async () => {
    const stream = `RPT_RO_NOSTREAM_${tag}`;
    const live = `rp_ro_nostream_${tag}`;
    const run = cli(['projections', 'rebuild'], {
      NATS_URL: SHARED_NATS_URL,
      RUNPLANE_STREAM: stream,
      RUNPLANE_SUBJECT_PREFIX: `trn${tag}`,
      DATABASE_URL: `${PG}/${live}`,
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toContain(`stream ${stream} does not exist on NATS at ${SHARED_NATS_URL}`);
    expect(await streamExists(stream)).toBe(false);
    expect(await databasesLike(live)).toEqual([]);
  });

  describe('on a stream that exists', () => {
    const stream = `RPT_RO_${tag}`;
    const prefix = `trx${tag}`;
    const runId = randomUUID();
    let log: EventLog;
    beforeAll(async () => {
      log = await EventLog.connect({ ...SHARED_NATS, stream, prefix, atomicBatches: 'always' });
      const first = await log.append(admitted(runId), 0);
      // one decision of two events on one subject: the second links inside the atomic batch
      await log.appendBatch([{ event: turn(runId, 1), expectedLastSubjectSeq: 0 }, { event: turn(runId, 2) }]);
      expect(first.seq).toBeGreaterThan(0);
    });
    afterAll(async () => {
      await log?.destroyStream();
      await log?.close();
    });
    const env = () => ({ NATS_URL: SHARED_NATS_URL, RUNPLANE_STREAM: stream, RUNPLANE_SUBJECT_PREFIX: prefix });

    it('projections rebuild against a live database that does not exist fails naming it, and no database was created (no copy left)', async () => {
      const live = `rp_ro_missing_${tag}`;
      const run = cli(['projections', 'rebuild'], { ...env(), DATABASE_URL: `${PG}/${live}` });
      expect(run.status).toBe(1);
      expect(run.stderr).toContain(`the live projection database "${live}" does not exist`);
      expect(await databasesLike(live)).toEqual([]);
    });

    it('timeline --json carries each message’s stored expectation and batch headers, as verifyStored reads them', async () => {
      const run = cli(['timeline', runId, '--json'], env());
      expect(run.stderr).toBe('');
      expect(run.status).toBe(0);
      const lines = run.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { seq: number; event: { type: string; eventId: string; prevSeq?: number }; headers: Record<string, string> });
      expect(lines.map((l) => l.event.type)).toEqual(['run.admitted', 'model.turn.requested', 'model.turn.requested']);
      const [admission, turn1, turn2] = lines as [(typeof lines)[0], (typeof lines)[0], (typeof lines)[0]];
      // a single conditional append: the expectation the server checked, and the event id it de-duplicates by
      expect(admission.headers).toEqual({ 'Nats-Msg-Id': admission.event.eventId, [EXPECTED_LAST_SUBJECT_SEQUENCE]: '0' });
      // the batch: the first event of its subject carries the expectation, the second only its batch position
      expect(turn1.headers).toMatchObject({ 'Nats-Msg-Id': turn1.event.eventId, [EXPECTED_LAST_SUBJECT_SEQUENCE]: '0', [BATCH_SEQUENCE]: '1' });
      expect(turn2.headers).toMatchObject({ 'Nats-Msg-Id': turn2.event.eventId, [BATCH_SEQUENCE]: '2', [BATCH_ID]: turn1.headers[BATCH_ID] });
      expect(turn2.headers[EXPECTED_LAST_SUBJECT_SEQUENCE]).toBeUndefined();
      // the library gives the same without the option only when asked: the services' reads carry none
      expect((await log.readRun(runId))[0]).not.toHaveProperty('headers');
      // a whole-log read (the scan path) carries the same headers as the back-link walk
      const scanned = [];
      for await (const e of log.readAll({ headers: true })) if (e.event.runId === runId) scanned.push(e.headers);
      expect(scanned).toEqual(lines.map((l) => l.headers));
    });
  });
});
