/**
 * A settlement closes the Run's log to its executors at the log itself (K6, K9): before the
 * lifecycle settles, both executor subjects (`runtime`, `tools`) end in a fence of recovery, so an
 * executor append decided before the settlement (its conditional append expecting a sequence read
 * before it, like a stale runtime or tools worker) is refused by JetStream; a late observation
 * (`tool.call.late_observed`) is still appended after the settlement. On the machine's
 * nats-server 2.9.10 (which ignores the wildcard expectation header) and on the current release,
 * each with the whole stack on it.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { contextFrom, makeEvent, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { AppendConflict, runSubject } from '@runplane/eventlog';
import { foldRun, type RunFacts } from '@runplane/run-facts';
import { natsServerBinariesUnderTest, recordServer, TestNatsServer } from '../support/nats-server.js';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type) as (StoredEvent & { event: Extract<RunEvent, { type: T }> })[];

/** What a stale executor holds: the fold it decided from (not settled, its subject not closed). */
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
          // long enough for a real holdings read on a loaded 2-core machine (the racing Runs read DIA's file);
          // the late-observation test's call sleeps well past it
          RUNPLANE_TOOL_TIMEOUT_MS: '6000',
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

    it('an executor append built from a read after the execution finished but before the settlement is refused after the settlement, on the runtime and on the tools subject', async () => {
      // recovery is held back, so the Run cannot be closed nor settled while the stale reads are taken
      await t.stack.stopService('recovery');
      const { body } = await t.client.postMessage('conv-closure', { clientMessageId: `held-${t.tag}`, content: 'What does DIA hold?' });
      const before = await eventually(
        async () => {
          const events = await t.log.readRun(body.runId);
          return ofType(events, 'answer.published').length ? events : null;
        },
        60_000,
        'the published answer',
      );
      const facts = foldRun(body.runId, before);
      expect(facts.finished?.reason).toBe('answered');
      expect(facts.settled).toBeNull();
      expect(facts.closed).toEqual({ runtime: false, tools: false });
      await new Promise((r) => setTimeout(r, 500));
      expect(ofType(await t.log.readRun(body.runId), 'run.settled')).toHaveLength(0); // no settlement while the subjects are open

      await t.stack.startService('recovery');
      const events = await t.waitForSettlement(body.runId, 30_000);
      const results = await tryStale(t, { runtime: { facts, readAt: 0 }, tools: { facts, readAt: 0 } });
      expect(results.runtime).toBeInstanceOf(AppendConflict);
      expect(results.tools).toBeInstanceOf(AppendConflict);
      expect(results).toMatchObject({ runtime: { kind: 'wrong-last-sequence' }, tools: { kind: 'wrong-last-sequence' } });

      const fences = ofType(events, 'run.fenced');
      expect(fences.map((f) => [f.event.data.fencedSubject, f.event.data.reason])).toEqual([
        ['tools', 'settling'],
        ['runtime', 'settling'],
      ]);
      const settledSeq = ofType(events, 'run.settled')[0]!.seq;
      expect(fences.every((f) => f.seq < settledSeq)).toBe(true);
      // answered: completed, or partial when the answer lists parts it did not answer (K9)
      const gaps = ofType(events, 'answer.published')[0]!.event.data.unanswered ?? [];
      expect(ofType(events, 'run.settled')[0]!.event.data).toMatchObject({ outcome: gaps.length ? 'partial' : 'completed', unanswered: gaps });
      const after = await t.log.readRun(body.runId);
      expect(after.filter((e) => e.seq > settledSeq)).toEqual([]);
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
          let reads = 0;
          for (const deadline = Date.now() + 60_000; Date.now() < deadline;) {
            const facts = foldRun(runId, await t.log.readRun(runId));
            reads++;
            if (facts.settled) break;
            if (facts.admitted && facts.lastEvent) {
              if (!facts.closed.runtime) stale.runtime = { facts, readAt: Date.now() };
              if (!facts.closed.tools) stale.tools = { facts, readAt: Date.now() };
            }
          }
          const events = await t.waitForSettlement(runId, 10_000);
          const settled = ofType(events, 'run.settled')[0]!;
          const results = await tryStale(t, { runtime: stale.runtime!, tools: stale.tools! });
          const finished = ofType(events, 'run.execution.finished')[0]!;
          return { runId, events, settled, results, stale, reads, finished };
        }),
      );
      for (const o of outcomes) {
        expect(o.settled.event.data.outcome).toBe('completed');
        expect(o.results.runtime).toBeInstanceOf(AppendConflict);
        expect(o.results.tools).toBeInstanceOf(AppendConflict);
        const after = await t.log.readRun(o.runId);
        expect(after.filter((e) => e.seq > o.settled.seq)).toEqual([]);
        const fences = ofType(o.events, 'run.fenced');
        const ms = (e: StoredEvent) => Date.parse(e.event.occurredAt);
        process.stdout.write(
          `${server.version}: run ${o.runId.slice(0, 8)}: ${o.reads} reads; last stale runtime read at seq ${o.stale.runtime!.facts.lastSeq}, tools at ${o.stale.tools!.facts.lastSeq}; ` +
            `finished seq ${o.finished.seq} -> fences ${fences.map((f) => f.seq).join(',')} -> settled ${o.settled.seq}; ` +
            `finished->settled ${ms(o.settled) - ms(o.finished)} ms (last fence ${ms(fences.at(-1)!) - ms(o.finished)} ms after finished)\n`,
        );
      }
    }, 120_000);

    it('a late observation is still appended after the settlement (the one executor fact after the close)', async () => {
      const key = `late-${t.tag}`;
      await t.setScenario(
        {
          steps: [
            { reply: { content: '', toolCalls: [{ name: 'record_effect', arguments: { tag: key, sleepMs: 12000 } }] } },
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
      const toolsFence = ofType(events, 'run.fenced').find((f) => f.event.data.fencedSubject === 'tools')!;
      const late = await eventually(
        async () => ofType(await t.log.readRun(body.runId), 'tool.call.late_observed')[0] ?? null,
        30_000,
        'the late observation',
      );
      expect(late.seq).toBeGreaterThan(settledSeq);
      expect(late.event.data.status).toBe('succeeded');
      expect(late.event.prevSeq).toBe(toolsFence.seq);
      expect(late.subject).toBe(runSubject(t.log.space, body.runId, 'tools'));
    }, 90_000);
  });
