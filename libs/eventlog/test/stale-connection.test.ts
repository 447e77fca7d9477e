/**
 * A first connection to NATS (`connectPatiently`, stale-connection.ts): each attempt is bounded
 * (5 s in the services, so that a reconnection leaves a hung server quickly), and an attempt that
 * times out is made again, four attempts in all; a refusal is not tried again.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { createServer, type Server, type Socket } from 'node:net';
import { errors, type Server as NatsServer } from '@nats-io/transport-node';
import { connectPatiently, leastRecentlyDialed, STALE_CONNECTION_OPTIONS } from '../src/stale-connection.js';

let server: Server | null = null;
const sockets: Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = null;
});

/** A TCP server that accepts and then says nothing, as a frozen nats-server's kernel does; counts the connections. */
async function silentServer(): Promise<{ port: number; accepted: () => number }> {
  let accepted = 0;
  server = createServer((socket) => {
    accepted++;
    sockets.push(socket);
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no port');
  return { port: address.port, accepted: () => accepted };
}

describe('connectPatiently', () => {
  it('is what the services connect with: a ping every 2 s, stale after 2 unanswered, 5 s per connection attempt, the least recently dialed node next', () => {
    expect(STALE_CONNECTION_OPTIONS).toEqual({ pingInterval: 2_000, maxPingOut: 2, timeout: 5_000, reconnectToServer: leastRecentlyDialed });
  });

  it('given a server that accepts and never answers, then each attempt times out and four are made before the timeout is thrown', async () => {
    const silent = await silentServer();
    const started = Date.now();
    const error = await connectPatiently({ servers: `127.0.0.1:${silent.port}`, timeout: 200, reconnect: false }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(errors.TimeoutError);
    expect(silent.accepted()).toBe(4);
    expect(Date.now() - started).toBeGreaterThanOrEqual(4 * 200);
  });

  it('given nothing listening, then the refusal is thrown at once, not tried again', async () => {
    const silent = await silentServer();
    const port = silent.port;
    await new Promise<void>((r) => server!.close(() => r()));
    server = null;
    const started = Date.now();
    const error = await connectPatiently({ servers: `127.0.0.1:${port}`, timeout: 200, reconnect: false }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect(error).not.toBeInstanceOf(errors.TimeoutError);
    expect(Date.now() - started).toBeLessThan(200);
  });
});

/** A pool entry as the client's snapshot gives it: `name` a node's host, `lastConnect` when it was last dialed (0: never). */
const node = (name: string, lastConnect: number): NatsServer => ({
  hostname: name,
  port: 4222,
  listen: `${name}:4222`,
  src: `${name}:4222`,
  tlsName: '',
  reconnects: 0,
  lastConnect,
  gossiped: false,
  didConnect: lastConnect > 0,
});

describe('leastRecentlyDialed (which node a reconnection dials)', () => {
  it('given the node just left first in the pool (the client rotation), when the connection went stale, then another node is dialed', () => {
    const left = node('nats-0', 1_000);
    expect(leastRecentlyDialed([left, node('nats-1', 0), node('nats-2', 0)])?.listen).toBe('nats-1:4222');
  });

  it('given every node dialed before, when choosing, then the one dialed longest ago, never the one just left', () => {
    expect(leastRecentlyDialed([node('nats-1', 9_000), node('nats-0', 5_000), node('nats-2', 7_000)])?.listen).toBe('nats-0:4222');
  });

  it('given one node only, when it is the one just left, then it is dialed again; given an empty pool, the client chooses', () => {
    expect(leastRecentlyDialed([node('nats-0', 1_000)])?.listen).toBe('nats-0:4222');
    expect(leastRecentlyDialed([])).toBeNull();
  });

  it('given a tie, when choosing, then the client own pick (the first) stands', () => {
    expect(leastRecentlyDialed([node('nats-2', 0), node('nats-0', 0)])?.listen).toBe('nats-2:4222');
  });
});
