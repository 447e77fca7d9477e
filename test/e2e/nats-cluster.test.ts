/**
 * Runplane on a 3-node JetStream cluster, with the faults really injected (docs/operations.md "The NATS cluster"; K5, K6, K10,
 * K11): the whole stack runs against three nats-server processes this file starts on loopback
 * (TestNatsCluster), the services are given every node's URL, and the stream, the KV buckets and
 * the object store are created at 3 replicas (`RUNPLANE_NATS_REPLICAS=3`). Then, while Runs
 * execute (each a model turn, a tool call, a model turn): one node is killed with SIGKILL (the
 * stream's leader, the worst node to lose); every node is restarted in turn (a rolling restart);
 * the stream's leader is moved (`$JS.API.STREAM.LEADER.STEPDOWN`); the node the runtime is on hangs
 * (SIGSTOP: its connections stay open, so only the clients' pings can tell). Each Run must settle exactly
 * once, each tool run once and the model asked exactly as often as its script says, and every fact
 * committed before the fault must still be in the log after it. Times are printed (FAULT-MATRIX).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { StoredEvent } from '@runplane/contracts';
import { bucketName, BUS_BUCKETS } from '@runplane/eventlog';
import { effectsOf, lostFacts, modelRequestsFor, outcomeOf, reportRow, sleep, until, waitForSettled, waitForType } from '../support/faults.js';
import { recordServer, TestNatsCluster } from '../support/nats-server.js';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const dir = mkdtempSync(join(tmpdir(), 'rp-natscluster-'));
const effectFile = join(dir, 'effects.log');
const RUNS = 30;

let cluster: TestNatsCluster;
let t: TestStack;

beforeAll(async () => {
  t = await startTestStack(
    'natscl',
    {
      RUNPLANE_NATS_REPLICAS: '3',
      RUNPLANE_TEST_TOOLS: 'record_effect',
      RUNPLANE_RECORD_EFFECT_FILE: effectFile,
      RUNPLANE_ACK_WAIT_MS: '5000',
      RUNPLANE_TOOL_TIMEOUT_MS: '30000',
    },
    { nats: async (config, auth) => (cluster = await TestNatsCluster.start({ config, auth })).url },
  );
  recordServer(`a 3-node cluster of nats-server ${cluster.nodes[0]!.version} (${cluster.url})`);
}, 180_000);

afterAll(async () => {
  await t?.stop();
  await cluster?.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

/** STREAM.INFO's cluster part, as the admin sees it (null while the stream has no leader). */
async function clusterOf(stream: string): Promise<{ leader?: string; replicas?: { name: string; current: boolean; offline?: boolean }[] } | null> {
  try {
    const info = await t.log.jsm.streams.info(stream);
    return (info.cluster as { leader?: string; replicas?: { name: string; current: boolean; offline?: boolean }[] } | undefined) ?? null;
  } catch {
    return null;
  }
}

/** Every stream Runplane keeps: the Run stream and each bucket's. */
const allStreams = () => [
  t.env.RUNPLANE_STREAM!,
  ...Object.entries(BUS_BUCKETS).map(
    ([b, spec]) => `${spec.kind === 'kv' ? 'KV' : 'OBJ'}_${bucketName({ prefix: t.env.RUNPLANE_SUBJECT_PREFIX! }, b as keyof typeof BUS_BUCKETS)}`,
  ),
];

/** Waits until every stream has a leader and all its peers are current (a restarted node caught up). */
async function allCurrent(timeoutMs = 60_000): Promise<number> {
  const started = Date.now();
  for (;;) {
    const states = await Promise.all(allStreams().map((s) => clusterOf(s)));
    if (states.every((c) => c?.leader && (c.replicas ?? []).length === 2 && c.replicas!.every((r) => r.current && !r.offline)))
      return Date.now() - started;
    if (Date.now() - started > timeoutMs) throw new Error(`streams not all current within ${timeoutMs} ms: ${JSON.stringify(states)}`);
    await sleep(200);
  }
}

/** A tool call (record_effect sleeping `toolMs`), then a two-paragraph answer after `answerDelayMs`. */
const script = (key: string, toolMs: number, answerDelayMs: number) => ({
  steps: [
    { reply: { content: '', toolCalls: [{ name: 'record_effect', arguments: { tag: key, sleepMs: toolMs } }] }, delayMs: 300 },
    { reply: { content: `The answer for ${key}.\n\nIt has two paragraphs, both committed.` }, delayMs: answerDelayMs },
  ],
  then: 'error',
});

/** Admits `n` Runs, each with its own script; resolves with their keys and Run ids. */
async function admitRuns(label: string, n: number, toolMs: number, answerDelayMs: number): Promise<{ key: string; runId: string }[]> {
  const runs: { key: string; runId: string }[] = [];
  for (let i = 0; i < n; i++) {
    const key = `${label}${i}-${t.tag}`;
    await t.setScenario(script(key, toolMs, answerDelayMs), key);
    const admitted = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does DIA hold?` });
    expect(admitted.status).toBe(201);
    runs.push({ key, runId: admitted.body.runId });
  }
  return runs;
}

/** The log of every Run, read through the fault (a read that fails is tried again). */
const readAll = (runs: { runId: string }[]) => Promise.all(runs.map((r) => until(t, r.runId, () => true, 60_000, 'a read')));

/**
 * What every cluster fault test asserts of its Runs once the fault is over: each settled exactly
 * once, no tool executed twice, the model asked exactly twice per Run, no event id stored twice,
 * nothing committed before the fault lost. Prints one FAULT-MATRIX row; returns the outcomes.
 */
async function checkRuns(
  fault: string,
  runs: { key: string; runId: string }[],
  before: StoredEvent[][],
  faultAt: number,
): Promise<Record<string, number>> {
  await Promise.all(runs.map((r) => waitForSettled(t, r.runId, 120_000)));
  const final = await readAll(runs);
  // when each Run settled after the fault (the settlement's own time), and the longest pause
  // between two consecutive events of a Run across the fault: what the fault cost
  const after = final
    .map((events) => Date.parse(events.find((e) => e.event.type === 'run.settled')!.event.occurredAt) - faultAt)
    .sort((a, b) => a - b);
  const stalls = final.map((events) => {
    const times = events.map((e) => Date.parse(e.event.occurredAt));
    let longest = 0;
    for (let i = 1; i < times.length; i++)
      if (times[i]! >= faultAt && times[i - 1]! <= faultAt + 60_000) longest = Math.max(longest, times[i]! - times[i - 1]!);
    return longest;
  });
  const q = (xs: number[], p: number) => xs[Math.min(xs.length - 1, Math.floor(p * xs.length))]!;
  const settleMs = after[after.length - 1]!;
  process.stdout.write(
    `CLUSTER | ${fault}: settled after the fault p50 ${q(after, 0.5)} ms, p90 ${q(after, 0.9)} ms, max ${settleMs} ms; longest pause between two events of a Run ${Math.max(...stalls)} ms\n`,
  );
  const outcomes: Record<string, number> = {};
  let duplicates = 0;
  let lost = 0;
  const problems: string[] = [];
  for (const [i, r] of runs.entries()) {
    const o = outcomeOf(final[i]!);
    const effects = effectsOf(effectFile, r.runId).length;
    const asked = await modelRequestsFor(t, r.key);
    const gone = lostFacts(before[i]!, final[i]!);
    outcomes[`${o.settlements}x${o.outcome}`] = (outcomes[`${o.settlements}x${o.outcome}`] ?? 0) + 1;
    duplicates += Math.max(0, effects - 1) + Math.max(0, asked - 2) + o.duplicateEventIds.length;
    lost += gone.length;
    if (o.settlements !== 1 || effects > 1 || asked > 2 || o.duplicateEventIds.length || gone.length || o.dispatched > 1) {
      problems.push(`${r.runId}: ${JSON.stringify({ ...o, effects, asked, lost: gone })}`);
    }
  }
  reportRow({
    fault,
    runs: runs.length,
    settled: Object.entries(outcomes)
      .map(([k, v]) => `${v} x ${k.replace(/^1x/, '')}`)
      .join(', '),
    duplicates,
    lost,
    settleMs,
  });
  expect(problems).toEqual([]);
  expect(duplicates).toBe(0);
  expect(lost).toBe(0);
  return outcomes;
}

describe('Runplane on a 3-node JetStream cluster (K5, K6, K10, K11)', () => {
  it('creates the Run stream, every KV bucket and the object store with 3 replicas, each with a leader and two current followers; KV reads go to the leader', async () => {
    for (const s of allStreams()) {
      const info = await t.log.jsm.streams.info(s);
      expect({ stream: s, replicas: info.config.num_replicas }).toEqual({ stream: s, replicas: 3 });
      // a follower behind may answer a direct get: leases and claims are read from the leader
      if (s.startsWith('KV_')) expect({ stream: s, direct: info.config.allow_direct }).toEqual({ stream: s, direct: false });
    }
    await allCurrent();
  });

  it(`kill -9 of the stream's leader node while ${RUNS} Runs execute: each settles once, no effect twice, no fact lost`, async () => {
    const runs = await admitRuns('kill', RUNS, 1_500, 1_000);
    // mid-Run: wait until a third of the Runs have a tool call under way
    const deadline = Date.now() + 60_000;
    while (runs.filter((r) => effectsOf(effectFile, r.runId).length > 0).length < RUNS / 3) {
      if (Date.now() > deadline) throw new Error('the Runs never got to their tool calls');
      await sleep(100);
    }
    const before = await readAll(runs);
    const leader = (await clusterOf(t.env.RUNPLANE_STREAM!))!.leader!;
    const victim = cluster.byName(leader);
    const faultAt = Date.now();
    await victim.kill();
    // a new leader of the Run stream: how long appends had to wait
    let newLeader: string | undefined;
    while (!(newLeader = (await clusterOf(t.env.RUNPLANE_STREAM!))?.leader) || newLeader === leader) await sleep(100);
    const electedMs = Date.now() - faultAt;
    const outcomes = await checkRuns(`NATS node ${leader} (stream leader) kill -9, cluster of 3`, runs, before, faultAt);
    process.stdout.write(
      `CLUSTER | kill -9 of ${leader}: new stream leader ${newLeader} after ${electedMs} ms; outcomes ${JSON.stringify(outcomes)}\n`,
    );
    expect(newLeader).not.toBe(leader);
    // back to three nodes for the next case; it catches up from the others
    await victim.restart();
    const caughtUpMs = await allCurrent();
    process.stdout.write(`CLUSTER | ${leader} restarted: every stream current on 3 nodes after ${caughtUpMs} ms\n`);
  }, 300_000);

  it(`a rolling restart of all three nodes under load (${RUNS} Runs): each settles once, no effect twice, no fact lost`, async () => {
    const runs = await admitRuns('roll', RUNS, 1_000, 800);
    await waitForType(t, runs[0]!.runId, 'model.turn.requested', 60_000);
    const before = await readAll(runs);
    const faultAt = Date.now();
    const steps: string[] = [];
    for (const [i, node] of cluster.nodes.entries()) {
      const started = Date.now();
      await node.restart();
      const currentMs = await allCurrent();
      steps.push(`${cluster.names[i]} down+up ${Date.now() - started - currentMs} ms, current after ${currentMs} ms`);
    }
    process.stdout.write(`CLUSTER | rolling restart: ${steps.join('; ')}\n`);
    await checkRuns('NATS rolling restart of 3 nodes (SIGTERM, restart, caught up, next)', runs, before, faultAt);
  }, 300_000);

  it("the Run stream's leader moved mid-Run (STREAM.LEADER.STEPDOWN as admin): each Run completes once, no effect twice", async () => {
    const runs = await admitRuns('step', 6, 2_000, 500);
    const deadline = Date.now() + 60_000;
    while (!runs.every((r) => effectsOf(effectFile, r.runId).length > 0)) {
      if (Date.now() > deadline) throw new Error('the Runs never got to their tool calls');
      await sleep(100);
    }
    const before = await readAll(runs);
    const stream = t.env.RUNPLANE_STREAM!;
    const leader = (await clusterOf(stream))!.leader!;
    const faultAt = Date.now();
    const reply = await t.log.nc.request(`$JS.API.STREAM.LEADER.STEPDOWN.${stream}`, '', { timeout: 10_000 });
    expect(reply.json<{ success?: boolean; error?: unknown }>()).toMatchObject({ success: true });
    let newLeader: string | undefined;
    while (!(newLeader = (await clusterOf(stream))?.leader) || newLeader === leader) await sleep(50);
    process.stdout.write(`CLUSTER | stream leader moved ${leader} -> ${newLeader} in ${Date.now() - faultAt} ms (mid tool call of 6 Runs)\n`);
    const outcomes = await checkRuns(`stream leader step-down ${leader} -> ${newLeader}`, runs, before, faultAt);
    // a leader change is not a loss: nothing is interrupted
    expect(outcomes).toEqual({ '1xcompleted': runs.length });
  }, 180_000);

  it('a node that hangs with its connections open (SIGSTOP of the node the runtime is on): every service leaves it within seconds, and the Runs admitted meanwhile complete once', async () => {
    await allCurrent();
    const services = [...t.stack.services.entries()];
    /** The node a service's connection is on, as its readiness check reports it (200 or 503). */
    const nodeOf = async (url: string): Promise<string | null> => {
      const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(10_000) });
      const body = (await res.json()) as { details?: { nats?: { server?: string } }; checks?: { nats?: { server?: string } } };
      return res.ok ? (body.details?.nats?.server ?? null) : null;
    };
    const before = new Map(await Promise.all(services.map(async ([name, p]) => [name, await nodeOf(p.url)] as const)));
    const victimName = before.get('runtime')!;
    expect(cluster.names).toContain(victimName);
    const victim = cluster.byName(victimName);
    const onVictim = [...before].filter(([, node]) => node === victimName).map(([name]) => name);
    // Runs in flight through the fault (their answer 10 s away), each watched by an observer's event
    // stream (SSE, publication): a stream's ordered consumer lives on one node, a third of them on
    // the one that hangs (a new user's trial saw such streams silent until the thaw)
    const watched = await admitRuns('frzwatch', 6, 200, 10_000);
    const streamed = new Map<string, number>(); // Run id -> when its stream delivered run.settled
    const abort = new AbortController();
    const resumed: string[] = [];
    // each stream followed as a client does (the CLI's `observerResume`): one the server ends or that
    // fails before the settlement is opened again after the last event it delivered
    const streams = watched.map(async (r) => {
      let last = 0;
      while (!abort.signal.aborted && !streamed.has(r.runId)) {
        try {
          const { ended } = await t.client.streamEvents(r.runId, {
            lastEventId: last,
            signal: abort.signal,
            onEvent: (e) => {
              last = e.seq;
              if (e.event.type === 'run.settled') streamed.set(r.runId, Date.now());
            },
          });
          if (ended === 'complete') return;
        } catch {
          // a stream that failed (publication's NATS connection moving) is resumed like one ended
        }
        if (!streamed.has(r.runId) && !abort.signal.aborted) {
          resumed.push(r.runId);
          await sleep(500);
        }
      }
    });
    await Promise.all(watched.map((r) => waitForType(t, r.runId, 'model.turn.requested', 30_000)));
    const watchedBefore = await readAll(watched);
    const faultAt = Date.now();
    await victim.freeze();
    try {
      const runs = await admitRuns('freeze', 6, 200, 200);
      // every service answers ready again, from another node
      const moved = new Map<string, number>();
      const left = await eventually(
        async () => {
          const now = await Promise.all(services.map(async ([name, p]) => [name, await nodeOf(p.url).catch(() => null)] as const));
          for (const [name, node] of now) if (node !== null && node !== victimName && !moved.has(name)) moved.set(name, Date.now() - faultAt);
          return now.every(([, node]) => node !== null && node !== victimName) ? Date.now() - faultAt : null;
        },
        60_000,
        `every service on a node other than the frozen ${victimName}`,
      );
      process.stdout.write(
        `CLUSTER | SIGSTOP of ${victimName} (the runtime's node; the services on it: ${onVictim.join(', ')}): every service ready on another node ${left} ms after (${[...moved].map(([n, ms]) => `${n} ${ms} ms`).join(', ')})\n`,
      );
      const outcomes = await checkRuns(
        `NATS node ${victimName} frozen (SIGSTOP, connections left open), cluster of 3`,
        runs,
        runs.map(() => []),
        faultAt,
      );
      expect(outcomes).toEqual({ '1xcompleted': runs.length });
      // the Runs in flight through the fault completed too, each once, nothing lost
      expect(await checkRuns(`NATS node ${victimName} frozen, Runs in flight`, watched, watchedBefore, faultAt)).toEqual({
        '1xcompleted': watched.length,
      });
      // every observer's stream delivered its Run's settlement while the node still hangs, within
      // 20 s of the settlement (its own time in the log)
      const settledAt = new Map(
        (await readAll(watched)).map((events, i) => [
          watched[i]!.runId,
          Date.parse(events.find((e) => e.event.type === 'run.settled')!.event.occurredAt),
        ]),
      );
      await eventually(
        async () => (watched.every((r) => streamed.has(r.runId)) ? true : null),
        45_000,
        'every observed stream delivering run.settled',
      );
      const lags = watched.map((r) => streamed.get(r.runId)! - settledAt.get(r.runId)!);
      process.stdout.write(
        `CLUSTER | SIGSTOP of ${victimName}: observers' streams delivered run.settled ${lags.join(', ')} ms after each settlement (streams resumed: ${resumed.length})\n`,
      );
      expect(lags.filter((ms) => ms > 20_000)).toEqual([]);
    } finally {
      abort.abort();
      await Promise.all(streams);
      victim.thaw();
    }
    await allCurrent();
  }, 300_000);
});
