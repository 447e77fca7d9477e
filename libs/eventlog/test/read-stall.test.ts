/**
 * A whole-log read (`readAll`: rebuilds, audits) survives a server that stops answering in the
 * middle of it (SIGSTOP for twice the fetch's expiry as the second fetch goes out) and yields every
 * event once, in order. The fetch's expiry is 1 s here (5 s in production), so the freeze is 2 s
 * instead of 7 s: the same ratio, the same path, in a third of the time. The frozen fetch ends with
 * the client's "heartbeats missed" error (with nats-server 2.15.1 and the 5 s expiry too: the read
 * goes on with a new consumer from the next sequence, the path first seen in CI beside 16 CPU hogs).
 */
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { makeEvent } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { currentNatsServerBinary, SUITE_NATS, TestNatsServer } from '../../../test/support/nats-server.js';

const tag = randomBytes(4).toString('hex');
/** Each fetch of the read waits this long for its batch (the client's floor; production: 5 s). */
const FETCH_EXPIRES_MS = 1_000;
/** How long the server is frozen: longer than a fetch waits. */
const FREEZE_MS = 2 * FETCH_EXPIRES_MS;
let server: TestNatsServer;
let log: EventLog;

beforeAll(async () => {
  server = await TestNatsServer.start({ bin: currentNatsServerBinary().bin });
  log = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, stream: `RPTEST_STALL_${tag}`, prefix: `tst${tag}` });
});
afterAll(async () => {
  server.thaw();
  await log.destroyStream().catch(() => undefined);
  await log.close();
  await server.cleanup();
});

it('given 600 events (two fetches) and nats-server frozen for twice the fetch expiry as the second fetch goes out, when the whole log is read, then every event comes once, in order', async () => {
  const ctx = (runId: string) => ({ runId, conversationId: 'c1', correlationId: 'm1', causationId: null });
  const expected: number[] = [];
  for (let i = 0; i < 600; i++) {
    const runId = `r${i}${tag}`;
    const { seq } = await log.append(makeEvent('model.turn.requested', ctx(runId), 1, { turn: 1, model: 'm' }, new Date()), 0);
    expected.push(seq);
  }
  const seen: number[] = [];
  let frozenAt = 0;
  for await (const stored of log.readAll({ fetchExpiresMs: FETCH_EXPIRES_MS })) {
    seen.push(stored.seq);
    if (seen.length === 512) {
      // the first batch is read: the server stops answering before the next fetch goes out
      await server.freeze();
      setTimeout(() => server.thaw(), FREEZE_MS);
      frozenAt = Date.now();
    }
  }
  expect(Date.now() - frozenAt).toBeGreaterThanOrEqual(FETCH_EXPIRES_MS); // the second fetch really met the frozen server
  expect(seen).toEqual(expected);
}, 60_000);
