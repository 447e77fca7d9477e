/**
 * What `ask`, `continue` and `reply` do when admission answers 503 `dependency_unavailable` (NATS
 * was slow to take the append: a hung node of the cluster being left, a restart): they post the
 * same message again after 2 s, its `Retry-After`, up to five more times (the same
 * `clientMessageId` is admitted at most once, K1); any other refusal is not repeated. Against a
 * real HTTP server playing admission and the real client.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { createServer, type Server } from 'node:http';
import { RunplaneClient, RunplaneHttpError } from '@runplane/client';
import { postPatiently } from '@runplane/app-cli';

let server: Server | null = null;
afterEach(async () => {
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = null;
});

/** An admission that answers each POST with the next of `answers` (status and body), recording every body it got. */
async function admission(answers: { status: number; body: object }[]): Promise<{ url: string; bodies: unknown[] }> {
  const bodies: unknown[] = [];
  server = createServer((req, res) => {
    let text = '';
    req.on('data', (c: Buffer) => (text += c.toString()));
    req.on('end', () => {
      bodies.push(JSON.parse(text));
      const answer = answers[Math.min(bodies.length - 1, answers.length - 1)]!;
      res.writeHead(answer.status, { 'content-type': answer.status >= 400 ? 'application/problem+json' : 'application/json', 'retry-after': '2' });
      res.end(JSON.stringify(answer.body));
    });
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no port');
  return { url: `http://127.0.0.1:${address.port}`, bodies };
}

const problem = (status: number, code: string) => ({ type: `urn:runplane:problem:${code}`, title: code, status, detail: `${code} (test)`, code });
const admitted = {
  conversationId: 'c-1',
  clientMessageId: 'm-1',
  messageId: '6a1b0d1e-4c8f-5b8e-9a39-3f0e2f1f6a01',
  runId: '7b2c1e2f-5d9a-5c9f-8b4a-4a1f3a2b7c12',
  admittedAt: '2026-12-06T16:00:00.000Z',
  admission: 'admitted',
};

describe('postPatiently', () => {
  it('given admission answers 503 dependency_unavailable twice, then 201, then the same message is posted three times and admitted', async () => {
    const a = await admission([
      { status: 503, body: problem(503, 'dependency_unavailable') },
      { status: 503, body: problem(503, 'dependency_unavailable') },
      { status: 201, body: admitted },
    ]);
    const client = new RunplaneClient({ admission: a.url, publication: a.url });
    const started = Date.now();
    const res = await postPatiently(client, 'c-1', { clientMessageId: 'm-1', content: 'What does DIA hold?' });
    expect(res.status).toBe(201);
    expect(res.body.runId).toBe(admitted.runId);
    expect(a.bodies).toEqual(Array(3).fill({ clientMessageId: 'm-1', content: 'What does DIA hold?' }));
    expect(Date.now() - started).toBeGreaterThanOrEqual(2 * 2_000 - 50);
  }, 20_000);

  it('given any other refusal (a 400, a 503 of another kind), then it is thrown at once, the message posted once', async () => {
    for (const answer of [problem(400, 'invalid_body'), problem(503, 'shutting_down')]) {
      const a = await admission([{ status: answer.status, body: answer }]);
      const error = await postPatiently(new RunplaneClient({ admission: a.url, publication: a.url }), 'c-1', {
        clientMessageId: 'm-2',
        content: 'x',
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RunplaneHttpError);
      expect((error as RunplaneHttpError).status).toBe(answer.status);
      expect(a.bodies).toHaveLength(1);
      await new Promise<void>((r) => server!.close(() => r()));
      server = null;
    }
  });
});

describe('continue and reply when the named Run cannot be looked up', () => {
  it('say that admission refused the token or cannot be reached, not that the Run was not found', async () => {
    const { postLinked } = await import('@runplane/app-cli');
    // an admission that answers every GET 401 (a token of another stack's key)
    server = createServer((_req, res) => {
      res.writeHead(401, { 'content-type': 'application/problem+json' });
      res.end(JSON.stringify(problem(401, 'unauthorized')));
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
    const address = server.address();
    if (!address || typeof address === 'string') throw new Error('no port');
    const link = { kind: 'continue' as const, parentRunId: '6d06baa4-0f5c-4a8e-9f6b-1c2d3e4f5a6b' };
    const refused = postLinked({ admission: `http://127.0.0.1:${address.port}`, publication: 'http://127.0.0.1:1' }, link, 'and QQQ?');
    await expect(refused).rejects.toThrow(/401/);
    await expect(refused).rejects.not.toThrow(/not found/);
    // nothing listens on port 1
    const unreachable = postLinked({ admission: 'http://127.0.0.1:1', publication: 'http://127.0.0.1:1' }, link, 'and QQQ?');
    await expect(unreachable).rejects.toThrow(/cannot reach admission at http:\/\/127\.0\.0\.1:1/);
  });
});
