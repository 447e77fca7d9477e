/**
 * Authentication and tenancy of the HTTP API (docs/operations.md "Authentication"), on the real stack with authentication
 * on (a development issuer's JWKS file, ES256 tokens, a clock-skew allowance of 1 s): every API
 * route wants a bearer JWT whose signature, issuer, audience and expiry verify (401 with
 * `WWW-Authenticate` and the reason otherwise, nothing appended); conversation ids are per
 * principal (nobody can squat or probe another's), a Run is its principal's alone (another
 * principal gets the 404 of an unknown id on every route, and appends nothing, also when it
 * races the admission); the principal is recorded on `run.admitted` and as who canceled, from the
 * token, never from `X-Runplane-User`; operator actions and `/partitions` want `runplane:admin`;
 * an event stream ends when its token expires; a principal's open event streams are capped (3 here),
 * and so are the publication process's (5 here), each refusal a problem answer. Health, metrics and
 * the OpenAPI description stay open.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { admissionIds, conversationKey } from '@runplane/contracts';
import { createDevAuth, type DevAuth } from '@runplane/devstack';
import { ConversationIndex } from '@runplane/eventlog';
import { SignJWT } from 'jose';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

let t: TestStack;
let auth: DevAuth;
let other: DevAuth;
const dirs: string[] = [];
let alice: string;
let bob: string;
let admin: string;

beforeAll(async () => {
  for (let i = 0; i < 2; i++) dirs.push(mkdtempSync(join(tmpdir(), 'rp-auth-')));
  auth = await createDevAuth(dirs[0]!);
  other = await createDevAuth(dirs[1]!); // same issuer and audience, another key
  // a skew allowance of 1 s: an event stream's end at its token's expiry is seen within seconds;
  // small caps on event streams, reached by a handful of streams (the other cases hold at most 3 at once, 2 per principal)
  t = await startTestStack('auth', {
    ...auth.env,
    RUNPLANE_AUTH_CLOCK_SKEW_SECONDS: '1',
    RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL: '3',
    RUNPLANE_OBSERVER_STREAMS_MAX: '5',
  });
  [alice, bob, admin] = await Promise.all([auth.mint('alice'), auth.mint('bob'), auth.mint('ops', { scopes: ['runplane:admin'] })]);
}, 120_000);
afterAll(async () => {
  await t?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const admission = (path: string) => `${t.stack.endpoints.admission}${path}`;
const publication = (path: string) => `${t.stack.endpoints.publication}${path}`;
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const json = { 'content-type': 'application/json' };

async function post(url: string, token: string | null, body: unknown, extra: Record<string, string> = {}) {
  const res = await fetch(url, { method: 'POST', headers: { ...json, ...(token ? bearer(token) : {}), ...extra }, body: JSON.stringify(body) });
  return { status: res.status, headers: res.headers, body: (await res.json().catch(() => null)) as Record<string, unknown> | null };
}
async function get(url: string, token: string | null) {
  const res = await fetch(url, { headers: token ? bearer(token) : {} });
  const text = await res.text();
  let body: Record<string, unknown> | null;
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    body = null;
  }
  return { status: res.status, headers: res.headers, body };
}
/** The problem body without `instance` (it names the path asked). */
const problemOf = (b: Record<string, unknown> | null) => {
  const { instance: _instance, ...rest } = b ?? {};
  return rest;
};

describe('authentication: a bearer JWT on every API route', () => {
  it('given no token, a malformed header, an expired token, a wrong audience or issuer, another key: 401 with WWW-Authenticate and the reason; nothing admitted', async () => {
    const conversationId = `conv-${t.tag}-anon`;
    const message = { clientMessageId: 'm1', content: 'What does DIA hold?' };
    const cases: [string, Record<string, string>, RegExp][] = [
      ['none', {}, /bearer token is required/],
      ['malformed', { authorization: 'Basic abc' }, /must be "Bearer <JWT>"/],
      ['garbage', { authorization: 'Bearer not.a.jwt' }, /not a valid JWT|refused/],
      ['expired', bearer(await auth.mint('alice', { ttlSeconds: -120 })), /expired/],
      ['audience', bearer(await auth.mint('alice', { audience: 'someone-else' })), /"aud"/],
      ['issuer', bearer(await auth.mint('alice', { issuer: 'https://evil.example' })), /"iss"/],
      ['other key', bearer(await other.mint('alice')), /no key of the JWKS matches|signature/],
      [
        'symmetric algorithm',
        bearer(
          await new SignJWT({})
            .setProtectedHeader({ alg: 'HS256' })
            .setSubject('alice')
            .setIssuer(auth.env.RUNPLANE_AUTH_ISSUER)
            .setAudience(auth.env.RUNPLANE_AUTH_AUDIENCE)
            .setExpirationTime('1h')
            .sign(new TextEncoder().encode('x'.repeat(32))),
        ),
        /algorithm is not supported|no key of the JWKS matches/,
      ],
    ];
    for (const [what, headers, reason] of cases) {
      const r = await post(admission(`/v1/conversations/${conversationId}/messages`), null, message, headers);
      expect({ what, status: r.status }).toEqual({ what, status: 401 });
      expect(r.headers.get('www-authenticate')).toMatch(/^Bearer realm="runplane", error="invalid_(request|token)"/);
      expect(r.body).toMatchObject({ status: 401, code: 'unauthorized' });
      expect(String(r.body!.detail)).toMatch(reason);
    }
    for (const url of [
      admission(`/v1/runs/${randomUUID()}`),
      publication(`/v1/runs/${randomUUID()}/answer`),
      publication(`/v1/runs/${randomUUID()}/events`),
    ])
      expect((await get(url, null)).status).toBe(401);
    // nothing was admitted by any refused request
    expect(await t.log.readMessage({ last_by_subj: `${t.log.space.prefix}.>` })).toBeNull();
    // health and metrics stay open (probes, scrapes)
    expect((await get(admission('/healthz'), null)).status).toBe(200);
    expect((await fetch(publication('/metrics'))).status).toBe(200);
  });
});

describe('tenancy: a Conversation and its Runs belong to their creator', () => {
  it("given alice's Run, then bob gets the 404 of an unknown id on every route and appends nothing; alice is recorded from her token, not X-Runplane-User; an admin reads it; reconcile wants the admin scope", async () => {
    const conversationId = `conv-${t.tag}-alice`;
    const posted = await post(
      admission(`/v1/conversations/${conversationId}/messages`),
      alice,
      { clientMessageId: 'a1', content: 'What does DIA hold?' },
      { 'x-runplane-user': 'mallory' },
    );
    expect(posted.status).toBe(201);
    const runId = String(posted.body!.runId);
    // her cancel, at once: who asked is the token's subject, whatever the header says
    const cancel = await post(admission(`/v1/runs/${runId}/cancel`), alice, { reason: 'test' }, { 'x-runplane-user': 'mallory' });
    expect([202, 409]).toContain(cancel.status);
    const events = await t.waitForSettlement(runId);
    const admitted = events.find((e) => e.event.type === 'run.admitted')!;
    expect(admitted.event.type === 'run.admitted' && admitted.event.data.principal).toBe('alice');
    for (const e of events) if (e.event.type === 'run.cancel.requested') expect(e.event.data.requestedBy).toBe('alice');

    // bob: every route answers exactly as for an unknown id
    const unknown = randomUUID();
    const same = async (url: (id: string) => string, method: 'GET' | 'POST', body?: unknown) => {
      const call = (id: string) => (method === 'GET' ? get(url(id), bob) : post(url(id), bob, body ?? {}));
      const [theirs, none] = await Promise.all([call(runId), call(unknown)]);
      expect({ url: url('<id>'), status: theirs.status }).toEqual({ url: url('<id>'), status: 404 });
      expect(problemOf(theirs.body)).toEqual(JSON.parse(JSON.stringify(problemOf(none.body)).replaceAll(unknown, runId)));
    };
    await same((id) => admission(`/v1/runs/${id}`), 'GET');
    await same((id) => admission(`/v1/runs/${id}/waits`), 'GET');
    await same((id) => admission(`/v1/runs/${id}/cancel`), 'POST', { reason: 'mine now' });
    await same((id) => admission(`/v1/runs/${id}/waits/w1`), 'POST', { answer: 'yes' });
    await same((id) => publication(`/v1/runs/${id}/answer`), 'GET');
    await same((id) => publication(`/v1/runs/${id}/events`), 'GET');
    await same((id) => publication(`/v1/runs/${id}/events?deltas=true`), 'GET');
    // bob's own Run, resumed from a position of hers or past the end of the log: refused without
    // saying whose the position is or how long the log is (admins get the reason)
    const bobs = await post(admission(`/v1/conversations/conv-${t.tag}-bob/messages`), bob, {
      clientMessageId: 'b0',
      content: 'What does SPY hold?',
    });
    expect(bobs.status).toBe(201);
    const end = await t.log.lastSeq();
    for (const cursor of [events[0]!.seq, end + 1000]) {
      const refused = await fetch(publication(`/v1/runs/${String(bobs.body!.runId)}/events`), {
        headers: { ...bearer(bob), 'last-event-id': String(cursor) },
      });
      expect(refused.status).toBe(400);
      expect(await refused.json()).toMatchObject({
        code: 'invalid_cursor',
        reason: 'not-this-run',
        detail: `Last-Event-ID ${cursor} is not a position of run ${String(bobs.body!.runId)}`,
      });
    }
    const told = await fetch(publication(`/v1/runs/${String(bobs.body!.runId)}/events`), {
      headers: { ...bearer(admin), 'last-event-id': String(events[0]!.seq) },
    });
    expect(await told.json()).toMatchObject({ code: 'invalid_cursor', reason: 'other-run' });
    // her message, looked up by id, and her conversation: unknown to bob
    expect((await get(admission(`/v1/conversations/${conversationId}/messages/a1`), bob)).status).toBe(404);
    expect((await get(admission(`/v1/conversations/${conversationId}/messages/a1`), alice)).status).toBe(200);
    // bob's Conversation of the same id is his own: her Run is no parent there, exactly as an unknown one
    const intrude = await post(admission(`/v1/conversations/${conversationId}/messages`), bob, {
      clientMessageId: 'b1',
      content: 'Now also QQQ',
      continuationOfRunId: runId,
    });
    const unknownParent = await post(admission(`/v1/conversations/${conversationId}/messages`), bob, {
      clientMessageId: 'b2',
      content: 'Now also QQQ',
      continuationOfRunId: unknown,
    });
    expect(intrude.status).toBe(404);
    expect(problemOf(intrude.body)).toEqual(JSON.parse(JSON.stringify(problemOf(unknownParent.body)).replaceAll(unknown, runId)));
    // bob appended nothing to her Run, and nothing of his was admitted
    for (const id of ['b1', 'b2']) expect(await t.log.readRun(admissionIds(conversationKey(conversationId, 'bob'), id).runId)).toEqual([]);
    const after = await t.log.readRun(runId);
    expect(after.map((e) => e.seq)).toEqual(events.map((e) => e.seq));
    expect(
      after
        .filter((e) => e.event.type === 'run.cancel.requested')
        .every((e) => e.event.type === 'run.cancel.requested' && e.event.data.requestedBy === 'alice'),
    ).toBe(true);

    // alice and an admin read it
    expect((await get(publication(`/v1/runs/${runId}/answer`), alice)).status).toBe(200);
    expect((await get(publication(`/v1/runs/${runId}/answer`), admin)).status).toBe(200);
    await eventually(
      async () => ((await get(admission(`/v1/runs/${runId}`), admin)).status === 200 ? true : null),
      20_000,
      'the admin reads the Run',
    );
    // the request lines name who asked: bob's refused reads of her Run, the admin's reads of it
    const requestLines = () =>
      readFileSync(t.stack.logFile, 'utf8')
        .split('\n')
        .flatMap((l) =>
          l.includes(`/v1/runs/${runId}/answer`) && l.includes('"responseTime"')
            ? [JSON.parse(l.slice(l.indexOf('{'))) as Record<string, unknown>]
            : [],
        );
    await eventually(async () => (requestLines().some((l) => l.principal === 'ops') ? true : null), 10_000, "the admin's request line");
    const callers = requestLines().map((l) => [l.principal, l.admin ?? false, (l.res as { statusCode: number }).statusCode]);
    expect(callers).toEqual(
      expect.arrayContaining([
        ['bob', false, 404],
        ['alice', false, 200],
        ['ops', true, 200],
      ]),
    );
    // an operator action without the admin scope
    const reconcile = await post(admission(`/v1/runs/${runId}/tool-calls/c1/reconcile`), alice, { outcome: 'succeeded', evidence: 'checked' });
    expect(reconcile.status).toBe(403);
    expect(reconcile.body).toMatchObject({ code: 'forbidden' });
  });

  it('given a Conversation with Runs but no principal (created with authentication off), then a principal posting to its id gets a Conversation of its own: none of those Runs reach it', async () => {
    const conversationId = `conv-${t.tag}-legacy`;
    const legacyRun = randomUUID();
    const index = await ConversationIndex.open(t.log);
    await index.add(conversationId, { runId: legacyRun, clientMessageId: 'old', admittedAt: new Date().toISOString() });
    const r = await post(admission(`/v1/conversations/${conversationId}/messages`), bob, { clientMessageId: 'b9', content: 'What does DIA hold?' });
    expect(r.status).toBe(201);
    const [admitted] = await t.log.readRun(String(r.body!.runId));
    expect(admitted!.event.type === 'run.admitted' && admitted!.event.data.conversationHistory).toEqual({ runIds: [] });
    expect((await index.read(conversationId)).runs.map((x) => x.runId)).toEqual([legacyRun]);
  });

  it('given alice uses a conversation id first, then bob posting to the same id is admitted in a Conversation of his own (nothing squatted, nothing leaks): the same answer as for an id nobody used', async () => {
    const shared = `conv-${t.tag}-shared`;
    const fresh = `conv-${t.tag}-fresh`;
    const first = await post(admission(`/v1/conversations/${shared}/messages`), alice, { clientMessageId: 'm1', content: 'What does DIA hold?' });
    expect(first.status).toBe(201);
    // the same message id with other text: in alice's Conversation a 409, in bob's a new Message
    const [squatted, unused] = await Promise.all(
      [shared, fresh].map((c) => post(admission(`/v1/conversations/${c}/messages`), bob, { clientMessageId: 'm1', content: 'What does QQQ hold?' })),
    );
    expect([squatted!.status, unused!.status]).toEqual([201, 201]);
    const strip = (b: Record<string, unknown> | null) => ({ ...b, conversationId: '-', runId: '-', messageId: '-', admittedAt: '-' });
    expect(strip(squatted!.body)).toEqual(strip(unused!.body));
    expect(squatted!.body!.runId).not.toBe(first.body!.runId);
    expect(squatted!.body!.runId).toBe(admissionIds(conversationKey(shared, 'bob'), 'm1').runId);
    // each looks up their own message by the same ids; the history of bob's Run holds nothing of alice's
    const mine = await get(admission(`/v1/conversations/${shared}/messages/m1`), bob);
    const hers = await get(admission(`/v1/conversations/${shared}/messages/m1`), alice);
    expect([mine.body!.runId, hers.body!.runId]).toEqual([squatted!.body!.runId, first.body!.runId]);
    const [admitted] = await t.log.readRun(String(squatted!.body!.runId));
    expect(admitted!.event.type === 'run.admitted' && admitted!.event.data).toMatchObject({ principal: 'bob', conversationHistory: { runIds: [] } });
    // a repeat of alice's message is still hers alone (K1)
    const again = await post(admission(`/v1/conversations/${shared}/messages`), alice, { clientMessageId: 'm1', content: 'What does DIA hold?' });
    expect([again.status, again.body!.runId]).toEqual([200, first.body!.runId]);
  });

  it('given two principals posting at once to a new Conversation id, then each gets a Conversation and a Run of their own', async () => {
    const conversationId = `conv-${t.tag}-race`;
    const [a, b] = await Promise.all(
      [alice, bob].map((token, i) =>
        post(admission(`/v1/conversations/${conversationId}/messages`), token, { clientMessageId: 'r', content: `What does DIA hold? ${i}` }),
      ),
    );
    expect([a!.status, b!.status]).toEqual([201, 201]);
    expect(a!.body!.runId).not.toBe(b!.body!.runId);
  });

  it("given bob firing cancels at the id alice's Run will have while she posts it, then none is recorded: ownership is decided with the append, not from an earlier read", async () => {
    const conversationId = `conv-${t.tag}-toctou`;
    const statuses = new Set<number>();
    let attempts = 0;
    const runIds: string[] = [];
    for (let round = 0; round < 8; round++) {
      const clientMessageId = `raced-${round}`;
      // Run ids derive from (principal, conversation, message id): bob can compute hers
      const runId = admissionIds(conversationKey(conversationId, 'alice'), clientMessageId).runId;
      runIds.push(runId);
      let admitted = false;
      const hammer = async () => {
        // until shortly after her admission (the window is between an ownership read and the append)
        for (let after = 0; after < 3;) {
          if (admitted) after++;
          attempts++;
          statuses.add((await post(admission(`/v1/runs/${runId}/cancel`), bob, { reason: 'mine now' })).status);
        }
      };
      const hammers = Array.from({ length: 12 }, hammer);
      await new Promise((r) => setTimeout(r, 100)); // the hammers are running
      const posted = await post(admission(`/v1/conversations/${conversationId}/messages`), alice, {
        clientMessageId,
        content: 'What does DIA hold?',
      });
      admitted = true;
      await Promise.all(hammers);
      expect([posted.status, posted.body!.runId]).toEqual([201, runId]);
    }
    expect([...statuses]).toEqual([404]);
    expect(attempts).toBeGreaterThan(200);
    for (const runId of runIds)
      expect((await t.log.readRun(runId)).filter((e) => e.event.type === 'run.cancel.requested').map((e) => e.event.data)).toEqual([]);
  });
});

describe('routes outside /v1', () => {
  it('/partitions on admission and publication wants runplane:admin (401 without a token, 403 without the scope); health, metrics and /openapi.json are public', async () => {
    for (const url of [admission('/partitions'), publication('/partitions')]) {
      const none = await get(url, null);
      expect({ url, status: none.status }).toEqual({ url, status: 401 });
      expect(none.headers.get('www-authenticate')).toMatch(/^Bearer realm="runplane"/);
      expect(none.body).toMatchObject({ code: 'unauthorized', instance: '/partitions' });
      expect((await get(url, await auth.mint('alice', { audience: 'someone-else' }))).status).toBe(401);
      const user = await get(url, alice);
      expect({ url, status: user.status, code: user.body?.code }).toEqual({ url, status: 403, code: 'forbidden' });
      const ops = await get(url, admin);
      expect(ops.status).toBe(200);
      expect(ops.body).toMatchObject({ partitionCount: Number(t.env.RUNPLANE_PARTITIONS) });
    }
    // each call has its request line, naming the caller (the route is mounted outside Nest's logging)
    const lines = () =>
      readFileSync(t.stack.logFile, 'utf8')
        .split('\n')
        .flatMap((l) =>
          l.includes('"url":"/partitions"') && l.includes('"msg":"request completed"')
            ? [JSON.parse(l.slice(l.indexOf('{'))) as Record<string, unknown>]
            : [],
        )
        .map((l) => [l.service, (l.res as { statusCode: number }).statusCode, l.principal ?? null, l.admin ?? false]);
    await eventually(async () => (lines().length >= 8 ? true : null), 10_000, 'the /partitions request lines');
    for (const service of ['admission', 'publication'])
      expect(lines().filter((l) => l[0] === service)).toEqual(
        expect.arrayContaining([
          [service, 401, null, false],
          [service, 403, 'alice', false],
          [service, 200, 'ops', true],
        ]),
      );
    for (const path of ['/openapi.json', '/livez', '/readyz', '/healthz', '/metrics'])
      for (const url of [admission(path), publication(path)]) expect({ url, status: (await fetch(url)).status }).toEqual({ url, status: 200 });
    // an internal service (no authenticator) answers it without logging an error for the lookup
    // of the authenticator it does not have (one ERROR with a stack per request before)
    const lifecycle = t.stack.services.get('lifecycle')!.url;
    for (let i = 0; i < 3; i++) expect((await fetch(`${lifecycle}/partitions`)).status).toBe(200);
    await eventually(
      async () => (lines().filter((l) => l[0] === 'lifecycle').length >= 3 ? true : null),
      10_000,
      "lifecycle's /partitions request lines",
    );
    expect(readFileSync(t.stack.logFile, 'utf8')).not.toContain('could not find Authenticator');
  });
});

describe('an event stream ends when its token expires', () => {
  /** Reads an SSE response to its end (or `limitMs`): the text and when it ended. */
  async function readStream(url: string, token: string, limitMs: number): Promise<{ status: number; text: string; endedAt: number | null }> {
    const res = await fetch(url, { headers: bearer(token), signal: AbortSignal.timeout(limitMs) });
    let text = '';
    if (!res.body) return { status: res.status, text, endedAt: Date.now() };
    const decoder = new TextDecoder();
    try {
      for await (const chunk of res.body) text += decoder.decode(chunk as Uint8Array, { stream: true });
      return { status: res.status, text, endedAt: Date.now() };
    } catch {
      return { status: res.status, text, endedAt: null }; // still open at the limit
    }
  }

  it("given alice's running Run and a token valid for 3 s more, then her stream (with and without deltas) ends at its expiry plus the 1 s allowance, before the Run settles; the same token is then refused", async () => {
    const key = `expiry-${t.tag}`;
    await t.setScenario({ steps: [{ hang: true }], then: 'repeat-last' }, key);
    const conversationId = `conv-${t.tag}-expiry`;
    const posted = await post(admission(`/v1/conversations/${conversationId}/messages`), alice, {
      clientMessageId: 'x1',
      content: `What does DIA hold? ${key}`,
    });
    expect(posted.status).toBe(201);
    const runId = String(posted.body!.runId);
    const short = await auth.mint('alice', { ttlSeconds: 3 });
    const exp = (JSON.parse(Buffer.from(short.split('.')[1]!, 'base64url').toString()) as { exp: number }).exp * 1000;
    const [plain, deltas] = await Promise.all([
      readStream(publication(`/v1/runs/${runId}/events`), short, 20_000),
      readStream(publication(`/v1/runs/${runId}/events?deltas=true`), short, 20_000),
    ]);
    for (const r of [plain, deltas]) {
      expect(r.status).toBe(200);
      expect(r.endedAt).not.toBeNull();
      // ends when the token would be refused: exp + 1 s of skew allowance (a second's slack for the clock's granularity)
      expect(r.endedAt!).toBeGreaterThanOrEqual(exp + 1_000 - 50);
      expect(r.endedAt!).toBeLessThan(exp + 1_000 + 3_000);
      expect(r.text).toContain('event: run.admitted');
      expect(r.text).toContain(': token expired');
      expect(r.text).not.toContain('event: run.settled');
    }
    expect((await t.log.readRun(runId)).some((e) => e.event.type === 'run.settled')).toBe(false);
    const again = await get(publication(`/v1/runs/${runId}/events`), short);
    expect([again.status, again.body?.detail]).toEqual([401, 'the token has expired']);
    // a fresh token resumes the stream
    const resumed = await fetch(publication(`/v1/runs/${runId}/events`), { headers: bearer(alice), signal: AbortSignal.timeout(10_000) });
    expect(resumed.status).toBe(200);
    await resumed.body?.cancel();
    expect((await post(admission(`/v1/runs/${runId}/cancel`), alice, { reason: 'test over' })).status).toBe(202);
  });
});

describe('GET /v1/runs: the list of Runs a principal sees (the Run viewer)', () => {
  /** Every page of `token`'s list, `limit` per page, once the projections hold at least `atLeast` of `runIds`. */
  async function allPages(token: string, limit: number, runIds: string[]): Promise<{ pages: Record<string, unknown>[]; ids: string[] }> {
    return eventually(
      async () => {
        const pages: Record<string, unknown>[] = [];
        let cursor: string | null = null;
        do {
          const r = await get(admission(`/v1/runs?limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`), token);
          expect(r.status).toBe(200);
          pages.push(r.body!);
          cursor = r.body!.nextCursor as string | null;
        } while (cursor);
        const ids = pages.flatMap((p) => (p.runs as { runId: string }[]).map((run) => run.runId));
        return runIds.every((id) => ids.includes(id)) ? { pages, ids } : null;
      },
      20_000,
      'every Run projected and listed',
    );
  }

  it("lists a principal's own Runs only, newest first, a page at a time with a cursor; an admin sees everyone's", async () => {
    const [carol, dave] = await Promise.all([auth.mint(`carol-${t.tag}`), auth.mint(`dave-${t.tag}`)]);
    const carolRuns: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await post(admission(`/v1/conversations/conv-${t.tag}-carol/messages`), carol, {
        clientMessageId: `c${i}`,
        content: `Carol's question ${i}`,
      });
      expect(r.status).toBe(201);
      carolRuns.push(r.body!.runId as string);
    }
    const daveRun = (
      await post(admission(`/v1/conversations/conv-${t.tag}-dave/messages`), dave, { clientMessageId: 'd0', content: "Dave's question" })
    ).body!.runId as string;

    const { pages, ids } = await allPages(carol, 2, carolRuns);
    // carol's three, newest admission first, and nothing of anyone else's
    expect(ids).toEqual([...carolRuns].reverse());
    expect(pages.map((p) => (p.runs as unknown[]).length)).toEqual([2, 1]);
    expect(pages[1]!.nextCursor).toBeNull();
    const first = (pages[0]!.runs as Record<string, unknown>[])[0]!;
    expect(first).toMatchObject({ runId: carolRuns[2], question: "Carol's question 2", conversationId: `conv-${t.tag}-carol` });
    expect(first).not.toHaveProperty('principal');

    expect((await allPages(dave, 50, [daveRun])).ids).toEqual([daveRun]);
    const everyone = await allPages(admin, 100, [...carolRuns, daveRun]);
    expect(everyone.ids).toEqual(expect.arrayContaining([...carolRuns, daveRun]));
    // the admin's list says whose each Run is (a trial's operator could not tell two tenants' Runs apart)
    const whose = new Map(everyone.pages.flatMap((p) => (p.runs as { runId: string; principal?: string }[]).map((r) => [r.runId, r.principal])));
    expect([...carolRuns, daveRun].map((id) => whose.get(id))).toEqual([...carolRuns.map(() => `carol-${t.tag}`), `dave-${t.tag}`]);
    // the admin's list is in the same order: admission time, newest first
    const admitted = everyone.pages.flatMap((p) => (p.runs as { admittedAt: string }[]).map((r) => Date.parse(r.admittedAt)));
    expect(admitted).toEqual([...admitted].sort((a, b) => b - a));
  });

  it('refuses a limit outside 1..100, a repeated or bracketed limit or cursor and a cursor it did not give (400, the reason in issues); no token is 401', async () => {
    for (const query of [
      'limit=0',
      'limit=101',
      'limit=abc',
      'limit=1&limit=2',
      // a bracketed form of a known parameter (an array or an object to qs-minded clients): not left out silently
      'limit[]=2',
      'limit[x]=3',
      'cursor[]=x',
      'cursor=not-a-cursor',
      `cursor=${Buffer.from('{"runId":"x"}').toString('base64url')}`,
    ]) {
      const r = await get(admission(`/v1/runs?${query}`), alice);
      expect([query, r.status, r.body?.code]).toEqual([query, 400, 'bad_request']);
      expect((r.body!.issues as { path: string }[])[0]!.path).toMatch(/^query\.(limit|cursor)/);
    }
    expect((await get(admission('/v1/runs'), null)).status).toBe(401);
  });

  it("answers CORS for publication's origin (the viewer's page), preflight before the token, and nothing for another origin", async () => {
    const viewerOrigin = new URL(t.stack.endpoints.publication).origin;
    const preflight = await fetch(admission('/v1/runs'), {
      method: 'OPTIONS',
      headers: { origin: viewerOrigin, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe(viewerOrigin);
    expect(preflight.headers.get('access-control-allow-headers')?.toLowerCase()).toContain('authorization');
    expect(preflight.headers.get('access-control-allow-credentials')).toBeNull();
    const listed = await fetch(admission('/v1/runs'), { headers: { origin: viewerOrigin, ...bearer(alice) } });
    expect(listed.status).toBe(200);
    expect(listed.headers.get('access-control-allow-origin')).toBe(viewerOrigin);
    const foreign = await fetch(admission('/v1/runs'), { headers: { origin: 'http://evil.example', ...bearer(alice) } });
    expect(foreign.headers.get('access-control-allow-origin')).toBeNull();
  });
});

describe('event streams are capped per principal and per publication process (RUNPLANE_OBSERVER_STREAMS_*: 3 and 5 here)', () => {
  /** Opens an event stream of `runId` with `token`; `close` disconnects it (the Run goes on). */
  async function openStream(runId: string, token: string) {
    const ac = new AbortController();
    const res = await fetch(publication(`/v1/runs/${runId}/events`), { headers: bearer(token), signal: ac.signal });
    return { res, close: () => ac.abort() };
  }
  /** The problem answer of a refused stream, with its `Retry-After`. */
  async function refusal(res: Response) {
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    return { status: res.status, retryAfter: Number(res.headers.get('retry-after')), body: (await res.json()) as Record<string, unknown> };
  }

  it("given frank holds 3 streams of his Run, then his 4th is 429 problem JSON naming the setting; with the process's 5 held, grace's is 503; once streams close, grace's stream carries her Run's events through run.settled and frank is admitted 3 times again", async () => {
    const key = `caps-${t.tag}`;
    await t.setScenario({ steps: [{ hang: true }], then: 'repeat-last' }, key);
    const [frank, grace] = await Promise.all([auth.mint(`frank-${t.tag}`), auth.mint(`grace-${t.tag}`)]);
    const held = await post(admission(`/v1/conversations/conv-${t.tag}-frank/messages`), frank, {
      clientMessageId: 'f1',
      content: `What does DIA hold? ${key}`,
    });
    const answered = await post(admission(`/v1/conversations/conv-${t.tag}-grace/messages`), grace, {
      clientMessageId: 'g1',
      content: 'What does SPY hold?',
    });
    expect([held.status, answered.status]).toEqual([201, 201]);
    const frankRun = String(held.body!.runId);
    const graceRun = String(answered.body!.runId);

    const franks = await Promise.all([1, 2, 3].map(() => openStream(frankRun, frank)));
    expect(franks.map((s) => s.res.status)).toEqual([200, 200, 200]);
    const fourth = await openStream(frankRun, frank);
    const overPrincipal = await refusal(fourth.res);
    expect(overPrincipal).toMatchObject({
      status: 429,
      body: { status: 429, code: 'observer_limit', setting: 'RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL', limit: 3, open: 3 },
    });
    expect(overPrincipal.retryAfter).toBeGreaterThan(0);
    expect(String(overPrincipal.body.detail)).toContain('RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL=3');

    // an admin is a principal too; its 2 streams fill the process's 5
    const admins = await Promise.all([1, 2].map(() => openStream(frankRun, admin)));
    expect(admins.map((s) => s.res.status)).toEqual([200, 200]);
    const overProcess = await refusal((await openStream(graceRun, grace)).res);
    expect(overProcess).toMatchObject({
      status: 503,
      body: { status: 503, code: 'observer_capacity', setting: 'RUNPLANE_OBSERVER_STREAMS_MAX', limit: 5, open: 5 },
    });
    expect(overProcess.retryAfter).toBeGreaterThan(0);
    // each refusal is counted by its code, for the SRE watching the caps
    const metrics = await (await fetch(publication('/metrics'))).text();
    const refused = (code: string) =>
      Number(new RegExp(`^runplane_observer_streams_refused_total\\{code="${code}"[^}]*\\} (\\d+)`, 'm').exec(metrics)?.[1] ?? 0);
    expect(refused('observer_limit')).toBeGreaterThanOrEqual(1);
    expect(refused('observer_capacity')).toBeGreaterThanOrEqual(1);

    // the admin's streams close: grace's stream is admitted and is a working one, to the settlement
    for (const s of admins) s.close();
    const graceStream = await eventually(
      async () => {
        const s = await openStream(graceRun, grace);
        if (s.res.status === 200) return s;
        expect(s.res.status).toBe(503); // until the server has seen the admin's streams go
        await s.res.body?.cancel();
        return null;
      },
      10_000,
      "grace's stream admitted once the admin's closed",
    );
    const text = await graceStream.res.text();
    const types = [...text.matchAll(/^event: (.+)$/gm)].map((m) => m[1]);
    expect(types[0]).toBe('run.admitted');
    expect(types.at(-1)).toBe('run.settled');

    // frank's streams close: his count went down, 3 new ones are admitted
    for (const s of franks) s.close();
    const again = await eventually(
      async () => {
        const streams = await Promise.all([1, 2, 3].map(() => openStream(frankRun, frank)));
        if (streams.every((s) => s.res.status === 200)) return streams;
        for (const s of streams) s.close();
        return null;
      },
      10_000,
      "frank's 3 streams admitted again once his earlier ones closed",
    );
    for (const s of again) s.close();
    expect((await post(admission(`/v1/runs/${frankRun}/cancel`), frank, { reason: 'test over' })).status).toBe(202);
  });
});
