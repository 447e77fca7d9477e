/**
 * The event stream's route (`ObserversController.events`) on a real Express server over the real
 * event log (the suite's nats-server): a follow that cannot start (the Run stream's consumer limit
 * reached, here a stream limited to one consumer) is a 503 problem with nothing of a stream written
 * (it was a 200 that closed at once); the stored events and the live ones come after the headers,
 * in order; the caps per principal (429) and per process (503) hold, and every way a stream ends
 * (client gone, settlement, token expiry, shutdown, a failed start) gives its place back exactly
 * once.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes, randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import express from 'express';
import { Logger } from '@nestjs/common';
import { makeEvent } from '@runplane/contracts';
import { EventLog, runStreamConfig } from '@runplane/eventlog';
import { ApiError, writeProblem, type Principal } from '@runplane/service-kit';
import { ObserversController } from '../src/observers.controller.js';
import { admittedEvent, settledEvent, testContext } from '../../../test/support/events.js';
import { SHARED_NATS } from '../../../test/support/nats-server.js';

const tag = randomBytes(4).toString('hex');
/** The Run stream of this file, and one that allows a single consumer (nats-server's limit per stream: 1,000 by default). */
const space = { stream: `RPTEST_OBS_${tag}`, prefix: `tobs${tag}`, partitions: 2 };
const narrow = { stream: `RPTEST_OBS1_${tag}`, prefix: `tobsn${tag}`, partitions: 2 };
let log: EventLog;
let narrowLog: EventLog;
let controller: ObserversController;
let narrowController: ObserversController;
const principal = (sub: string, expiresAt: number | null = null): Principal => ({ sub, scopes: [], admin: true, unauthenticated: false, expiresAt });
const expiries = new Map<string, number>();
/** Appends a new Run's admission (what the route looks up before it streams); its id. */
async function admitted(on: EventLog = log): Promise<string> {
  const runId = randomUUID();
  await on.append(admittedEvent(runId), 0);
  return runId;
}

let server: Server;
let base: string;
beforeAll(async () => {
  Logger.overrideLogger(false); // the refused follow's warning is what the first case causes
  log = await EventLog.connect({ ...SHARED_NATS, ...space, name: 'observers-test' });
  log.onInvalid = () => undefined;
  // made before its log connects to it (a connect adopts an existing stream): one consumer at most
  await log.jsm.streams.add({ ...runStreamConfig(narrow, { replicas: 1, duplicateWindowMs: 120_000 }), max_consumers: 1 });
  narrowLog = await EventLog.connect({ ...SHARED_NATS, ...narrow, name: 'observers-test-narrow' });
  const caps = { RUNPLANE_OBSERVER_STREAMS_MAX: 5, RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL: 3 };
  controller = new ObserversController(log, caps);
  narrowController = new ObserversController(narrowLog, caps);
  const app = express();
  app.get('/v1/runs/:runId/events', (req, res) => {
    const sub = String(req.headers['x-sub']);
    // the client gone before the route's first read is answered: its connection closes while the route awaits
    if (req.headers['x-leave']) req.socket.destroy();
    (req.headers['x-narrow'] ? narrowController : controller)
      .events(req.params.runId, undefined, req.query, req, res, principal(sub, expiries.get(sub) ?? null))
      .catch((e: unknown) => (e instanceof ApiError && !res.headersSent ? writeProblem(res, e, req.path) : res.end()));
  });
  server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await controller?.beforeApplicationShutdown();
  await narrowController?.beforeApplicationShutdown();
  if (server) {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
  for (const l of [log, narrowLog]) {
    await l?.destroyStream().catch(() => undefined);
    await l?.close();
  }
});

/** Opens a stream of `runId` (default: a new admitted Run) as `sub`, on the narrow stream's route with `narrowRoute`; `abort` disconnects it. */
async function open(sub: string, runId?: string, narrowRoute = false) {
  const id = runId ?? (await admitted());
  const ac = new AbortController();
  const headers: Record<string, string> = { 'x-sub': sub, ...(narrowRoute ? { 'x-narrow': '1' } : {}) };
  const res = await fetch(`${base}/v1/runs/${id}/events`, { headers, signal: ac.signal });
  return { res, abort: () => ac.abort() };
}
async function until(what: string, ok: () => boolean, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
async function untilAsync(what: string, ok: () => Promise<boolean>, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
/** Consumers the server holds on this file's Run stream. */
const consumers = async () => (await log.jsm.streams.info(space.stream)).state.consumer_count;
const openCount = (c: ObserversController = controller) => c.gate.current.open;

describe('the stream starts only once its consumer exists', () => {
  it('given a follow that cannot start (the Run stream holds its one consumer already), then 503 problem JSON with Retry-After and nothing of a stream; its place is given back', async () => {
    const holder = await open('alice', await admitted(narrowLog), true);
    expect(holder.res.status).toBe(200);
    const { res } = await open('bob', await admitted(narrowLog), true);
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ status: 503, code: 'dependency_unavailable' });
    expect(String(body.detail)).toContain("the Run's consumer could not be made");
    expect(String(body.detail)).not.toContain('maximum consumers'); // the server's words stay in the log
    expect(openCount(narrowController)).toBe(1);
    holder.abort();
    await until('the holder to give its place back', () => openCount(narrowController) === 0);
  });

  it("given a Run's stored events and then a live settlement, then they are written after the headers and the opening comment, in order, and the stream ends", async () => {
    const runId = await admitted();
    const turn = await log.append(makeEvent('model.turn.requested', testContext(runId), 1, { turn: 1, model: 'm' }, new Date()), 0);
    const { res } = await open('alice', runId);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const settled = await log.append(settledEvent(runId), 0);
    const text = await res.text();
    const first = turn.seq - 1;
    expect([...text.matchAll(/^(?::.*|id: \d+)$/gm)].map((m) => m[0])).toEqual([
      ': runplane event stream',
      `id: ${first}`,
      `id: ${turn.seq}`,
      `id: ${settled.seq}`,
    ]);
    await until('the settled stream to give its place back', () => openCount() === 0);
  });

  it('given a settled Run, then the stream is the opening comment and its events, and ends', async () => {
    const runId = await admitted();
    const settled = await log.append(settledEvent(runId), 0);
    const { res } = await open('alice', runId);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text.startsWith(': runplane event stream\n\n')).toBe(true);
    expect([...text.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]))).toEqual([settled.seq - 1, settled.seq]);
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
    // each open stream holds one consumer of the Run stream
    expect(await consumers()).toBe(5);

    alice[0].abort();
    await until('the disconnected stream to give its place back', () => openCount() === 4);
    await untilAsync('its consumer deleted', async () => (await consumers()) === 4);
    const again = await open('alice');
    expect(again.res.status).toBe(200);
    for (const s of [...alice.slice(1), ...bob, again]) s.abort();
    await until('every stream to give its place back', () => openCount() === 0);
    await untilAsync('every consumer deleted', async () => (await consumers()) === 0);
  });

  it('given clients that leave while the route still reads the Run (before the stream is set up), then each gives its place back and holds no consumer', async () => {
    const runId = await admitted();
    const left = await Promise.all(
      Array.from({ length: 8 }, () =>
        fetch(`${base}/v1/runs/${runId}/events`, { headers: { 'x-sub': 'frank', 'x-leave': '1' } }).catch((e: unknown) => e),
      ),
    );
    // the connection was closed under each: no answer came
    expect(left.map((r) => (r as { status?: number }).status)).toEqual(Array.from({ length: 8 }, () => undefined));
    await until('the places of the clients that left given back', () => openCount() === 0);
    await untilAsync('no consumer left behind', async () => (await consumers()) === 0);
    // frank was never at his cap: 3 streams are admitted
    const frank = await Promise.all([open('frank', runId), open('frank', runId), open('frank', runId)]);
    expect(frank.map((s) => s.res.status)).toEqual([200, 200, 200]);
    for (const s of frank) s.abort();
    await until('every stream to give its place back', () => openCount() === 0);
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
