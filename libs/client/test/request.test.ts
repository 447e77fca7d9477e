/**
 * The client's one network rule: a connection the server closes as a request goes out on it
 * (the race of a reused keep-alive socket with the server's idle timeout, seen on a loaded
 * machine as "other side closed") is tried once more; a server that is not there is still
 * reported as unreachable, with the reason.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { createServer, type Server } from 'node:net';
import { RunplaneClient, RunplaneUnreachableError } from '@runplane/client';

let server: Server | null = null;
afterEach(async () => {
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = null;
});

/** A raw HTTP server that drops the first `drops` connections after reading their request, then answers 404. */
async function flaky(drops: number): Promise<{ url: string; connections: () => number }> {
  let connections = 0;
  server = createServer((socket) => {
    const n = ++connections;
    socket.once('data', () => {
      if (n <= drops) return void socket.destroy();
      const body = JSON.stringify({
        type: 'urn:runplane:problem:not_found',
        title: 'Not found',
        status: 404,
        detail: 'no such message',
        code: 'not_found',
      });
      socket.end(
        `HTTP/1.1 404 Not Found\r\ncontent-type: application/problem+json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
    });
  });
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, connections: () => connections };
}

describe('a connection closed by the server', () => {
  it('is tried once more on a new connection, and the answer is read', async () => {
    const s = await flaky(1);
    const client = new RunplaneClient({ admission: s.url, publication: s.url });
    expect(await client.getMessage('c1', 'm1')).toBeNull();
    expect(s.connections()).toBe(2);
  });

  it('twice in a row is reported unreachable, naming the reason (no endless retry)', async () => {
    const s = await flaky(2);
    const client = new RunplaneClient({ admission: s.url, publication: s.url });
    await expect(client.getMessage('c1', 'm1')).rejects.toThrow(RunplaneUnreachableError);
    expect(s.connections()).toBe(2);
  });
});

describe('a Run id that is empty', () => {
  it('given an empty Run id, when any Run call is made, then it is refused before any request (never the list of Runs at /v1/runs/)', async () => {
    // nothing listens here: a request would fail with a connection error, not this one
    const client = new RunplaneClient({ admission: 'http://127.0.0.1:9', publication: 'http://127.0.0.1:9' });
    for (const call of [() => client.getRun(''), () => client.getAnswer(''), () => client.streamEvents('', { onEvent: () => undefined })])
      await expect(call()).rejects.toThrow('the Run id is empty: give the id of a Run');
  });
});
