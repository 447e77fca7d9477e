/**
 * A settlement closes the Run's log to its executors at the log itself (K6, K9): an executor
 * append decided before the settlement (its conditional append expecting a sequence read before
 * it, like a stale runtime or tools worker) is refused by JetStream after it; a late observation
 * (`tool.call.late_observed`) is still appended after the settlement. On the machine's
 * nats-server 2.9.10 (which ignores the wildcard expectation header) and on the current release,
 * each with the whole stack on it.
 *
 * A Run that finishes on its own closes itself, with no fence: its runtime subject
 * ends in the runtime's own `run.execution.finished` (every runtime append decided from a read
 * before it expects an older sequence and is refused; from a read after it the runtime decides
 * nothing), and every proposed tool call had its receipt then (every tools append decided from a
 * read before the last receipt is refused; from a read after it the tools decide nothing). The
 * tests take the stale reads a real executor could decide from, try the appends it would make
 * from them after the settlement, and check that the real deciders decide nothing from the
 * reads that the log would accept. Recovery is not needed for such a Run to settle at all.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { contextFrom, makeEvent, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { AppendConflict, runSubject } from '@runplane/eventlog';
import { foldRun, type RunFacts } from '@runplane/run-facts';
import { decide as runtimeDecide } from '@runplane/app-runtime';
import { decide as toolsDecide } from '@runplane/app-tools';
import { natsServerBinariesUnderTest, recordServer, TestNatsServer } from '../support/nats-server.js';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type) as (StoredEvent & { event: Extract<RunEvent, { type: T }> })[];

/** What a stale executor holds: the fold it decided from (not settled; the runtime's before its finish, the tools' with a call without a receipt). */
interface Stale {
  facts: RunFacts;
  readAt: number;
}

/** The appends a stale runtime and a stale tools worker would make from `facts`: the next model turn, a dispatch. */
function staleAppends(facts: RunFacts): { runtime: RunEvent; tools: RunEvent } {
  const ctx = contextFrom(facts.lastEvent!);
  const turn = facts.turns.length + 1;
  return {
    runtime: makeEvent('model.turn.requested', ctx, `stale/${turn}`, { turn, model: 'stale' }, new Date()),
    tools: makeEvent('tool.call.dispatched', ctx, 'stale-call', { toolCallId: 'stale-call', name: 'list_funds' }, new Date()),
  };
}

/** Appends both stale events with the expectations the stale fold holds; returns what the log said. */
async function tryStale(t: TestStack, stale: { runtime: Stale; tools: Stale }): Promise<{ runtime: unknown; tools: unknown }> {
  const attempt = (facts: RunFacts, subject: 'runtime' | 'tools') =>
    t.log.append(staleAppends(facts)[subject], facts.lastSeqByOwner[subject], [], 1).then(
      (r) => ({ stored: r.seq }),
      (e: unknown) => e,
    );
  return { runtime: await attempt(stale.runtime.facts, 'runtime'), tools: await attempt(stale.tools.facts, 'tools') };
}

/** The latest read from which each executor could still decide something the log would take from it. */
function staleOf(facts: RunFacts, into: { runtime: Stale | null; tools: Stale | null }): void {
  if (!facts.admitted || !facts.lastEvent || facts.settled) return;
  if (!facts.finished) into.runtime = { facts, readAt: Date.now() };
  if ([...facts.toolCalls.values()].some((c) => !c.receipt) || facts.turns.length === 0) into.tools = { facts, readAt: Date.now() };
}

/**
 * What the real deciders decide from a read in which the Run finished and every call has its
 * receipt (a read the log would accept an append from, the Run closing itself): nothing, whatever
 * wakes them (the runtime's wake, a tools wake with every claim looked up and gone, an execution
 * outcome of each call).
 */
function decidedAfterClose(facts: RunFacts): RunEvent[] {
  const now = new Date();
  const claims = Object.fromEntries([...facts.toolCalls.keys()].map((id) => [id, null]));
  return [
    ...runtimeDecide(facts, { type: 'Wake', model: 'scripted' }, now),
    ...toolsDecide(facts, { type: 'Wake', claims }, now),
    ...[...facts.toolCalls.values()]
      .filter((c) => c.receipt?.status !== 'unknown')
      .flatMap((c) =>
        toolsDecide(
          facts,
          { type: 'ToolExecuted', toolCallId: c.toolCallId, outcome: { kind: 'returned', json: '{}' }, durationMs: 1, resultBucket: 'x' },
          now,
        ),
      ),
  ];
}

for (const server of natsServerBinariesUnderTest())
  (server.skip ? describe.skip : describe)(server.title, () => {
    let t: TestStack;
    let nats: TestNatsServer | null = null;
    const dir = mkdtempSync(join(tmpdir(), 'rp-closure-'));
    beforeAll(async () => {
      recordServer(server.title);
      // a server of this file's own from that release, with the stack's users and permissions
      t = await startTestStack(
        'closure',
        {
          RUNPLANE_LEASE_TTL_MS: '1500',
          RUNPLANE_RECOVERY_SWEEP_MS: '100',
          RUNPLANE_ACK_WAIT_MS: '2000',
          RUNPLANE_TEST_TOOLS: 'record_effect',
          RUNPLANE_RECORD_EFFECT_FILE: join(dir, 'effects.log'),
          // long enough for a real holdings read on a loaded 2-core machine (the racing Runs read DIA's file, three at
          // once: a loaded CI saw one pass 6 s, so its receipt was `unknown` and the Run rightly settled partial);
          // the late-observation test's call sleeps well past it
          RUNPLANE_TOOL_TIMEOUT_MS: '15000',
          RUNPLANE_TOOL_ABANDON_MS: '30000',
        },
        { nats: async (config, auth) => (nats = await TestNatsServer.start({ bin: server.bin, config, auth })).url },
      );
      expect(nats!.version).toBe(server.version);
    }, 120_000);
    afterAll(async () => {
      await t?.stop();
      await nats?.cleanup();
      rmSync(dir, { recursive: true, force: true });
    });

    it('with recovery stopped, a W1 Run still settles, with no fence: every executor append decided from a read before the close is refused after the settlement, and from a read after it the deciders decide nothing', async () => {
      // recovery is off the happy path: the Run is executed, closes itself and settles without it
      await t.stack.stopService('recovery');
      try {
        const { body } = await t.client.postMessage('conv-closure', { clientMessageId: `held-${t.tag}`, content: 'What does DIA hold?' });
        const stale: { runtime: Stale | null; tools: Stale | null } = { runtime: null, tools: null };
        let last: RunFacts | null = null;
        for (const deadline = Date.now() + 60_000; Date.now() < deadline;) {
          const facts = foldRun(body.runId, await t.log.readRun(body.runId));
          if (facts.settled) break;
          staleOf(facts, stale);
          last = facts;
        }
        const events = await t.waitForSettlement(body.runId, 10_000);
        expect(ofType(events, 'run.fenced')).toEqual([]);
        const facts = foldRun(body.runId, events);
        expect(facts.closesItself).toBe(true);
        // a Run can go from before its admission to its close between two reads of a loaded machine
        // (a CI rehearsal saw no open read at all): the latest read a stale executor could then hold
        // is the log just before the close (the finish for the runtime, the last receipt for the tools)
        const before = (seq: number): Stale => ({
          facts: foldRun(
            body.runId,
            events.filter((e) => e.seq < seq),
          ),
          readAt: 0,
        });
        stale.runtime ??= before(ofType(events, 'run.execution.finished')[0]!.seq);
        stale.tools ??= before(ofType(events, 'tool.call.receipt').at(-1)!.seq);
        const results = await tryStale(t, { runtime: stale.runtime, tools: stale.tools });
        expect(results).toMatchObject({ runtime: { kind: 'wrong-last-sequence' }, tools: { kind: 'wrong-last-sequence' } });
        // the last read before the settlement (finished or not): whatever a real executor decides from it does not land
        if (last?.closesItself) expect(decidedAfterClose(last)).toEqual([]);
        expect(decidedAfterClose(facts)).toEqual([]);
        const settled = ofType(events, 'run.settled')[0]!;
        const gaps = ofType(events, 'answer.published')[0]!.event.data.unanswered ?? [];
        expect(settled.event.data).toMatchObject({ outcome: gaps.length ? 'partial' : 'completed', unanswered: gaps });
        const after = await t.log.readRun(body.runId);
        expect(after.filter((e) => e.seq > settled.seq)).toEqual([]);
      } finally {
        await t.stack.startService('recovery');
      }
    }, 120_000);

    it('racing: stale reads taken as close to the closing as a tight loop gets are all refused after the settlement, for several Runs at once', async () => {
      const runs = await Promise.all(
        [1, 2, 3].map(
          async (i) =>
            (await t.client.postMessage('conv-closure', { clientMessageId: `race-${i}-${t.tag}`, content: 'What does DIA hold?' })).body.runId,
        ),
      );
      const outcomes = await Promise.all(
        runs.map(async (runId) => {
          // the latest fold in which each subject was still open and the Run unsettled: what a stale executor would decide from
          const stale: { runtime: Stale | null; tools: Stale | null } = { runtime: null, tools: null };
          const closedReads: RunFacts[] = [];
          let reads = 0;
          for (const deadline = Date.now() + 60_000; Date.now() < deadline;) {
            const facts = foldRun(runId, await t.log.readRun(runId));
            reads++;
            if (facts.settled) break;
            staleOf(facts, stale);
            if (facts.closesItself) closedReads.push(facts);
          }
          const events = await t.waitForSettlement(runId, 10_000);
          const settled = ofType(events, 'run.settled')[0]!;
          const finished = ofType(events, 'run.execution.finished')[0]!;
          // a Run can go from one read to its close between two reads of a loaded machine: the
          // latest read a stale executor could then hold is the log just before the close (the
          // finish for the runtime, the last receipt for the tools), which is what is tried
          const before = (seq: number): Stale => ({
            facts: foldRun(
              runId,
              events.filter((e) => e.seq < seq),
            ),
            readAt: 0,
          });
          const derived = { runtime: stale.runtime === null, tools: stale.tools === null };
          stale.runtime ??= before(finished.seq);
          stale.tools ??= before(ofType(events, 'tool.call.receipt').at(-1)!.seq);
          const results = await tryStale(t, { runtime: stale.runtime, tools: stale.tools });
          return { runId, events, settled, results, stale, reads, finished, closedReads, derived };
        }),
      );
      for (const o of outcomes) {
        // the reason rides along so a failure says why the Run did not complete
        expect({ outcome: o.settled.event.data.outcome, reason: o.settled.event.data.reason }).toEqual({
          outcome: 'completed',
          reason: expect.any(String),
        });
        expect(o.results.runtime).toBeInstanceOf(AppendConflict);
        expect(o.results.tools).toBeInstanceOf(AppendConflict);
        const after = await t.log.readRun(o.runId);
        expect(after.filter((e) => e.seq > o.settled.seq)).toEqual([]);
        // closed by itself, no fence; from every read taken between the close and the settlement the deciders decide nothing
        expect(ofType(o.events, 'run.fenced')).toEqual([]);
        for (const f of o.closedReads) expect(decidedAfterClose(f)).toEqual([]);
        const ms = (e: StoredEvent) => Date.parse(e.event.occurredAt);
        process.stdout.write(
          `${server.version}: run ${o.runId.slice(0, 8)}: ${o.reads} reads (${o.closedReads.length} between the close and the settlement); last stale runtime read at seq ${o.stale.runtime!.facts.lastSeq}${o.derived.runtime ? ' (from the log: no read caught it open)' : ''}, tools at ${o.stale.tools!.facts.lastSeq}${o.derived.tools ? ' (from the log)' : ''}; ` +
            `finished seq ${o.finished.seq} -> settled ${o.settled.seq}; finished->settled ${ms(o.settled) - ms(o.finished)} ms\n`,
        );
      }
    }, 120_000);

    it('a late observation is still appended after the settlement (the one executor fact after the close)', async () => {
      const key = `late-${t.tag}`;
      await t.setScenario(
        {
          steps: [
            { reply: { content: '', toolCalls: [{ name: 'record_effect', arguments: { tag: key, sleepMs: 19000 } }] } },
            { reply: { content: `Recorded for ${key}; its outcome is not known yet.` } },
          ],
          then: 'error',
        },
        key,
      );
      const { body } = await t.client.postMessage('conv-closure', { clientMessageId: key, content: `[${key}] record the effect` });
      const events = await t.waitForSettlement(body.runId, 60_000);
      expect(ofType(events, 'tool.call.receipt')[0]!.event.data.status).toBe('unknown');
      const settledSeq = ofType(events, 'run.settled')[0]!.seq;
      // every call had its receipt (`unknown`) when the runtime finished: the Run closed itself, no fence
      expect(ofType(events, 'run.fenced')).toEqual([]);
      const lastTools = events.filter((e) => e.subject.startsWith(runSubject(t.log.space, body.runId, 'tools'))).at(-1)!;
      expect(lastTools.event.type).toBe('tool.call.receipt');
      const late = await eventually(
        async () => ofType(await t.log.readRun(body.runId), 'tool.call.late_observed')[0] ?? null,
        30_000,
        'the late observation',
      );
      expect(late.seq).toBeGreaterThan(settledSeq);
      expect(late.event.data.status).toBe('succeeded');
      expect(late.event.prevSeq).toBe(lastTools.seq);
      expect(late.subject).toBe(lastTools.subject);
    }, 90_000);
  });
