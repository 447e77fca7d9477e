import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { MikroORM } from '@mikro-orm/postgresql';
import { durableNamesOf, EventLog } from '@runplane/eventlog';
import { currentNatsServerBinary, SUITE_NATS, TestNatsServer } from '../../../test/support/nats-server.js';
import type { StoredEvent } from '@runplane/contracts';
import {
  type ApplyResult,
  applyStoredEvent,
  createProjectionOrm,
  databaseUrlWith,
  dropDatabase,
  dumpProjectionRows,
  getRunView,
  rebuildProjections,
} from '@runplane/projections';
import {
  MAX_BATCH,
  PROJECTOR_BATCH_LINGER,
  PROJECTOR_DURABLE,
  ProjectorService,
  startProjector,
  type StartedProjector,
} from '@runplane/app-projector';
import { HealthController } from '@runplane/service-kit';
import {
  appendAll,
  copyOfMigratedDatabase,
  failingRunEvents,
  interleave,
  researchRunEvents,
  uniqueTag,
} from '../../../libs/projections/test/fixtures.js';

// the projector's partition consumers need the current server (multi-filter 2.10, pinned priority groups 2.11)
const current = currentNatsServerBinary();
let server: TestNatsServer;
let natsUrl: string;
const adminUrl = process.env.PROJECTIONS_TEST_ADMIN_URL ?? 'postgresql://postgres@127.0.0.1:5432/postgres';
const tag = uniqueTag();
const stream = `RPTEST_PROJECTOR_${tag}`;
const prefix = `tpr${tag}`;
const liveDb = `rp_test_projector_${tag}`;
const liveUrl = databaseUrlWith(adminUrl, liveDb);
const created: string[] = [];
let log: EventLog;
let orm: MikroORM | null = null;
let projector: StartedProjector | null = null;

async function until<T>(what: string, probe: () => Promise<T | null | undefined | false>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The projector's partition consumers have everything up to the stream's end delivered and acknowledged. */
async function caughtUp(): Promise<boolean> {
  const infos = await Promise.all(durableNamesOf(log.space, PROJECTOR_DURABLE).map((d) => log.jsm.consumers.info(stream, d).catch(() => null)));
  return infos.every((info) => info !== null && info.num_pending === 0 && info.num_ack_pending === 0);
}

/** A fresh, migrated projection database (dropped after the suite): a copy of the file's migrated template. */
async function scratchOrm(name: string): Promise<MikroORM> {
  const db = `rp_test_projector_${name}_${tag}`;
  created.push(db);
  return (await copyOfMigratedDatabase(db)).orm;
}

/** A ProjectorService over `scratch` (with `lingerMs`, default 0) that counts the transactions it opens. */
function countingService(scratch: MikroORM, from = log, lingerMs = 0): { service: ProjectorService; transactions: () => number } {
  let transactions = 0;
  const em = {
    fork: () => {
      const fork = scratch.em.fork();
      const transactional = fork.transactional.bind(fork);
      fork.transactional = ((...args: Parameters<typeof transactional>) => {
        transactions++;
        return transactional(...args);
      }) as typeof fork.transactional;
      return fork;
    },
  };
  return { service: new ProjectorService({ orm: { em } } as never, from, lingerMs), transactions: () => transactions };
}

beforeAll(async () => {
  server = await TestNatsServer.start({ bin: current.bin });
  natsUrl = server.url;
  Object.assign(process.env, {
    NATS_URL: natsUrl,
    RUNPLANE_STREAM: stream,
    RUNPLANE_SUBJECT_PREFIX: prefix,
    DATABASE_URL: liveUrl,
    HOST: '127.0.0.1',
    PROJECTOR_PORT: '0',
  });
  log = await EventLog.connect({ ...SUITE_NATS, natsUrl, stream, prefix });
  projector = await startProjector({ logLevel: 'error' }); // creates and migrates the database
  orm = await createProjectionOrm({ databaseUrl: liveUrl });
});
afterAll(async () => {
  await projector?.app.close();
  await orm?.close();
  // together: each drop waits for a checkpoint, which the drops made at once share
  await Promise.all([liveDb, ...created].map((db) => dropDatabase(adminUrl, db)));
  await log?.destroyStream();
  await log?.close();
  await server?.cleanup();
});

describe('projector service', () => {
  it("serves GET /healthz and /readyz (the kit's terminus body) with NATS, the stream, its consumers and PostgreSQL up", async () => {
    for (const path of ['/healthz', '/readyz']) {
      const res = await fetch(`${projector!.url}${path}`);
      expect(res.status).toBe(200);
      const body = (await res.json()) as { status: string; details: Record<string, { status: string; durables?: Record<string, unknown> }> };
      expect(body.status).toBe('ok');
      expect(Object.fromEntries(Object.entries(body.details).map(([k, v]) => [k, v.status]))).toEqual({
        nats: 'up',
        stream: 'up',
        consumers: 'up',
        postgres: 'up',
      });
      // one replica serves every partition consumer
      expect(Object.keys(body.details.consumers!.durables!).sort()).toEqual(durableNamesOf(log.space, PROJECTOR_DURABLE).sort());
    }
  });

  it('given two Runs appended to the log, then the durable consumer projects them, and a rebuild from the log is identical (K11)', async () => {
    const research = `research-${tag}`;
    const failing = `failing-${tag}`;
    const stored = await appendAll(log, interleave(researchRunEvents(research), failingRunEvents(failing)));
    const lastSeq = stored[stored.length - 1]!.seq;

    const view = await until('the research Run settled in the projection', async () => {
      const v = await getRunView(orm!, research);
      return v?.status === 'settled' && v;
    });
    await until('the failing Run settled in the projection', async () => (await getRunView(orm!, failing))?.status === 'settled');
    await until('the consumer caught up', caughtUp);
    expect(view).toMatchObject({ outcome: 'completed', modelRequests: 2, toolCalls: 2, passages: 2 });
    expect(Math.max(view.lastSeq, (await getRunView(orm!, failing))!.lastSeq)).toBe(lastSeq);

    const result = await rebuildProjections({ log, databaseUrl: liveUrl });
    created.push(result.database);
    expect(result).toMatchObject({ eventsApplied: stored.length, lastSeq, identicalToLive: true, differences: [] });
    const rebuilt = await createProjectionOrm({ databaseUrl: databaseUrlWith(adminUrl, result.database) });
    try {
      expect(await dumpProjectionRows(rebuilt)).toEqual(await dumpProjectionRows(orm!));
    } finally {
      await rebuilt.close();
    }
  });

  it("given a Run's events appended one by one a few ms apart, then the running projector applies them in a few flushes, not one per event (its consumers hand deliveries over as they arrive; the linger is PROJECTOR_BATCH_LINGER_MS's 50)", async () => {
    expect(projector!.app.get(PROJECTOR_BATCH_LINGER)).toBe(50);
    const service = projector!.app.get(ProjectorService);
    // one count per Run per flush: applied from its deliveries, or from a read of its log
    const flushesOfRuns = () => service.stats.fromDeliveries + service.stats.reads;
    await until('the consumer caught up', caughtUp);
    const before = flushesOfRuns();
    const runId = `quiet-${tag}`;
    const stored = await appendAll(log, researchRunEvents(runId), { gapMs: 5 });
    await until('the Run projected', async () => (await getRunView(orm!, runId))?.lastSeq === stored.at(-1)!.seq);
    // with the per-Run chain each event would wait out its own linger: one flush each
    expect(flushesOfRuns() - before).toBeLessThanOrEqual(Math.floor(stored.length / 2));
    expect(flushesOfRuns() - before).toBeGreaterThanOrEqual(1);
  });

  it('given an operator deletes one of its durable consumers, then /readyz answers 503 naming it; recreated, 200 again and it is pulled from', async () => {
    // a partition consumer that has delivered something, so that its pulling shows after it is recreated
    const infos = await Promise.all(durableNamesOf(log.space, PROJECTOR_DURABLE).map((d) => log.jsm.consumers.info(stream, d)));
    const info = infos.find((i) => i.delivered.stream_seq > 0)!;
    const durable = info.name;
    // what the server says of a consumer is trusted 5 s in production: 200 ms here, so the deletion
    // and the recreation each show within a fraction of a second, not after 5 s
    projector!.app.get(HealthController).consumerLookupTtlMs = 200;
    const readyz = async () => {
      const res = await fetch(`${projector!.url}/readyz`);
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    expect((await readyz()).status).toBe(200);
    await log.jsm.consumers.delete(stream, durable);
    const down = await until('/readyz 503 naming the deleted consumer', async () => {
      const r = await readyz();
      return r.status === 503 ? r.body : null;
    });
    expect(down).toMatchObject({ code: 'dependency_unavailable', detail: `the durable consumer ${durable} is unavailable; retry later` });
    expect((down.checks as Record<string, Record<string, unknown>>).consumers).toMatchObject({
      status: 'down',
      down: [durable],
      durables: { [durable]: { exists: false, pulling: true, reason: 'not found on the server' } },
    });
    // recreated as the service creates it (one CONSUMER.CREATE with its configuration)
    const reply = await log.nc.request(`$JS.API.CONSUMER.CREATE.${stream}.${durable}`, JSON.stringify({ stream_name: stream, config: info.config }));
    expect(reply.json<{ error?: unknown }>().error).toBeUndefined();
    await until('/readyz 200 again', async () => (await readyz()).status === 200);
    // the client found it again and pulls: the recreated durable redelivers its partition and is acknowledged
    await until('the recreated consumer delivered and was acknowledged', async () => {
      const now = await log.jsm.consumers.info(stream, durable);
      return now.delivered.stream_seq >= info.delivered.stream_seq && now.num_pending === 0 && now.num_ack_pending === 0;
    });
  });

  it('given the consumer is recreated and redelivers the whole log, then every event is skipped and the rows do not change; new events still apply', async () => {
    const before = await dumpProjectionRows(orm!);
    expect(before.runs.length).toBeGreaterThan(0);
    await projector!.app.close();
    projector = null;
    for (const d of durableNamesOf(log.space, PROJECTOR_DURABLE)) await log.jsm.consumers.delete(stream, d);
    projector = await startProjector({ logLevel: 'error' });
    await until('the recreated consumer caught up', caughtUp);
    expect(await dumpProjectionRows(orm!)).toEqual(before);
    expect(projector.app.get(ProjectorService).stats).toMatchObject({ applied: 0, skipped: await log.lastSeq(), retries: 0, gaps: 0 });

    const late = `late-${tag}`;
    await appendAll(log, researchRunEvents(late));
    await until('the late Run settled', async () => (await getRunView(orm!, late))?.status === 'settled');
  });

  it('given a Run whose later event arrives before an earlier one (a redelivery after restart), then the catch-up applies every event in order and nothing is lost (K11)', async () => {
    const runId = `ooo-${tag}`;
    const stored = await appendAll(log, researchRunEvents(runId));
    const scratch = await scratchOrm('ooo');
    try {
      const service = new ProjectorService({ orm: scratch } as never, log);
      const last = stored[stored.length - 1]!;
      const middle = stored[Math.floor(stored.length / 2)]!;
      const applied = await service.catchUp(last); // woken by the newest event first
      expect(applied.map((r) => r.seq)).toEqual(stored.map((s) => s.seq));
      expect(service.stats).toMatchObject({ reads: 1, fromDeliveries: 0 }); // it does not chain from the checkpoint: the log is read
      expect(await service.catchUp(middle)).toEqual([{ status: 'skipped', runId, seq: middle.seq, previousLastSeq: last.seq }]);
      const view = await getRunView(scratch, runId);
      expect(view?.lastSeq).toBe(last.seq);
      await until('the live projector projected the same Run', async () => (await getRunView(orm!, runId))?.lastSeq === last.seq);
      const pick = (rows: Record<string, unknown[]>) =>
        Object.fromEntries(Object.entries(rows).map(([table, list]) => [table, (list as { run_id?: string }[]).filter((r) => r.run_id === runId)]));
      expect(pick((await dumpProjectionRows(scratch)) as never)).toEqual(pick(await dumpProjectionRows(orm!)));
    } finally {
      await scratch.close();
    }
  });

  it('given concurrent deliveries of 12 Runs (and a repeat of each), then they are applied in one transaction, with the rows of applying every event one by one', async () => {
    const runIds = Array.from({ length: 12 }, (_, i) => `batch${i}-${tag}`);
    const stored = await appendAll(log, interleave(...runIds.map((r) => researchRunEvents(r))));
    const batched = await scratchOrm('batched');
    const oneByOne = await scratchOrm('onebyone');
    try {
      const { service, transactions } = countingService(batched);
      const lastOf = (runId: string) => stored.filter((s) => s.event.runId === runId).at(-1)!;
      const middleOf = (runId: string) => stored.filter((s) => s.event.runId === runId)[5]!;
      const deliveries: StoredEvent[] = runIds.flatMap((r) => [lastOf(r), middleOf(r)]);
      const results = await Promise.all(deliveries.map((d) => service.catchUp(d)));

      expect(transactions()).toBe(1);
      expect(transactions()).toBeLessThan(stored.length);
      runIds.forEach((runId, i) => {
        const own = stored.filter((s) => s.event.runId === runId);
        expect(results[2 * i]!.map((r) => [r.status, r.seq])).toEqual(own.map((s) => ['applied', s.seq]));
        expect(results[2 * i + 1]).toEqual([{ status: 'skipped', runId, seq: middleOf(runId).seq, previousLastSeq: lastOf(runId).seq }]);
      });
      expect(service.stats).toMatchObject({ applied: stored.length, skipped: runIds.length, retries: 0, gaps: 0 });

      for (const s of stored) await applyStoredEvent(oneByOne.em, s);
      expect(await dumpProjectionRows(batched)).toEqual(await dumpProjectionRows(oneByOne));
      // every delivery again (a restart redelivering): skipped from the checkpoint cache, no transaction
      await Promise.all(stored.map((s) => service.catchUp(s)));
      expect(transactions()).toBe(1);
      expect(service.stats).toMatchObject({ applied: stored.length, skipped: runIds.length + stored.length, retries: 0, gaps: 0 });
    } finally {
      await batched.close();
      await oneByOne.close();
    }
  });

  it('given every event of 6 Runs delivered in stream order, then each flush applies them from the deliveries alone (no read of the log), with the rows of applying every event one by one (no read of the log on the hot path)', async () => {
    const runIds = Array.from({ length: 6 }, (_, i) => `chain${i}-${tag}`);
    const stored = await appendAll(log, interleave(...runIds.map((r) => researchRunEvents(r))));
    const chained = await scratchOrm('chained');
    const oneByOne = await scratchOrm('chainedref');
    try {
      let reads = 0;
      const counting = Object.create(log) as EventLog;
      counting.catchUp = (...args: Parameters<EventLog['catchUp']>) => (reads++, log.catchUp(...args));
      const { service } = countingService(chained, counting);
      // as a whole-partition consumer delivers them: in stream order, a few at a time
      for (let i = 0; i < stored.length; i += 5) await Promise.all(stored.slice(i, i + 5).map((s) => service.catchUp(s)));
      expect(reads).toBe(0);
      expect(service.stats).toMatchObject({ applied: stored.length, reads: 0, gaps: 0, retries: 0 });
      expect(service.stats.fromDeliveries).toBeGreaterThanOrEqual(Math.ceil(stored.length / 5));
      for (const s of stored) await applyStoredEvent(oneByOne.em, s);
      expect(await dumpProjectionRows(chained)).toEqual(await dumpProjectionRows(oneByOne));
    } finally {
      await chained.close();
      await oneByOne.close();
    }
  });

  it.each([
    { lingerMs: 1_000, expected: 'one transaction' },
    { lingerMs: 0, expected: 'a transaction each' },
  ])(
    "given a Run's events delivered one by one a few ms apart (a quiet projector, its consumers handing each over as it arrives), with a linger of $lingerMs ms, then $expected, with the rows of applying every event one by one",
    async ({ lingerMs }) => {
      const runId = `linger${lingerMs}-${tag}`;
      const stored = await appendAll(log, researchRunEvents(runId));
      const lingered = await scratchOrm(`linger${lingerMs}`);
      const oneByOne = await scratchOrm(`lingerref${lingerMs}`);
      try {
        const { service, transactions } = countingService(lingered, log, lingerMs);
        const done: Promise<ApplyResult[]>[] = [];
        for (const s of stored) {
          done.push(service.catchUp(s));
          // (without a linger, each one's flush finishes before the next arrives)
          await (lingerMs > 0 ? new Promise((r) => setTimeout(r, 5)) : done.at(-1));
        }
        const results = (await Promise.all(done)).flat();
        expect(results.filter((r) => r.status === 'applied').map((r) => r.seq)).toEqual(stored.map((s) => s.seq));
        expect(transactions()).toBe(lingerMs > 0 ? 1 : stored.length);
        expect(service.stats).toMatchObject({ applied: stored.length, reads: 0, gaps: 0, retries: 0 });
        for (const s of stored) await applyStoredEvent(oneByOne.em, s);
        expect(await dumpProjectionRows(lingered)).toEqual(await dumpProjectionRows(oneByOne));
      } finally {
        await lingered.close();
        await oneByOne.close();
      }
    },
  );

  it('given a flush waiting out a long linger, then a full batch goes at once, and so does the flush when the application stops (its deliveries fail fast and redeliver, nothing written)', async () => {
    const full = await appendAll(log, researchRunEvents(`full-${tag}`));
    const stopped = await appendAll(log, researchRunEvents(`stop-${tag}`).slice(0, 2));
    const scratch = await scratchOrm('wake');
    try {
      const { service, transactions } = countingService(scratch, log, 60_000);
      // MAX_BATCH deliveries (the Run's events, and repeats of them, as a redelivering consumer hands them over)
      const started = Date.now();
      const first = service.catchUp(full[0]!);
      await new Promise((r) => setTimeout(r, 50)); // its flush lingering
      const results = await Promise.all([first, ...Array.from({ length: MAX_BATCH - 1 }, (_, i) => service.catchUp(full[(i + 1) % full.length]!))]);
      expect(Date.now() - started).toBeLessThan(30_000);
      expect(results.flat().filter((r) => r.status === 'applied')).toHaveLength(full.length);
      expect(transactions()).toBe(1);

      const stopping = Date.now();
      const pending = stopped.map((s) => service.catchUp(s));
      await new Promise((r) => setTimeout(r, 50)); // lingering
      service.beforeApplicationShutdown();
      for (const p of pending) await expect(p).rejects.toThrow(/projector stopping/);
      expect(Date.now() - stopping).toBeLessThan(30_000);
      expect(transactions()).toBe(1);
    } finally {
      await scratch.close();
    }
  });

  it("given a batch with a Run whose admission is missing from the log, then that Run's delivery is skipped as an anomaly (never redelivered) and the other Run is applied", async () => {
    const good = `good-${tag}`;
    const orphan = `orphan-${tag}`;
    // a stream of its own: the live projector of this suite must not meet the orphan
    const own = await EventLog.connect({ ...SUITE_NATS, natsUrl, stream: `${stream}_ORPHAN`, prefix: `${prefix}o` });
    const stored = await appendAll(own, interleave(researchRunEvents(good), researchRunEvents(orphan).slice(1, 5)));
    const scratch = await scratchOrm('orphan');
    try {
      const { service, transactions } = countingService(scratch, own);
      (service as unknown as { logger: object }).logger = { error: () => undefined, warn: () => undefined }; // the orphan is expected here
      const lastOf = (runId: string) => stored.filter((s) => s.event.runId === runId).at(-1)!;
      const [orphanOutcome, goodOutcome] = await Promise.allSettled([service.catchUp(lastOf(orphan)), service.catchUp(lastOf(good))]);
      // an event of a Run that was never admitted cannot apply by waiting: it is not a fact (a forgery)
      expect(orphanOutcome.status).toBe('fulfilled');
      expect((orphanOutcome as PromiseFulfilledResult<ApplyResult[]>).value).toEqual([
        expect.objectContaining({ status: 'skipped', runId: orphan, seq: lastOf(orphan).seq }),
      ]);
      expect(goodOutcome.status).toBe('fulfilled');
      expect(transactions()).toBe(2); // the batch rolled back, then the other Runs without the orphan
      expect(await getRunView(scratch, good)).toMatchObject({ status: 'settled', lastSeq: lastOf(good).seq });
      expect(await getRunView(scratch, orphan)).toBeNull();
      expect(service.stats).toMatchObject({ applied: stored.filter((s) => s.event.runId === good).length, retries: 0 });
    } finally {
      await scratch.close();
      await own.destroyStream();
      await own.close();
    }
  });
});
