/**
 * Shutting down without a broker: `EventLog.close()` drains the connection when the server
 * answers, and closes it anyway within its bound when the server is gone or frozen, so a service
 * that receives SIGTERM during a NATS outage still exits (its pod is not held until SIGKILL).
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { EventLog } from '@runplane/eventlog';
import { currentNatsServerBinary, SUITE_NATS, TestNatsServer } from '../../../test/support/nats-server.js';

const current = currentNatsServerBinary();
const servers: TestNatsServer[] = [];
afterAll(async () => {
  for (const s of servers) await s.cleanup();
});

async function connected(): Promise<{ server: TestNatsServer; log: EventLog }> {
  const server = await TestNatsServer.start({ bin: current.bin });
  servers.push(server);
  const tag = randomBytes(4).toString('hex');
  const log = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, stream: `RPTEST_CLOSE_${tag}`, prefix: `tcl${tag}` });
  return { server, log };
}

// each test has a server of its own, and the two bounded closes each wait out CLOSE_DRAIN_MS (3 s):
// run together, the file waits it out once
describe('EventLog.close() (graceful shutdown)', () => {
  it.concurrent(
    'given the server is gone (the client reconnecting), then close() still closes the connection within its bound',
    async () => {
      const { server, log } = await connected();
      await server.kill();
      const started = Date.now();
      await log.close();
      expect(log.nc.isClosed()).toBe(true);
      expect(Date.now() - started).toBeLessThan(10_000);
    },
    30_000,
  );

  it.concurrent(
    'given the server is frozen (SIGSTOP), then close() still closes the connection within its bound',
    async () => {
      const { server, log } = await connected();
      await server.freeze();
      try {
        const started = Date.now();
        await log.close();
        expect(log.nc.isClosed()).toBe(true);
        expect(Date.now() - started).toBeLessThan(10_000);
      } finally {
        server.thaw();
      }
    },
    30_000,
  );

  it.concurrent(
    'given the server answers, then close() drains and closes the connection, the server still running',
    async () => {
      const { server, log } = await connected();
      await log.close();
      expect(log.nc.isClosed()).toBe(true);
      expect(server.running).toBe(true);
    },
    30_000,
  );
});
