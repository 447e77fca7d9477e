/**
 * A fuzz test of the HTTP API with `fast-check` (docs/api.md "Errors"), against the real stack
 * with authentication on: a few hundred requests to admission and publication with random
 * methods, paths and path parameters (ids, encodings, invalid percent-escapes, long ones), query
 * strings, headers (`Authorization` with good, expired, wrong-audience, wrong-issuer, other-key,
 * `alg: none`, malformed and random tokens; `Content-Type`, `Last-Event-ID`, `X-Runplane-User`)
 * and bodies (JSON of any shape, near-valid messages, cancels, answers and reconciliations, raw
 * bytes, too large). Every answer must be below 500 and start within {@link ANSWER_BOUND_MS}
 * (an event stream counts as answered once its headers arrive), and afterwards both services still
 * answer their readiness probe and every process of the stack still runs (no crash, no hang).
 * Bounded: {@link RUNS} requests, one at a time; on a failure fast-check prints the request and
 * its seed (`FUZZ_SEED=<seed>` replays it).
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { createDevAuth, type DevAuth } from '@runplane/devstack';
import { startTestStack, type TestStack } from '../support/stack.js';

/** Requests per run. */
const RUNS = Number(process.env.FUZZ_RUNS ?? 300);
/** The longest a request may take to start its answer, ms. */
const ANSWER_BOUND_MS = 10_000;

let t: TestStack;
const dirs: string[] = [];
let auth: DevAuth;
let realRunId: string;
let realSeqs: number[];
/** Authorization header values, by name (undefined: no header). */
let authorizations: Record<string, string | undefined>;

beforeAll(async () => {
  for (let i = 0; i < 2; i++) dirs.push(mkdtempSync(join(tmpdir(), 'rp-fuzz-')));
  auth = await createDevAuth(dirs[0]!);
  const other = await createDevAuth(dirs[1]!);
  t = await startTestStack('fuzz', { ...auth.env });
  const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  authorizations = {
    none: undefined,
    alice: `Bearer ${await auth.mint('alice')}`,
    bob: `Bearer ${await auth.mint('bob')}`,
    admin: `Bearer ${await auth.mint('ops', { scopes: ['runplane:admin'] })}`,
    expired: `Bearer ${await auth.mint('alice', { ttlSeconds: -600 })}`,
    audience: `Bearer ${await auth.mint('alice', { audience: 'someone-else' })}`,
    issuer: `Bearer ${await auth.mint('alice', { issuer: 'https://evil.example' })}`,
    otherKey: `Bearer ${await other.mint('alice')}`,
    algNone: `Bearer ${b64({ alg: 'none', typ: 'JWT' })}.${b64({ sub: 'alice', iss: auth.env.RUNPLANE_AUTH_ISSUER, aud: auth.env.RUNPLANE_AUTH_AUDIENCE, exp: now + 600 })}.`,
    longSub: `Bearer ${await auth.mint('x'.repeat(201))}`,
    basic: 'Basic YWxpY2U6c2VjcmV0',
    empty: 'Bearer ',
    garbage: 'Bearer a.b.c',
    huge: `Bearer ${'a'.repeat(30_000)}.${'b'.repeat(30_000)}.c`,
  };
  // one real Run of alice: its id and positions make the fuzzer reach the code behind the checks
  const res = await fetch(`${t.stack.endpoints.admission}/v1/conversations/fuzz-conv/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: authorizations.alice! },
    body: JSON.stringify({ clientMessageId: 'fuzz-1', content: 'What does DIA hold?' }),
  });
  expect(res.status).toBe(201);
  realRunId = ((await res.json()) as { runId: string }).runId;
  realSeqs = (await t.waitForSettlement(realRunId)).map((e) => e.seq);
}, 180_000);

afterAll(async () => {
  await t?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** One request the fuzzer makes. */
interface FuzzRequest {
  service: 'admission' | 'publication';
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string | Uint8Array | undefined;
}

/** Printable ASCII (what a header value may carry without the client refusing to send it). */
const printable = (maxLength: number) => fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength });

function requests(): fc.Arbitrary<FuzzRequest> {
  const id = fc.oneof(
    fc.constantFrom(realRunId, randomUUID(), 'w1', 'c1', 'fuzz-conv', 'fuzz-1'),
    fc.stringMatching(/^[A-Za-z0-9_-]{1,140}$/),
    fc.string({ maxLength: 40 }).map((s) => encodeURIComponent(s)),
    fc.string({ unit: 'grapheme', maxLength: 20 }).map((s) => encodeURIComponent(s)),
    fc.constantFrom('%', '%zz', '%E0%A4%A', '%C0%AF', '..', '%2e%2e', '%2F', '%00', '%FF%FE', 'a'.repeat(3000), '%20', '-', '_'),
  );
  /** A route template with its method and the service that serves it (`on`; either for the others). */
  const path: fc.Arbitrary<{ path: string; method: string; on?: 'admission' | 'publication' }> = fc.oneof(
    {
      weight: 4,
      arbitrary: fc
        .oneof({ weight: 3, arbitrary: fc.stringMatching(/^[A-Za-z0-9_-]{1,40}$/) }, { weight: 1, arbitrary: id })
        .map((c) => ({ path: `/v1/conversations/${c}/messages`, method: 'POST', on: 'admission' as const })),
    },
    fc.tuple(id, id).map(([c, m]) => ({ path: `/v1/conversations/${c}/messages/${m}`, method: 'GET', on: 'admission' as const })),
    fc.constant({ path: '/v1/runs', method: 'GET', on: 'admission' as const }),
    fc.tuple(id).map(([r]) => ({ path: `/v1/runs/${r}`, method: 'GET', on: 'admission' as const })),
    fc.tuple(id).map(([r]) => ({ path: `/v1/runs/${r}/cancel`, method: 'POST', on: 'admission' as const })),
    fc.tuple(id).map(([r]) => ({ path: `/v1/runs/${r}/waits`, method: 'GET', on: 'admission' as const })),
    fc.tuple(id, id).map(([r, w]) => ({ path: `/v1/runs/${r}/waits/${w}`, method: 'POST', on: 'admission' as const })),
    fc.tuple(id, id).map(([r, c]) => ({ path: `/v1/runs/${r}/tool-calls/${c}/reconcile`, method: 'POST', on: 'admission' as const })),
    fc.tuple(id).map(([r]) => ({ path: `/v1/runs/${r}/events`, method: 'GET', on: 'publication' as const })),
    fc.tuple(id).map(([r]) => ({ path: `/v1/runs/${r}/answer`, method: 'GET', on: 'publication' as const })),
    fc.constantFrom(
      { path: '/partitions', method: 'GET' },
      { path: '/openapi.json', method: 'GET' },
      { path: '/healthz', method: 'GET' },
      { path: '/viewer/', method: 'GET' },
      { path: '/viewer/../../package.json', method: 'GET' },
      { path: '/viewer/%2e%2e/%2e%2e/package.json', method: 'GET' },
    ),
    fc.tuple(fc.array(id, { maxLength: 4 })).map(([parts]) => ({ path: `/${parts.join('/')}`, method: 'GET' })),
  );
  const method = fc.oneof(
    { weight: 8, arbitrary: fc.constant(null) },
    { weight: 1, arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD') },
  );
  const query = fc.oneof(
    { weight: 3, arbitrary: fc.constant('') },
    {
      weight: 2,
      arbitrary: fc
        .array(
          fc.tuple(
            fc.oneof(fc.constantFrom('deltas', 'lastEventId', 'limit', 'cursor', 'a[b]', '__proto__', 'constructor'), printable(8)),
            fc.oneof(fc.constantFrom('true', 'false', '1', '0', '-1', '1e9', '99999999999999999999', String(realSeqs?.[0] ?? 1)), printable(20)),
          ),
          { maxLength: 4 },
        )
        .map((pairs) => `?${pairs.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&')}`),
    },
  );
  const lastEventId = fc.option(
    fc.oneof(
      fc.nat().map(String),
      fc.constantFrom('-1', '1e3', '99999999999999999999', ' 5 ', '0x10', '', 'abc', '1, 2', '9007199254740993'),
      fc.constantFrom(...realSeqs.map(String)),
      printable(30),
    ),
    { nil: undefined },
  );
  const contentType = fc.oneof(
    { weight: 3, arbitrary: fc.constant('application/json') },
    {
      weight: 2,
      arbitrary: fc.option(
        fc.oneof(
          fc.constantFrom(
            'application/json',
            'application/json; charset=utf-8',
            'application/json; charset=utf-16',
            'application/json; charset="latin1"',
            'text/plain',
            'application/x-www-form-urlencoded',
            'multipart/form-data; boundary=x',
            'application/merge-patch+json',
          ),
          printable(40),
        ),
        { nil: undefined },
      ),
    },
  );
  const text = fc.oneof(
    fc.string({ maxLength: 200 }),
    fc.string({ unit: 'grapheme', maxLength: 50 }),
    fc.constantFrom('', ' ', '\u202e', '\u0000', 'x'.repeat(40_000)),
  );
  // a message that is valid but for what the fuzzer varies (so requests reach the decisions behind validation)
  const shortId = fc.stringMatching(/^[A-Za-z0-9_-]{1,40}$/);
  const base = fc.record({ clientMessageId: shortId, content: fc.oneof(printable(80), text).map((c) => `What does DIA hold? ${c}`) });
  const message = fc
    .oneof(
      { weight: 4, arbitrary: base },
      {
        weight: 1,
        arbitrary: fc.tuple(base, fc.oneof(fc.constant(realRunId), shortId)).map(([m, parent]) => ({ ...m, continuationOfRunId: parent })),
      },
      {
        weight: 1,
        arbitrary: fc
          .tuple(base, fc.oneof(fc.constant(realRunId), fc.uuid()), shortId)
          .map(([m, runId, clarificationId]) => ({ ...m, replyTo: { runId, clarificationId } })),
      },
    )
    .map((v) => JSON.stringify(v));
  const jsonBody = fc.oneof(
    message,
    fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
    fc
      .record(
        {
          clientMessageId: fc.oneof(id, text),
          content: text,
          continuationOfRunId: fc.oneof(id, fc.constant(realRunId), fc.jsonValue()),
          replyTo: fc.oneof(fc.record({ runId: fc.oneof(id, fc.constant(realRunId)), clarificationId: id }), fc.jsonValue()),
          extra: fc.jsonValue(),
        },
        { requiredKeys: ['clientMessageId', 'content'] },
      )
      .map((v) => JSON.stringify(v)),
    fc.record({ reason: fc.oneof(text, fc.jsonValue()) }, { requiredKeys: [] }).map((v) => JSON.stringify(v)),
    fc.record({ answer: fc.oneof(text, fc.jsonValue()) }, { requiredKeys: [] }).map((v) => JSON.stringify(v)),
    fc
      .record(
        { outcome: fc.oneof(fc.constantFrom('succeeded', 'failed', 'not-executed'), text), evidence: text, operator: fc.oneof(text, fc.jsonValue()) },
        { requiredKeys: [] },
      )
      .map((v) => JSON.stringify(v)),
    fc.constantFrom('{', '{"a":', '[1,2', 'null', '"text"', '42', '{"__proto__":{"admin":true}}', '{"constructor":{"prototype":{"x":1}}}'),
  );
  const body = fc.oneof(
    { weight: 2, arbitrary: fc.constant(undefined) },
    { weight: 6, arbitrary: jsonBody },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 300 }) },
    { weight: 1, arbitrary: fc.constantFrom(Uint8Array.from([0xc3, 0x28]), Uint8Array.from([0xef, 0xbb, 0xbf, 0x7b, 0x7d]), 'x'.repeat(300 * 1024)) },
  );
  const authorization = fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom('alice', 'bob', 'admin').map((k) => authorizations[k]) },
    { weight: 4, arbitrary: fc.constantFrom(...Object.keys(authorizations)).map((k) => authorizations[k]) },
    { weight: 1, arbitrary: printable(200).map((s) => `Bearer ${s}`) },
    { weight: 1, arbitrary: printable(60) },
  );
  return fc
    .record({
      // mostly the service that serves the route (past its front door), sometimes the other one
      otherService: fc.integer({ min: 0, max: 9 }).map((n) => n === 0),
      anyService: fc.constantFrom('admission' as const, 'publication' as const),
      target: path,
      method,
      query,
      authorization,
      lastEventId,
      contentType,
      user: fc.option(printable(250), { nil: undefined }),
      body,
      // most POSTs to the message route carry a nearly valid message
      routeBody: fc.option(message, { nil: undefined, freq: 3 }),
    })
    .map((r) => {
      const headers: Record<string, string> = {};
      if (r.authorization !== undefined) headers.authorization = r.authorization;
      if (r.lastEventId !== undefined) headers['last-event-id'] = r.lastEventId;
      if (r.contentType !== undefined) headers['content-type'] = r.contentType;
      if (r.user !== undefined) headers['x-runplane-user'] = r.user;
      const method = r.method ?? r.target.method;
      const flip = { admission: 'publication', publication: 'admission' } as const;
      const service = r.target.on ? (r.otherService ? flip[r.target.on] : r.target.on) : r.anyService;
      return {
        service,
        method,
        path: `${r.target.path}${r.query}`,
        headers,
        body: method === 'GET' || method === 'HEAD' ? undefined : r.target.path.endsWith('/messages') && r.routeBody ? r.routeBody : r.body,
      };
    });
}

/** Sends one request; its status once the answer starts (a body still streaming is cancelled). */
async function send(r: FuzzRequest): Promise<{ status: number; detail: string }> {
  const started = Date.now();
  const res = await fetch(`${t.stack.endpoints[r.service]}${r.path}`, {
    method: r.method,
    headers: r.headers,
    ...(r.body !== undefined ? { body: r.body } : {}),
    signal: AbortSignal.timeout(ANSWER_BOUND_MS),
  });
  const answeredInMs = Date.now() - started;
  let detail = '';
  if ((res.headers.get('content-type') ?? '').startsWith('text/event-stream')) await res.body?.cancel();
  else detail = (await res.text()).slice(0, 300);
  if (answeredInMs > ANSWER_BOUND_MS) throw new Error(`answered after ${answeredInMs} ms`);
  return { status: res.status, detail };
}

describe('the HTTP API under random input (fast-check)', () => {
  it(`answers ${RUNS} random requests below 500 and within ${ANSWER_BOUND_MS} ms each; the services stay up`, async () => {
    const statuses = new Map<number, number>();
    const seed = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : undefined;
    await fc.assert(
      fc.asyncProperty(requests(), async (r) => {
        const { status, detail } = await send(r);
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
        if (status >= 500) throw new Error(`${r.method} ${r.service}${r.path} answered ${status}: ${detail}`);
      }),
      { numRuns: RUNS, endOnFailure: true, ...(seed !== undefined ? { seed } : {}) },
    );
    process.stdout.write(`FUZZ | ${RUNS} requests | statuses ${JSON.stringify(Object.fromEntries([...statuses].sort(([a], [b]) => a - b)))}\n`);
    // most requests must get past the front door, or the fuzzer tests only the 401
    expect([...statuses].filter(([s]) => s !== 401).reduce((n, [, c]) => n + c, 0)).toBeGreaterThan(RUNS / 3);
    // no crash: both services answer their readiness probe, and every process of the stack still runs
    for (const service of ['admission', 'publication'] as const) expect((await fetch(`${t.stack.endpoints[service]}/readyz`)).status).toBe(200);
    for (const [name, p] of t.stack.services)
      expect({ name, exitCode: p.child.exitCode, signal: p.child.signalCode }).toEqual({ name, exitCode: null, signal: null });
  }, 180_000);
});
