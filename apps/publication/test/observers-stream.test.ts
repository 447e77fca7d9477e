/**
 * The event stream's route (`ObserversController.events`) on a real Express server, with an event
 * log whose follow a test decides (it holds, throws, or delivers before it returns): a follow that
 * cannot start is a 503 problem with nothing of a stream written (it was a 200 that closed at
 * once); what the follow delivers before the headers are sent comes after them, in order; the caps
 * per principal (429) and per process (503) hold, and every way a stream ends (client gone,
 * settlement, token expiry, shutdown, a failed start) gives its place back exactly once.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import express from 'express';
import { Logger } from '@nestjs/common';
import type { StoredEvent } from '@runplane/contracts';
import type { EventLog } from '@runplane/eventlog';
import { ApiError, writeProblem, type Principal } from '@runplane/service-kit';
import { ObserversController } from '../src/observers.controller.js';

type OnEvent = (e: StoredEvent) => void | Promise<void>;
/** What the fake log's follow of a Run does: resolves with a stop function or throws. */
type Follow = (onEvent: OnEvent) => Promise<() => Promise<void>>;

const follows = new Map<string, Follow>();
let stops = 0;
const stored = (seq: number, type: string, runId: string) => ({ seq, event: { type, runId } }) as unknown as StoredEvent;
const holding: Follow = () => Promise.resolve(() => Promise.resolve(void stops++));

const log = {
  lastOf: (_runId: string, owner: string) => Promise.resolve(owner === 'admission' ? stored(1, 'run.admitted', 'x') : null),
  followRun: (runId: string, _from: number, onEvent: OnEvent) => (follows.get(runId) ?? holding)(onEvent),
} as unknown as EventLog;
const controller = new ObserversController(log, { RUNPLANE_OBSERVER_STREAMS_MAX: 5, RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL: 3 });
const principal = (sub: string, expiresAt: number | null = null): Principal => ({ sub, scopes: [], admin: true, unauthenticated: false, expiresAt });
const expiries = new Map<string, number>();

let server: Server;
let base: string;
beforeAll(async () => {
  Logger.overrideLogger(false); // the refused follow's warning is what the first case causes
  const app = express();
  app.get('/v1/runs/:runId/events', (req, res) => {
    const sub = String(req.headers['x-sub']);
    controller
      .events(req.params.runId, undefined, req.query, req, res, principal(sub, expiries.get(sub) ?? null))
      .catch((e: unknown) => (e instanceof ApiError && !res.headersSent ? writeProblem(res, e, req.path) : res.end()));
  });
  server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await controller.beforeApplicationShutdown();
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

/** Opens a stream as `sub`; `abort` disconnects it. */
async function open(sub: string, runId: string = randomUUID()) {
  const ac = new AbortController();
  const res = await fetch(`${base}/v1/runs/${runId}/events`, { headers: { 'x-sub': sub }, signal: ac.signal });
  return { res, abort: () => ac.abort() };
}
async function until(what: string, ok: () => boolean, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
const openCount = () => controller.gate.current.open;

describe('the stream starts only once its consumer exists', () => {
  it('given a follow that cannot start (the stream consumer limit), then 503 problem JSON with Retry-After and nothing of a stream; its place is given back', async () => {
    const runId = randomUUID();
    follows.set(runId, () => Promise.reject(new Error('maximum consumers limit reached')));
    const { res } = await open('alice', runId);
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ status: 503, code: 'dependency_unavailable' });
    expect(String(body.detail)).toContain("the Run's consumer could not be made");
    expect(String(body.detail)).not.toContain('maximum consumers'); // the server's words stay in the log
    expect(openCount()).toBe(0);
  });

  it('given a follow that delivers events before it returns, then they are written after the headers and the opening comment, in order, and the live ones after them', async () => {
    const runId = randomUUID();
    let live: OnEvent = () => undefined;
    follows.set(runId, async (onEvent) => {
      await onEvent(stored(1, 'run.admitted', runId));
      await onEvent(stored(2, 'model.turn.requested', runId));
      live = onEvent;
      return async () => void stops++;
    });
    const { res } = await open('alice', runId);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    setTimeout(() => void live(stored(3, 'run.settled', runId)), 50);
    const text = await res.text();
    expect([...text.matchAll(/^(?::.*|id: \d+)$/gm)].map((m) => m[0])).toEqual([': runplane event stream', 'id: 1', 'id: 2', 'id: 3']);
    await until('the settled stream to give its place back', () => openCount() === 0);
  });

  it('given a follow that delivers the settlement before it returns, then the stream is the opening comment and the events, and ends', async () => {
    const runId = randomUUID();
    follows.set(runId, async (onEvent) => {
      await onEvent(stored(7, 'run.settled', runId));
      return async () => void stops++;
    });
    const before = stops;
    const { res } = await open('alice', runId);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toBe(`: runplane event stream\n\nid: 7\nevent: run.settled\ndata: ${JSON.stringify({ type: 'run.settled', runId })}\n\n`);
    expect(stops).toBe(before + 1);
    expect(openCount()).toBe(0);
  });
});

describe('caps: 3 streams per principal, 5 per process', () => {
  it("given alice holds 3 streams, then her 4th is 429 naming the setting while bob's are admitted; the 6th of the process is 503; after one of hers ends she is admitted again", async () => {
    const alice = await Promise.all([open('alice'), open('alice'), open('alice')]);
    expect(alice.map((s) => s.res.status)).toEqual([200, 200, 200]);
    const fourth = await open('alice');
    expect(fourth.res.status).toBe(429);
    expect(Number(fourth.res.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await fourth.res.json()).toMatchObject({
      status: 429,
      code: 'observer_limit',
      setting: 'RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL',
      limit: 3,
      open: 3,
    });
    const bob = await Promise.all([open('bob'), open('bob')]);
    expect(bob.map((s) => s.res.status)).toEqual([200, 200]);
    const sixth = await open('carol');
    expect(sixth.res.status).toBe(503);
    expect(Number(sixth.res.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await sixth.res.json()).toMatchObject({ status: 503, code: 'observer_capacity', setting: 'RUNPLANE_OBSERVER_STREAMS_MAX', limit: 5 });
    expect(openCount()).toBe(5);

    const before = stops;
    alice[0].abort();
    await until('the disconnected stream to give its place back', () => openCount() === 4);
    expect(stops).toBe(before + 1);
    const again = await open('alice');
    expect(again.res.status).toBe(200);
    for (const s of [...alice.slice(1), ...bob, again]) s.abort();
    await until('every stream to give its place back', () => openCount() === 0);
    expect(stops).toBe(before + 6);
  });

  it('given a token that expires, then its stream ends and gives its place back; a shutdown gives back every place', async () => {
    expiries.set('dave', Date.now() + 300);
    const { res } = await open('dave');
    expect(await res.text()).toContain(': token expired');
    await until('the expired stream to give its place back', () => openCount() === 0);
    const held = await Promise.all([open('erin'), open('erin')]);
    expect(openCount()).toBe(2);
    await controller.beforeApplicationShutdown();
    expect(openCount()).toBe(0);
    for (const s of held) await s.res.text();
  });
});
