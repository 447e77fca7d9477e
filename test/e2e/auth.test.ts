/**
 * Authentication and tenancy of the HTTP API (issue [10]), on the real stack with authentication
 * on (a development issuer's JWKS file, ES256 tokens): every API route wants a bearer JWT whose
 * signature, issuer, audience and expiry verify (401 with `WWW-Authenticate` and the reason
 * otherwise, nothing appended); a Conversation and its Runs are their creator's alone (another
 * principal gets the 404 of an unknown id on every route, and appends nothing); the principal is
 * recorded on `run.admitted` and as who canceled, from the token, never from `X-Runplane-User`;
 * operator actions want `runplane:admin`. Health and metrics stay open.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
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
  t = await startTestStack('auth', { ...auth.env });
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

describe('authentication: a bearer JWT on every API route (issue [10])', () => {
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

describe('tenancy: a Conversation and its Runs belong to their creator (issue [10])', () => {
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
    // her message, looked up by id, and her conversation: unknown to bob
    expect((await get(admission(`/v1/conversations/${conversationId}/messages/a1`), bob)).status).toBe(404);
    expect((await get(admission(`/v1/conversations/${conversationId}/messages/a1`), alice)).status).toBe(200);
    const intrude = await post(admission(`/v1/conversations/${conversationId}/messages`), bob, {
      clientMessageId: 'b1',
      content: 'Now also QQQ',
      continuationOfRunId: runId,
    });
    expect(intrude.status).toBe(404);
    expect(intrude.body).toMatchObject({ code: 'not_found', detail: `conversation ${conversationId} not found` });
    // bob appended nothing to her Run, and nothing of his was admitted
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
    // an operator action without the admin scope
    const reconcile = await post(admission(`/v1/runs/${runId}/tool-calls/c1/reconcile`), alice, { outcome: 'succeeded', evidence: 'checked' });
    expect(reconcile.status).toBe(403);
    expect(reconcile.body).toMatchObject({ code: 'forbidden' });
  });

  it('given a Conversation with Runs but no owner (created with authentication off), then nobody may claim it: 404, nothing admitted', async () => {
    const conversationId = `conv-${t.tag}-legacy`;
    const index = await ConversationIndex.open(t.log);
    await index.add(conversationId, { runId: randomUUID(), clientMessageId: 'old', admittedAt: new Date().toISOString() });
    const r = await post(admission(`/v1/conversations/${conversationId}/messages`), bob, { clientMessageId: 'b9', content: 'What does DIA hold?' });
    expect(r.status).toBe(404);
    expect((await index.read(conversationId)).owner).toBeUndefined();
  });

  it('given two principals posting at once to a new Conversation id, then exactly one owns it', async () => {
    const conversationId = `conv-${t.tag}-race`;
    const [a, b] = await Promise.all(
      [alice, bob].map((token, i) =>
        post(admission(`/v1/conversations/${conversationId}/messages`), token, { clientMessageId: `r${i}`, content: 'What does DIA hold?' }),
      ),
    );
    expect([a!.status, b!.status].sort()).toEqual([201, 404]);
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
    // the admin's list is in the same order: admission time, newest first
    const admitted = everyone.pages.flatMap((p) => (p.runs as { admittedAt: string }[]).map((r) => Date.parse(r.admittedAt)));
    expect(admitted).toEqual([...admitted].sort((a, b) => b - a));
  });

  it('refuses a limit outside 1..100, a repeated limit and a cursor it did not give (400, the reason in issues); no token is 401', async () => {
    for (const query of [
      'limit=0',
      'limit=101',
      'limit=abc',
      'limit=1&limit=2',
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
