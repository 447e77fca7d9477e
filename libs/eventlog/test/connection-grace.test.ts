/**
 * A liveness judge's grace around its own NATS connection (K6, K10: late is not gone): while the
 * judge is cut off nothing it holds expires, and after it is back every holder gets a full TTL plus
 * the others' reconnect time. The rules given/when/then on the class, then the same against a real
 * nats-server killed and started again under a followed connection.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { ConnectionGrace, RECONNECT_GRACE_MS } from '@runplane/eventlog';
import { currentNatsServerBinary, nextReconnect, suiteNatsOptions, TestNatsServer } from '../../../test/support/nats-server.js';
import { waitFor } from '../../../test/support/wait.js';

const TTL_MS = 1_200;

describe('ConnectionGrace: the rules', () => {
  it('given a connection made at t, then a holder may be judged expired from t + grace + TTL', () => {
    const grace = new ConnectionGrace(10_000);
    expect(grace.judgeFrom(TTL_MS)).toBe(10_000 + RECONNECT_GRACE_MS + TTL_MS);
  });

  it('given a connection, when it goes down, then nothing may be judged expired until it is back', () => {
    const grace = new ConnectionGrace(10_000);
    grace.disconnected();
    expect(grace.isConnected).toBe(false);
    expect(grace.judgeFrom(TTL_MS)).toBe(Number.POSITIVE_INFINITY);
  });

  it('given a connection that went down, when it is back at t2, then the grace counts from t2', () => {
    const grace = new ConnectionGrace(10_000);
    grace.disconnected();
    grace.reconnected(50_000);
    expect(grace.isConnected).toBe(true);
    expect(grace.judgeFrom(TTL_MS)).toBe(50_000 + RECONNECT_GRACE_MS + TTL_MS);
  });

  it('given a connection, when a request goes unanswered, then the grace counts from then, never from earlier', () => {
    const grace = new ConnectionGrace(10_000);
    grace.unanswered(30_000);
    expect(grace.judgeFrom(TTL_MS)).toBe(30_000 + RECONNECT_GRACE_MS + TTL_MS);
    grace.unanswered(20_000);
    expect(grace.judgeFrom(TTL_MS)).toBe(30_000 + RECONNECT_GRACE_MS + TTL_MS);
  });
});

describe('ConnectionGrace: following a real connection across a nats-server crash', () => {
  let server: TestNatsServer;
  let nc: NatsConnection;

  beforeAll(async () => {
    server = await TestNatsServer.start({ bin: currentNatsServerBinary().bin });
    nc = await connect(suiteNatsOptions(server.url, { reconnect: true, maxReconnectAttempts: -1, reconnectTimeWait: 200 }));
  }, 60_000);
  afterAll(async () => {
    await nc?.close().catch(() => undefined);
    await server?.cleanup();
  });

  it('given a followed connection, when nats-server is killed, then nothing expires; when it is back, then the grace counts from the reconnection', async () => {
    let reconnections = 0;
    const grace = new ConnectionGrace().follow(nc, () => reconnections++);
    expect(Number.isFinite(grace.judgeFrom(TTL_MS))).toBe(true);

    // FAULT: a crash of the server under the connection
    await server.kill();
    await waitFor('the client noticed the server gone', () => !grace.isConnected, 10_000);
    expect(grace.judgeFrom(TTL_MS)).toBe(Number.POSITIVE_INFINITY);

    const reconnected = nextReconnect(nc, 30_000);
    const restartedAt = Date.now();
    await server.restart();
    await reconnected;
    await waitFor('the grace saw the reconnection', () => grace.isConnected, 10_000);
    expect(reconnections).toBe(1);
    expect(grace.judgeFrom(TTL_MS)).toBeGreaterThanOrEqual(restartedAt + RECONNECT_GRACE_MS + TTL_MS);
    expect(grace.judgeFrom(TTL_MS)).toBeLessThanOrEqual(Date.now() + RECONNECT_GRACE_MS + TTL_MS);
  }, 60_000);
});
