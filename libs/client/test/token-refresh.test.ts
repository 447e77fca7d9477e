/**
 * A 401 with a newer token at hand (`refreshToken`: the CLI reads a local stack's token file again
 * after `up` was started again with a new signing key): the request is sent once more with it, and
 * every later request carries it. Without one, or with the same token again, the 401 stands.
 * Against a real HTTP server that accepts only the newer token.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { createServer, type Server } from 'node:http';
import { RunplaneClient, RunplaneHttpError } from '@runplane/client';

let server: Server | null = null;
afterEach(async () => {
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = null;
});

/** An admission that answers 404 (no such message) to the bearer `accepted`, 401 to any other; it records the tokens it saw. */
async function admission(accepted: string): Promise<{ url: string; seen: string[] }> {
  const seen: string[] = [];
  server = createServer((req, res) => {
    const token = (req.headers.authorization ?? '').replace(/^Bearer /, '');
    seen.push(token);
    const status = token === accepted ? 404 : 401;
    const code = status === 404 ? 'not_found' : 'unauthorized';
    res.writeHead(status, { 'content-type': 'application/problem+json' });
    res.end(JSON.stringify({ type: `urn:runplane:problem:${code}`, title: code, status, detail: `${code} (test)`, code }));
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no port');
  return { url: `http://127.0.0.1:${address.port}`, seen };
}

describe('a request answered 401', () => {
  it('given a newer token at hand, then it is sent again with it, and later requests carry it', async () => {
    const { url, seen } = await admission('new');
    let refreshes = 0;
    const client = new RunplaneClient({ admission: url, publication: url, token: 'old', refreshToken: () => (refreshes++, 'new') });
    expect(await client.getMessage('c-1', 'm-1')).toBeNull();
    expect(await client.getMessage('c-1', 'm-2')).toBeNull();
    expect([seen, refreshes]).toEqual([['old', 'new', 'new'], 1]);
  });

  it('given no newer token (none, or the same one), then the 401 stands, sent once', async () => {
    for (const refreshToken of [undefined, () => 'old', () => undefined]) {
      const { url, seen } = await admission('new');
      const client = new RunplaneClient({ admission: url, publication: url, token: 'old', ...(refreshToken ? { refreshToken } : {}) });
      const refused = await client.getMessage('c-1', 'm-1').catch((e: unknown) => e);
      expect([refused instanceof RunplaneHttpError && refused.status, seen]).toEqual([401, ['old']]);
      await new Promise<void>((r) => server!.close(() => r()));
      server = null;
    }
  });
});
