/**
 * Admission's quota reservations on a real nats-server: a write at a stale revision is refused
 * (`ReservationConflict`), and of parallel `change` calls of one principal each sees what the
 * others wrote, so a rule "reserve only while fewer than N are reserved" admits exactly N.
 */
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { EventLog, principalKey, QuotaReservations, ReservationConflict } from '@runplane/eventlog';
import { describeEachNatsServer, natsServersUnderTest, SUITE_NATS } from '../../../test/support/nats-server.js';

const servers = await natsServersUnderTest();
const tag = randomBytes(4).toString('hex');

describeEachNatsServer(servers, (server) => {
  let log: EventLog;
  let reservations: QuotaReservations;
  beforeAll(async () => {
    log = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, stream: `RPTEST_QR_${tag}`, prefix: `tqr${tag}` });
    reservations = await QuotaReservations.open(log);
  });
  afterAll(async () => {
    await reservations.kv.destroy().catch(() => undefined);
    await log.destroyStream();
    await log.close();
  });

  it('given an entry read at one revision, when another admission wrote it since, then writing at the old revision is a ReservationConflict', async () => {
    const principal = `alice-${tag}`;
    const read = await reservations.read(principal);
    expect(read).toEqual({ runs: [], revision: 0 });
    await reservations.write(principal, [{ runId: 'r1', reservedAt: new Date().toISOString() }], read.revision);
    await expect(reservations.write(principal, [{ runId: 'r2', reservedAt: new Date().toISOString() }], read.revision)).rejects.toBeInstanceOf(
      ReservationConflict,
    );
    expect((await reservations.read(principal)).runs.map((r) => r.runId)).toEqual(['r1']);
  });

  it('given 8 parallel changes that each reserve only while fewer than 2 are reserved, then exactly 2 reserve', async () => {
    const principal = `bob-${tag}`;
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        reservations.change(principal, async (runs) =>
          runs.length >= 2 ? null : [...runs, { runId: `run-${i}`, reservedAt: new Date().toISOString() }],
        ),
      ),
    );
    expect(results.filter(Boolean)).toHaveLength(2);
    expect((await reservations.read(principal)).runs).toHaveLength(2);
  });

  it('keys are per principal, whatever characters the principal has; Runs without one share one key', () => {
    expect(principalKey(null)).toBe('anonymous');
    expect(principalKey('a b/c*>')).toMatch(/^p\.[-_A-Za-z0-9]+$/);
    expect(principalKey('x')).not.toBe(principalKey('y'));
  });
});
