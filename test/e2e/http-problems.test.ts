/**
 * The HTTP surface of every service, for real against the running processes: errors are RFC 9457
 * problem details (application/problem+json), a client's mistake is a 400 with a reason (never a
 * 500), an unreachable PostgreSQL or NATS is a 503 with Retry-After, every service serves its
 * OpenAPI description, and the CLI says the server's reason and the URL it tried.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { connect } from 'node:net';
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import getPort from 'get-port';
import { openApiDocument, ProblemDetails } from '@runplane/contracts';
import { RunplaneClient, RunplaneHttpError, RunplaneUnreachableError } from '@runplane/client';
import {
  natsCaEnvOf,
  natsEnvOf,
  provisionAsAdmin,
  repoRoot,
  serviceEntry,
  spawnReady,
  startSecuredNats,
  type ManagedProcess,
} from '@runplane/devstack';
import { readFileSync } from 'node:fs';
import { startTestStack, type TestStack } from '../support/stack.js';

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack('http');
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

const url = (service: 'admission' | 'publication' | 'projector' | 'runtime' | 'tools' | 'lifecycle', path: string) =>
  `${t.stack.services.get(service)!.url}${path}`;

/** Fetches and checks the answer is problem details with `status`; returns the problem and the response. */
async function problemOf(res: Response, status: number): Promise<{ problem: ProblemDetails & Record<string, unknown>; res: Response }> {
  expect(res.status).toBe(status);
  expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  // no framework banner on any answer
  expect(res.headers.get('x-powered-by')).toBeNull();
  const body = (await res.json()) as Record<string, unknown>;
  const parsed = ProblemDetails.safeParse(body);
  expect(parsed.success).toBe(true);
  const problem = body as ProblemDetails & Record<string, unknown>;
  expect(problem.status).toBe(status);
  expect(problem.type).toBe(`urn:runplane:problem:${problem.code}`);
  expect(problem.title.length).toBeGreaterThan(0);
  expect(problem.detail.length).toBeGreaterThan(0);
  return { problem, res };
}

const postJson = (path: string, body: unknown, contentType = 'application/json') =>
  fetch(url('admission', path), {
    method: 'POST',
    headers: { 'content-type': contentType },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

describe('errors are problem details (RFC 9457) on every service', () => {
  it('400 invalid body: detail says why, issues list every reason, instance is the path', async () => {
    const { problem } = await problemOf(await postJson('/v1/conversations/conv-p/messages', { clientMessageId: 'p1', content: '   ' }), 400);
    expect(problem.code).toBe('invalid_body');
    expect(problem.detail).toContain('content must not be blank');
    expect(problem.issues).toEqual([{ path: 'content', message: 'content must not be blank' }]);
    expect(problem.instance).toBe('/v1/conversations/conv-p/messages');
  });

  it('400 arrays where strings are expected, a huge body field, a bad id, malformed JSON', async () => {
    const arrays = await problemOf(await postJson('/v1/conversations/conv-p/messages', { clientMessageId: ['a'], content: ['b'] }), 400);
    expect(arrays.problem.issues!.map((i) => i.path).sort()).toEqual(['clientMessageId', 'content']);
    const huge = await problemOf(await postJson('/v1/conversations/conv-p/messages', { clientMessageId: 'p2', content: 'x'.repeat(20_001) }), 400);
    expect(huge.problem.detail).toContain('at most 20000');
    const badId = await problemOf(await postJson('/v1/conversations/bad%20id/messages', { clientMessageId: 'p3', content: 'hi' }), 400);
    expect(badId.problem).toMatchObject({ code: 'bad_request', issues: [{ path: 'conversationId' }] });
    const longId = await problemOf(await fetch(url('admission', `/v1/runs/${'r'.repeat(500)}`)), 400);
    expect(longId.problem.detail).toMatch(/^runId/);
    const malformed = await problemOf(await postJson('/v1/conversations/conv-p/messages', '{"clientMessageId": '), 400);
    expect(malformed.problem.code).toBe('bad_request');
  });

  it('valid JSON that is not an object is an invalid body (400 invalid_body), not malformed JSON', async () => {
    for (const body of ['null', '"str"', '42']) {
      const { problem } = await problemOf(await postJson('/v1/conversations/conv-p/messages', body), 400);
      expect(problem.code).toBe('invalid_body');
      expect(problem.detail).toMatch(/must be a JSON object/);
    }
  });

  it('a cancel sent as text/plain (a cross-origin form post needs no preflight) is 415 and records nothing; an over-long X-Runplane-User is 400', async () => {
    const { body } = await t.client.postMessage('conv-p-cancel', { clientMessageId: 'pc1', content: 'What does DIA hold?' });
    const before = (await t.log.readRun(body.runId)).filter((e) => e.event.type === 'run.cancel.requested');
    const plain = await problemOf(await postJson(`/v1/runs/${body.runId}/cancel`, 'please cancel', 'text/plain'), 415);
    expect(plain.problem.code).toBe('unsupported_media_type');
    const longUser = await fetch(url('admission', `/v1/runs/${body.runId}/cancel`), {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-runplane-user': 'u'.repeat(5000) },
      body: '{}',
    });
    expect((await problemOf(longUser, 400)).problem.detail).toMatch(/X-Runplane-User/);
    const after = (await t.log.readRun(body.runId)).filter((e) => e.event.type === 'run.cancel.requested');
    expect(after).toEqual(before);
  });

  it('the body limit holds at its edge: a 20,000-character message is never too large however it is escaped; exactly the limit is read, one byte more is 413', async () => {
    const LIMIT = 256 * 1024; // MAX_REQUEST_BODY_BYTES (docs/api.md)
    // json.dumps' default (ensure_ascii) escapes every non-ASCII character: 6 bytes each, 12 for an astral one
    const escaped = (id: string, ch: string) =>
      JSON.stringify({ clientMessageId: id, content: ch.repeat(20_000) }).replace(
        /[\u0080-\uffff]/g,
        (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
      );
    const bmp = escaped('p-limit-bmp', '\u00e9');
    const astral = escaped('p-limit-astral', '\u{1F600}');
    expect(Buffer.byteLength(bmp)).toBeGreaterThan(100 * 1024);
    expect(Buffer.byteLength(astral)).toBeGreaterThan(200 * 1024);
    for (const body of [bmp, astral]) expect((await postJson('/v1/conversations/conv-limit/messages', body)).status).toBe(201);
    // padded with JSON whitespace to one below, exactly at and one above the limit
    const padded = (id: string, bytes: number) => {
      const json = JSON.stringify({ clientMessageId: id, content: 'What does SPY hold?' });
      return json + ' '.repeat(bytes - Buffer.byteLength(json));
    };
    expect((await postJson('/v1/conversations/conv-limit/messages', padded('p-limit-below', LIMIT - 1))).status).toBe(201);
    expect((await postJson('/v1/conversations/conv-limit/messages', padded('p-limit-at', LIMIT))).status).toBe(201);
    const above = await problemOf(await postJson('/v1/conversations/conv-limit/messages', padded('p-limit-above', LIMIT + 1)), 413);
    expect(above.problem.code).toBe('payload_too_large');
    const { admissionIds } = await import('@runplane/app-admission');
    expect(await t.log.readRun(admissionIds('conv-limit', 'p-limit-above').runId)).toEqual([]);
  }, 60_000);

  it('413 a body over the server limit, 415 not JSON', async () => {
    const big = await problemOf(await postJson('/v1/conversations/conv-p/messages', { clientMessageId: 'p4', content: 'x'.repeat(300_000) }), 413);
    expect(big.problem.code).toBe('payload_too_large');
    const form = await problemOf(await postJson('/v1/conversations/conv-p/messages', 'a=b', 'application/x-www-form-urlencoded'), 415);
    expect(form.problem.code).toBe('unsupported_media_type');
    // JSON declared as UTF-16 (ASCII text, NUL-interleaved: it passes a UTF-8 byte check) is refused, and starts no Run
    const utf16 = Buffer.from(JSON.stringify({ clientMessageId: 'p-utf16', content: 'What does DIA hold?' }), 'utf16le');
    const res = await fetch(url('admission', '/v1/conversations/conv-p/messages'), {
      method: 'POST',
      headers: { 'content-type': 'application/json; charset=utf-16' },
      body: utf16,
    });
    const wide = await problemOf(res, 415);
    expect(wide.problem.detail).toContain('utf-16');
    expect((await fetch(url('admission', '/v1/conversations/conv-p/messages/p-utf16'))).status).toBe(404);
  });

  it('404 unknown Run (admission and publication) and 409 conflicting message', async () => {
    expect((await problemOf(await fetch(url('admission', '/v1/runs/no-such-run')), 404)).problem.code).toBe('not_found');
    expect((await problemOf(await fetch(url('publication', '/v1/runs/no-such-run/answer')), 404)).problem.code).toBe('not_found');
    expect((await problemOf(await fetch(url('publication', '/v1/runs/no-such-run/events')), 404)).problem.code).toBe('not_found');
    const first = await t.client.postMessage('conv-p', { clientMessageId: 'p-conflict', content: 'What does SPY hold?' });
    const { problem } = await problemOf(
      await postJson('/v1/conversations/conv-p/messages', { clientMessageId: 'p-conflict', content: 'Other text' }),
      409,
    );
    expect(problem.code).toBe('message_conflict');
    expect(problem.detail).toContain('p-conflict');
    await t.waitForSettlement(first.body.runId);
  }, 90_000);

  it.each(['admission', 'publication', 'projector', 'runtime', 'tools', 'lifecycle'] as const)(
    'an unknown route on %s is a 404 problem',
    async (service) => {
      const { problem } = await problemOf(await fetch(url(service, '/no/such/route?x=1')), 404);
      expect(problem).toMatchObject({ code: 'route_not_found', instance: '/no/such/route' });
      expect(problem.detail).toContain('GET /no/such/route');
    },
  );
});

describe("what Node's HTTP parser refuses is problem details too (its own answer is a bare status line)", () => {
  /** Sends `raw` on a new connection to `service` and resolves with the whole answer once the server closes it. */
  const rawAnswer = (service: 'admission' | 'publication', raw: string) =>
    new Promise<string>((resolve, reject) => {
      const u = new URL(t.stack.services.get(service)!.url);
      const socket = connect(Number(u.port), u.hostname, () => socket.write(raw));
      let text = '';
      socket.on('data', (d: Buffer) => (text += d.toString('utf8')));
      socket.on('close', () => resolve(text));
      socket.on('error', reject);
    });
  const problemIn = (answer: string) => {
    const [head, body] = answer.split('\r\n\r\n');
    expect(head).toMatch(/content-type: application\/problem\+json/i);
    const parsed = ProblemDetails.parse(JSON.parse(body!));
    expect(parsed.type).toBe(`urn:runplane:problem:${parsed.code}`);
    return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head!)?.[1]), problem: parsed };
  };

  it('headers over 16 KiB: 431 headers_too_large, on admission and publication', async () => {
    for (const service of ['admission', 'publication'] as const) {
      const answer = await rawAnswer(service, `GET /v1/runs/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${'a'.repeat(20_000)}\r\n\r\n`);
      expect(problemIn(answer)).toMatchObject({ status: 431, problem: { status: 431, code: 'headers_too_large' } });
    }
  });

  it('a control character in a header: 400 bad_request', async () => {
    const answer = await rawAnswer('admission', 'GET /v1/runs/x HTTP/1.1\r\nHost: x\r\nX-Thing: a\u0001b\r\n\r\n');
    expect(problemIn(answer)).toMatchObject({ status: 400, problem: { status: 400, code: 'bad_request' } });
  });
});

describe('a client mistake on the event stream is a 400 with a reason', () => {
  it.each([
    ['a repeated lastEventId', '?lastEventId=1&lastEventId=2', {}, 'query.lastEventId'],
    ['a non-numeric lastEventId', '?lastEventId=abc', {}, 'query.lastEventId'],
    ['a huge lastEventId', `?lastEventId=${'9'.repeat(40)}`, {}, 'query.lastEventId'],
    ['a repeated deltas', '?deltas=true&deltas=true', {}, 'query.deltas'],
    ['an unknown deltas value', '?deltas=yes', {}, 'query.deltas'],
    ['a bad Last-Event-ID header', '', { 'last-event-id': '12abc' }, 'Last-Event-ID'],
    ['a huge Last-Event-ID header', '', { 'last-event-id': '1'.repeat(100) }, 'Last-Event-ID'],
  ])('%s', async (_name, query, headers, path) => {
    const { problem } = await problemOf(await fetch(url('publication', `/v1/runs/some-run/events${query}`), { headers }), 400);
    expect(problem.code).toBe('bad_request');
    expect(problem.issues!.map((i) => i.path)).toContain(path);
  });

  it('a repeated Last-Event-ID header is refused too', async () => {
    // fetch cannot repeat a header; a raw request can
    const u = new URL(url('publication', '/v1/runs/some-run/events'));
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(u.port), u.hostname, () => {
        socket.write(`GET ${u.pathname} HTTP/1.1\r\nHost: ${u.host}\r\nLast-Event-ID: 1\r\nLast-Event-ID: 2\r\nConnection: close\r\n\r\n`);
      });
      let text = '';
      socket.on('data', (d) => (text += d.toString()));
      socket.on('end', () => resolve(text));
      socket.on('error', reject);
    });
    const res = { status: Number(/^HTTP\/1\.1 (\d+)/.exec(raw)?.[1]), type: /content-type: ([^\r]+)/i.exec(raw)?.[1] ?? '' };
    expect(raw).toContain('Last-Event-ID');
    expect(res.status).toBe(400);
    expect(res.type).toMatch(/^application\/problem\+json/);
  });

  it('a bad runId on the stream and the answer', async () => {
    for (const path of ['/v1/runs/bad.id/events', '/v1/runs/bad.id/answer']) {
      expect((await problemOf(await fetch(url('publication', path)), 400)).problem.issues?.[0]?.path).toBe('runId');
    }
  });
});

describe('OpenAPI', () => {
  it.each(['admission', 'publication', 'projector', 'runtime', 'tools', 'lifecycle'] as const)(
    '%s serves its description at /openapi.json, matching docs/openapi.json',
    async (service) => {
      const res = await fetch(url(service, '/openapi.json'));
      expect(res.status).toBe(200);
      const served = (await res.json()) as ReturnType<typeof openApiDocument>;
      expect(served).toEqual(JSON.parse(JSON.stringify(openApiDocument(service))));
      const whole = JSON.parse(readFileSync(join(repoRoot(), 'docs', 'openapi.json'), 'utf8')) as ReturnType<typeof openApiDocument>;
      for (const [path, item] of Object.entries(served.paths ?? {})) {
        for (const method of Object.keys(item)) {
          // the whole description shows /partitions as admission and publication serve it (with a token); the internal services' is open
          if (path === '/partitions' && service !== 'admission' && service !== 'publication') continue;
          expect(whole.paths?.[path]).toHaveProperty(method, (item as Record<string, unknown>)[method]);
        }
      }
    },
  );
});

/** Starts one more service process of the stack's build with `env` overrides (any free port). */
async function spawnService(name: 'admission' | 'publication', env: NodeJS.ProcessEnv, logName: string): Promise<ManagedProcess> {
  const log = createWriteStream(join(repoRoot(), '.runplane', 'test-logs', t.tag, `${logName}.log`));
  return spawnReady(
    name,
    serviceEntry(repoRoot(), name),
    [],
    // a key given as undefined is left out (e.g. NATS_CA_FILE for a private nats-server without TLS)
    Object.fromEntries(
      Object.entries({ ...t.env, ...natsEnvOf(t.users, name), ADMISSION_PORT: '0', PUBLICATION_PORT: '0', ...env }).filter(
        ([, v]) => v !== undefined,
      ),
    ),
    /ready on (http:\/\/\S+)/,
    log,
  );
}

describe('a dependency that is down is a 503 with Retry-After', () => {
  it('GET /v1/runs/{id} while PostgreSQL is unreachable (an admission pointed at a port where nothing listens)', async () => {
    const deadPort = await getPort({ host: '127.0.0.1' });
    const admission = await spawnService(
      'admission',
      { DATABASE_URL: `postgresql://postgres@127.0.0.1:${deadPort}/nothing` },
      'admission-no-postgres',
    );
    try {
      for (let i = 0; i < 2; i++) {
        // twice: a failed first connection is not kept, the next request tries again
        const { problem, res } = await problemOf(await fetch(`${admission.url}/v1/runs/some-run`), 503);
        expect(problem.code).toBe('dependency_unavailable');
        expect(problem.detail).toContain('PostgreSQL');
        expect(problem.detail).not.toContain(String(deadPort));
        expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
      }
      const client = new RunplaneClient({ admission: admission.url, publication: t.stack.endpoints.publication });
      const err = await client.getRun('some-run').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RunplaneHttpError);
      expect((err as RunplaneHttpError).code).toBe('dependency_unavailable');
      expect((err as Error).message).toContain(`${admission.url}/v1/runs/some-run`);
    } finally {
      await admission.stop();
    }
  }, 60_000);

  it('the answer and the event stream while NATS is unreachable (a private nats-server, stopped)', async () => {
    const stateDir = mkdtempSync(join(tmpdir(), 'rp-nats-'));
    // as a deployment's: the stack's users (publication connects as its own) and TLS of a CA of its own
    const space = { stream: t.env.RUNPLANE_STREAM!, prefix: t.env.RUNPLANE_SUBJECT_PREFIX!, partitions: Number(t.env.RUNPLANE_PARTITIONS) };
    const nats = await startSecuredNats({ stateDir, space, users: t.users });
    expect(nats.child).not.toBeNull();
    let publication: ManagedProcess | null = null;
    try {
      const own = { NATS_URL: nats.url, ...natsCaEnvOf(nats) };
      await provisionAsAdmin({ ...t.env, ...own }, t.users);
      publication = await spawnService('publication', own, 'publication-no-nats');
      expect((await fetch(`${publication.url}/healthz`)).status).toBe(200);
      await nats.stop();
      // both asked at once: each answers when its NATS request gives up (about 5 s)
      const [answerRes, eventsRes] = await Promise.all(
        ['/v1/runs/some-run/answer', '/v1/runs/some-run/events'].map((path) => fetch(`${publication!.url}${path}`)),
      );
      const answer = await problemOf(answerRes!, 503);
      expect(answer.problem).toMatchObject({ code: 'dependency_unavailable' });
      expect(answer.problem.detail).toContain('NATS');
      expect(Number(answer.res.headers.get('retry-after'))).toBeGreaterThan(0);
      const events = await problemOf(eventsRes!, 503);
      expect(events.problem.code).toBe('dependency_unavailable');
    } finally {
      // this case's own process: its shutdown with NATS gone (about 7 s closing the connection) is not what it checks
      await publication?.stop(1_000);
      await nats.stop();
      rmSync(stateDir, { recursive: true, force: true });
    }
  }, 90_000);
});

/** Runs the built CLI; resolves with its exit code and output. */
function cli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [join(repoRoot(), 'apps', 'cli', 'dist', 'main.js'), ...args],
      { env: { ...process.env, NO_COLOR: '1', ...env }, timeout: 60_000 },
      (error, stdout, stderr) => {
        resolve({ code: error ? Number((error as { code?: unknown }).code ?? 1) : 0, stdout, stderr });
      },
    );
  });
}

describe('the CLI says the reason and the URL', () => {
  it('a service that is down: "cannot reach admission at <url>: connection refused"', async () => {
    const port = await getPort({ host: '127.0.0.1' });
    const r = await cli(['ask', 'What does SPY hold?', '--admission', `http://127.0.0.1:${port}`, '--conversation', 'cli-down']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`cannot reach admission at http://127.0.0.1:${port}/v1/conversations/cli-down/messages: connection refused`);
    expect(r.stderr).not.toContain('fetch failed');
    const client = new RunplaneClient({ admission: `http://127.0.0.1:${port}`, publication: `http://127.0.0.1:${port}` });
    await expect(client.getAnswer('x')).rejects.toBeInstanceOf(RunplaneUnreachableError);
  });

  it("a bad body: the server's reason (detail and issues) and the URL", async () => {
    const r = await cli([
      'ask',
      '   ',
      '--admission',
      t.stack.endpoints.admission,
      '--publication',
      t.stack.endpoints.publication,
      '--conversation',
      'cli-bad',
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`HTTP 400 from ${t.stack.endpoints.admission}/v1/conversations/cli-bad/messages`);
    expect(r.stderr).toContain('invalid_body');
    expect(r.stderr).toContain('content: content must not be blank');
  });

  it('a bad id on watch: the 400 reason from publication', async () => {
    const r = await cli(['watch', 'bad.id', '--admission', t.stack.endpoints.admission, '--publication', t.stack.endpoints.publication]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`HTTP 400 from ${t.stack.endpoints.publication}/v1/runs/bad.id/events`);
    expect(r.stderr).toContain('runId');
  });
});
