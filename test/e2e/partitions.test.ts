/**
 * Partitioned ownership of Runs with several replicas of every service (docs/operations.md "Partitions"): each service's
 * replicas share the stream's partitions (GET /partitions of every replica), one replica per
 * partition, so all the events of one Run that a service reacts to reach one replica in order.
 * (a) 3 replicas of every service: 30 Runs complete, each settles once, no model request or tool
 *     execution twice, projections rebuilt from the log identical;
 * (b) kill -9 of one runtime, one tools, one projector and one lifecycle mid-load: only the killed
 *     runtime's Runs end `interrupted`, the others complete, and the killed replicas' partitions
 *     move to the live ones within a bound measured here;
 * (c) a replica started later takes a share of the partitions and executes Runs of them.
 * Runs on the current nats-server (pinned priority groups: 2.11+).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PartitionsBody, StoredEvent } from '@runplane/contracts';
import { dropDatabase, type ManagedProcess, type ServiceName } from '@runplane/devstack';
import { durableNamesOf } from '@runplane/eventlog';
import { rebuildProjections } from '@runplane/projections';
import { effectsOf, kill9, modelRequestsFor, outcomeOf, sleep, waitForSettled } from '../support/faults.js';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const P = 8;
const MEMBER_TTL_MS = 3_000;
const REPLICAS = { runtime: 3, tools: 3, projector: 3, lifecycle: 3, publication: 2, admission: 2, recovery: 2 } as const;
const dir = mkdtempSync(join(tmpdir(), 'rp-partitions-'));
const effectFile = join(dir, 'effects.log');
let t: TestStack;

beforeAll(async () => {
  t = await startTestStack(
    'parts',
    {
      RUNPLANE_PARTITIONS: String(P),
      RUNPLANE_MEMBER_TTL_MS: String(MEMBER_TTL_MS),
      RUNPLANE_TEST_TOOLS: 'record_effect',
      RUNPLANE_RECORD_EFFECT_FILE: effectFile,
      RUNPLANE_LEASE_TTL_MS: '3000',
      RUNPLANE_RECOVERY_SWEEP_MS: '200',
      RUNPLANE_TOOL_CLAIM_TTL_MS: '3000',
      RUNPLANE_TOOL_CLAIM_SWEEP_MS: '500',
      RUNPLANE_TOOL_TIMEOUT_MS: '20000',
      LOG_LEVEL: 'warn',
    },
    { replicas: { ...REPLICAS } },
  );
}, 300_000);
afterAll(async () => {
  await t?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** GET /partitions of every live replica of a service (a replica that does not answer is left out). */
async function partitionsOf(service: ServiceName, skip: readonly ManagedProcess[] = []): Promise<PartitionsBody[]> {
  const bodies = await Promise.all(
    (t.stack.replicas.get(service) ?? [])
      .filter((r) => !skip.includes(r))
      .map(async (r) => {
        try {
          const res = await fetch(`${r.url}/partitions`, { signal: AbortSignal.timeout(2_000) });
          return (await res.json()) as PartitionsBody;
        } catch {
          return null;
        }
      }),
  );
  return bodies.filter((b): b is PartitionsBody => b !== null);
}

/** True when the live replicas of `service` own every partition exactly once, each at least floor(P/n) (and `n` of them answer). */
async function coveredBy(service: ServiceName, n: number, skip: readonly ManagedProcess[] = []): Promise<PartitionsBody[] | null> {
  const bodies = await partitionsOf(service, skip);
  if (bodies.length !== n) return null;
  const all = bodies.flatMap((b) => b.partitions).sort((a, b) => a - b);
  if (all.join() !== Array.from({ length: P }, (_, i) => i).join()) return null;
  if (bodies.some((b) => b.partitions.length < Math.floor(P / n) || b.members.length !== n)) return null;
  return bodies;
}

const answer = (key: string) => ({ reply: { content: `The answer for ${key}.\n\nIt has two paragraphs, both committed.` } });

/** Binds a Run's scenario (one tool call, then the answer) and posts its question; resolves with the Run id. */
async function ask(key: string, opts: { toolSleepMs: number; modelDelayMs: number }): Promise<string> {
  await t.setScenario(
    {
      steps: [
        {
          reply: { content: '', toolCalls: [{ name: 'record_effect', arguments: { tag: key, sleepMs: opts.toolSleepMs } }] },
          delayMs: opts.modelDelayMs,
        },
        { ...answer(key), delayMs: opts.modelDelayMs },
      ],
      then: 'error',
    },
    key,
  );
  const admitted = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does DIA hold?` });
  expect(admitted.status).toBe(201);
  return admitted.body.runId;
}

/** Waits until every partition consumer of the projector has delivered and acknowledged everything. */
async function projectorDrained(): Promise<void> {
  await eventually(
    async () => {
      const infos = await Promise.all(durableNamesOf(t.log.space, 'projector').map((d) => t.log.jsm.consumers.info(t.log.space.stream, d)));
      return infos.every((i) => i.num_pending === 0 && i.num_ack_pending === 0) ? true : null;
    },
    120_000,
    "the projector's partitions to drain",
  );
}

/** Rebuilds the projections from the log and expects them identical to the live ones (K11). */
async function expectRebuildIdentical(name: string): Promise<void> {
  await projectorDrained();
  const target = `rp_${t.tag}_${name}`;
  try {
    const rebuilt = await rebuildProjections({ log: t.log, databaseUrl: t.env.DATABASE_URL!, targetDatabase: target });
    expect(rebuilt.differences).toEqual([]);
    expect(rebuilt.identicalToLive).toBe(true);
  } finally {
    await dropDatabase(t.env.DATABASE_URL!.replace(/\/[^/]+$/, `/${target}`));
  }
}

/** The writer instances of a Run's runtime events. */
const runtimeWriters = (events: StoredEvent[]) => new Set(events.filter((e) => e.event.owner === 'runtime').map((e) => e.event.writer?.instance));
/**
 * True when the runtime `instance` executed the Run: it wrote on the Run's runtime subject, or a
 * fence names it as the lease's holder (a runtime takes the lease in the bucket first and records
 * `lease.granted` with its first decision: one killed in between held the Run with nothing written).
 */
const executedBy = (events: StoredEvent[], instance: string) =>
  runtimeWriters(events).has(instance) ||
  events.some((e) => e.event.type === 'run.fenced' && e.event.data.fencedSubject === 'runtime' && e.event.data.holder?.instance === instance);

/**
 * Whether a Run's tool call was dispatched by the tools replica `killed` and got an `unknown`
 * receipt: it was executing when that replica was killed, so its outcome is not known and it is not
 * run again (K5).
 */
function unknownOnKilledTools(events: StoredEvent[], killed: string): boolean {
  const byKilled = new Set(
    events
      .filter((e) => e.event.type === 'tool.call.dispatched' && e.event.writer?.instance === killed)
      .flatMap((e) => (e.event.type === 'tool.call.dispatched' ? [e.event.data.toolCallId] : [])),
  );
  return events.some((e) => e.event.type === 'tool.call.receipt' && e.event.data.status === 'unknown' && byKilled.has(e.event.data.toolCallId));
}

describe('partitioned ownership with several replicas of every service', () => {
  it('(a) with 3 replicas of every service, 30 Runs complete, each settles once, nothing is asked or executed twice, a rebuild is identical', async () => {
    for (const [service, n] of Object.entries(REPLICAS) as [ServiceName, number][]) {
      const bodies = await eventually(() => coveredBy(service, n), 30_000, `${service}'s partitions shared`);
      process.stdout.write(`PARTITIONS | ${service}: ${bodies.map((b) => `[${b.partitions.join(',')}]`).join(' ')}\n`);
    }
    const started = Date.now();
    const keys = Array.from({ length: 30 }, (_, i) => `a${i}-${t.tag}`);
    const runIds = await Promise.all(keys.map((k) => ask(k, { toolSleepMs: 100, modelDelayMs: 50 })));
    const settled = await Promise.all(runIds.map((id) => waitForSettled(t, id, 240_000)));
    process.stdout.write(`PARTITIONS | (a) 30 Runs settled in ${Date.now() - started} ms with 3 replicas of every service\n`);
    await sleep(1_000); // room for a repeated write to show up
    const executors = new Set<string | undefined>();
    for (const [i, runId] of runIds.entries()) {
      const events = await t.log.readRun(runId);
      const o = outcomeOf(events);
      expect({ runId, settlements: o.settlements, outcome: o.outcome }).toEqual({ runId, settlements: 1, outcome: 'completed' });
      expect(o.duplicateEventIds).toEqual([]);
      expect(await modelRequestsFor(t, keys[i]!)).toBe(2);
      expect(o.turnsRequested).toBe(2);
      expect(effectsOf(effectFile, runId)).toHaveLength(1);
      expect(o.receipts).toBe(1);
      for (const w of runtimeWriters(events)) executors.add(w);
      expect(settled[i]!.length).toBeGreaterThan(0);
    }
    // the Runs were spread over the runtime replicas by their partitions
    const runtimes = (await partitionsOf('runtime')).map((b) => b.instance);
    expect([...executors].filter((e) => runtimes.includes(e!)).length).toBeGreaterThanOrEqual(2);
    await expectRebuildIdentical('rebuild_a');
  }, 420_000);

  it('(b) kill -9 of one runtime, one tools, one projector and one lifecycle mid-load: only the killed runtime’s Runs are interrupted, the partitions move', async () => {
    const victims = ['runtime', 'tools', 'projector', 'lifecycle'] as const;
    const instances = Object.fromEntries(
      await Promise.all(
        victims.map(async (s) => {
          const body = (await (await fetch(`${t.stack.replicas.get(s)![1]!.url}/partitions`)).json()) as PartitionsBody;
          return [s, body] as const;
        }),
      ),
    ) as Record<(typeof victims)[number], PartitionsBody>;
    const keys = Array.from({ length: 30 }, (_, i) => `b${i}-${t.tag}`);
    const runIds = await Promise.all(keys.map((k) => ask(k, { toolSleepMs: 1_500, modelDelayMs: 1_000 })));
    // mid-load: once some Runs are executing (a model turn requested by the runtime about to die)
    await eventually(
      async () => {
        const events = await Promise.all(runIds.map((id) => t.log.readRun(id)));
        const busy = events.filter((ev) => ev.some((e) => e.event.type === 'model.turn.requested'));
        const onVictim = events.filter((ev) => runtimeWriters(ev).has(instances.runtime.instance) && !ev.some((e) => e.event.type === 'run.settled'));
        return busy.length >= 10 && onVictim.length >= 1 ? true : null;
      },
      120_000,
      'Runs executing on every runtime',
    );
    const killedAt = Date.now();
    await Promise.all(victims.map((s) => kill9(t, s, 1)));
    // the killed replicas' partitions move to the live ones
    const moved = await Promise.all(
      victims.map(async (s) => {
        await eventually(() => coveredBy(s, REPLICAS[s] - 1), 60_000, `${s}'s partitions moved`);
        return [s, Date.now() - killedAt] as const;
      }),
    );
    for (const [s, ms] of moved)
      process.stdout.write(
        `PARTITIONS | (b) kill -9 ${s}#2 (owned [${instances[s].partitions.join(',')}]): every partition owned by the 2 live replicas ${ms} ms after the kill (member TTL ${MEMBER_TTL_MS} ms)\n`,
      );
    for (const [, ms] of moved) expect(ms).toBeLessThan(MEMBER_TTL_MS * 4);
    const settledAt: number[] = [];
    const outcomes = await Promise.all(
      runIds.map(async (id) => {
        const events = await waitForSettled(t, id, 240_000);
        settledAt.push(Date.now() - killedAt);
        return events;
      }),
    );
    await sleep(2_000);
    let interrupted = 0;
    let unknownTools = 0;
    for (const [i, runId] of runIds.entries()) {
      const events = await t.log.readRun(runId);
      const o = outcomeOf(events);
      expect(o.settlements).toBe(1);
      expect(o.duplicateEventIds).toEqual([]);
      const onVictim = executedBy(events, instances.runtime.instance);
      if (o.outcome === 'interrupted') {
        interrupted++;
        // the Run's events and any fence's holder say, on a failure, who held it
        const held = events.map((e) => (e.event.type === 'run.fenced' ? `run.fenced:${e.event.data.holder?.instance ?? 'none'}` : e.event.type));
        expect({ runId, onVictim, victim: instances.runtime.instance, held }).toEqual({
          runId,
          onVictim: true,
          victim: instances.runtime.instance,
          held,
        });
      } else if (o.outcome === 'partial' && unknownOnKilledTools(events, instances.tools.instance)) {
        // its tool call was executing on the killed tools replica: the outcome is unknown and the
        // call is not run again (K5), so the Run truthfully settles partial
        unknownTools++;
      } else {
        const types = events.map((e) => `${e.event.type}${e.event.type === 'tool.call.receipt' ? `:${e.event.data.status}` : ''}`);
        expect({ runId, outcome: o.outcome, types }).toEqual({ runId, outcome: 'completed', types });
      }
      // nothing asked or executed twice: at most one model request per recorded turn (the killed
      // runtime may have recorded a turn it never sent), exactly one for a completed Run; a tool at most once
      const asked = await modelRequestsFor(t, keys[i]!);
      expect(asked).toBeLessThanOrEqual(o.turnsRequested);
      if (o.outcome === 'completed') expect(asked).toBe(o.turnsRequested);
      expect(effectsOf(effectFile, runId).length).toBeLessThanOrEqual(1);
      if (o.outcome === 'completed') expect(o.receipts).toBe(1);
      expect(outcomes[i]!.length).toBeGreaterThan(0);
    }
    settledAt.sort((a, b) => a - b);
    process.stdout.write(
      `PARTITIONS | (b) 30 Runs: ${interrupted} interrupted (all on the killed runtime), ${unknownTools} partial (a tool call in flight on the killed tools replica, outcome unknown), ${30 - interrupted - unknownTools} completed; last settled ${settledAt.at(-1)} ms after the kills\n`,
    );
    expect(interrupted).toBeGreaterThanOrEqual(1);
    await expectRebuildIdentical('rebuild_b');
  }, 600_000);

  it('(c) a runtime started later takes a fair share of the partitions and executes Runs of them', async () => {
    const startedAt = Date.now();
    const added = await t.stack.startService('runtime');
    const ready = Date.now() - startedAt;
    await eventually(() => coveredBy('runtime', 3), 30_000, 'the new runtime to take a share');
    const body = (await (await fetch(`${added.url}/partitions`)).json()) as PartitionsBody;
    process.stdout.write(
      `PARTITIONS | (c) a new runtime owns [${body.partitions.join(',')}] of ${P}, ${Date.now() - startedAt} ms after it was started (ready after ${ready} ms)\n`,
    );
    expect(body.partitions.length).toBeGreaterThanOrEqual(Math.floor(P / 3));
    const keys = Array.from({ length: 16 }, (_, i) => `c${i}-${t.tag}`);
    const runIds = await Promise.all(keys.map((k) => ask(k, { toolSleepMs: 50, modelDelayMs: 0 })));
    const events = await Promise.all(runIds.map((id) => waitForSettled(t, id, 180_000)));
    for (const ev of events) expect(outcomeOf(ev).outcome).toBe('completed');
    expect(events.filter((ev) => runtimeWriters(ev).has(body.instance)).length).toBeGreaterThan(0);
  }, 300_000);

  it('(d) a replica stopped with SIGTERM deregisters: its partitions move at once, not after the member TTL, and Runs of them complete', async () => {
    const before = (await partitionsOf('tools')).length;
    const leaving = t.stack.replicas.get('tools')![0]!;
    const body = (await (await fetch(`${leaving.url}/partitions`)).json()) as PartitionsBody;
    const stoppedAt = Date.now();
    await leaving.stop();
    const exited = Date.now() - stoppedAt;
    await eventually(() => coveredBy('tools', before - 1), 30_000, "the stopped replica's partitions moved");
    const ms = Date.now() - stoppedAt;
    process.stdout.write(
      `PARTITIONS | (d) SIGTERM tools (owned [${body.partitions.join(',')}]): exited after ${exited} ms, every partition owned by the others ${ms} ms after the signal\n`,
    );
    expect(ms).toBeLessThan(exited + MEMBER_TTL_MS);
    const keys = Array.from({ length: 8 }, (_, i) => `d${i}-${t.tag}`);
    const runIds = await Promise.all(keys.map((k) => ask(k, { toolSleepMs: 50, modelDelayMs: 0 })));
    for (const id of runIds) expect(outcomeOf(await waitForSettled(t, id, 120_000)).outcome).toBe('completed');
    for (const id of runIds) expect(effectsOf(effectFile, id)).toHaveLength(1);
  }, 300_000);

  it('(e) a replica frozen with SIGSTOP loses its partitions like a dead one, and takes a share again when it is thawed; projections stay identical to a rebuild', async () => {
    const frozen = t.stack.replicas.get('projector')![0]!;
    const body = (await (await fetch(`${frozen.url}/partitions`)).json()) as PartitionsBody;
    const n = t.stack.replicas.get('projector')!.length;
    frozen.child.kill('SIGSTOP');
    const frozenAt = Date.now();
    try {
      // (the frozen replica is not asked: it would not answer)
      await eventually(() => coveredBy('projector', n - 1, [frozen]), 60_000, "the frozen replica's partitions moved");
      const moved = Date.now() - frozenAt;
      const keys = Array.from({ length: 6 }, (_, i) => `e${i}-${t.tag}`);
      const runIds = await Promise.all(keys.map((k) => ask(k, { toolSleepMs: 50, modelDelayMs: 0 })));
      for (const id of runIds) expect(outcomeOf(await waitForSettled(t, id, 120_000)).outcome).toBe('completed');
      frozen.child.kill('SIGCONT');
      const thawedAt = Date.now();
      await eventually(() => coveredBy('projector', n), 60_000, 'the thawed replica to take a share again');
      process.stdout.write(
        `PARTITIONS | (e) SIGSTOP projector (owned [${body.partitions.join(',')}]): partitions moved ${moved} ms after the freeze; after SIGCONT it owned a share again within ${Date.now() - thawedAt} ms\n`,
      );
      expect(moved).toBeLessThan(MEMBER_TTL_MS * 4);
    } finally {
      frozen.child.kill('SIGCONT');
    }
    await expectRebuildIdentical('rebuild_e');
  }, 300_000);
});
