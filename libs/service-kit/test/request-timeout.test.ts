/**
 * A request that does not arrive whole in time is answered 408 `request_timeout` at that time, give
 * or take the server's check every second (`HTTP_TIMEOUT_CHECK_MS`): Node checks every 30 s by
 * default, so the 30 s bound answered after 39-71 s (measured by a trial). Against a real service
 * bootstrap (`startService`) with the bound shortened to 2 s, on raw sockets.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Module } from '@nestjs/common';
import { connect } from 'node:net';
import { HTTP_TIMEOUT_CHECK_MS, startService, type StartedService } from '../src/index.js';

const BOUND_MS = 2_000;
let service: StartedService;

@Module({})
class EmptyModule {}

beforeAll(async () => {
  service = await startService(
    { name: 'lifecycle', module: EmptyModule, portEnv: 'RUNPLANE_TIMEOUT_TEST_PORT', defaultPort: 0 },
    { logLevel: 'silent', httpRequestTimeoutMs: BOUND_MS },
  );
});
afterAll(async () => {
  await service?.app.close();
});

/** Sends `head` on a new connection and resolves with what the server answers and how long it took, ms. */
function answerTo(head: string): Promise<{ text: string; ms: number }> {
  const { hostname, port } = new URL(service.url);
  return new Promise((resolve, reject) => {
    const started = Date.now();
    let text = '';
    const socket = connect(Number(port), hostname, () => socket.write(head));
    socket.on('data', (d: Buffer) => (text += d.toString()));
    socket.on('close', () => resolve({ text, ms: Date.now() - started }));
    socket.on('error', reject);
    socket.setTimeout(15_000, () => socket.destroy(new Error(`no answer within 15 s; got: ${text}`)));
  });
}

describe('a request that does not arrive whole in time', () => {
  it.each([
    ['headers that never end', 'GET /livez HTTP/1.1\r\nHost: x\r\n'],
    [
      'a body shorter than its Content-Length',
      'POST /livez HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a"',
    ],
  ])('given %s, then 408 request_timeout comes within the bound and one check', async (_case, head) => {
    const { text, ms } = await answerTo(head);
    expect(text).toMatch(/^HTTP\/1\.1 408 /);
    expect(text).toContain('"code":"request_timeout"');
    expect(ms).toBeGreaterThanOrEqual(BOUND_MS - 50);
    expect(ms).toBeLessThan(BOUND_MS + HTTP_TIMEOUT_CHECK_MS + 1_000);
  });
});
