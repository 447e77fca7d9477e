/**
 * A first connection to NATS (`connectPatiently`, stale-connection.ts): each attempt is bounded
 * (5 s in the services, so that a reconnection leaves a hung server quickly), and an attempt that
 * times out is made again, four attempts in all; a refusal is not tried again.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { createServer, type Server, type Socket } from 'node:net';
import { errors } from '@nats-io/transport-node';
import { connectPatiently, STALE_CONNECTION_OPTIONS } from '../src/stale-connection.js';

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
  it('is what the services connect with: a ping every 2 s, stale after 2 unanswered, 5 s per connection attempt', () => {
    expect(STALE_CONNECTION_OPTIONS).toEqual({ pingInterval: 2_000, maxPingOut: 2, timeout: 5_000 });
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
