/**
 * Recovery off the happy path (docs/architecture.md), on the real stack: a W1-like Run ("What does DIA
 * hold?", the scripted research policy: three model turns, two tool calls) that finishes on its
 * own is settled with no fence at all and nothing of recovery in its log; its one `lease.granted`
 * stands on the runtime subject, written by the runtime under that lease in the same decision as
 * its first model request. A Run whose holder is killed is still fenced and settled
 * `interrupted` (K6, K10), as before. Prints the Run's events by type (the count per W1 Run).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { RunEvent, StoredEvent } from '@runplane/contracts';
import { runSubject } from '@runplane/eventlog';
import { waitForType } from '../support/faults.js';
import { eventually, quickRecoveryEnv, startTestStack, type TestStack } from '../support/stack.js';

const LEASE_TTL_MS = 1_500;
let t: TestStack;

beforeAll(async () => {
  t = await startTestStack('happy', quickRecoveryEnv(LEASE_TTL_MS), { audit: 'strict' });
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type) as (StoredEvent & { event: Extract<RunEvent, { type: T }> })[];

describe('a Run that finishes on its own is settled without recovery', () => {
  it('W1: no run.fenced, nothing written by recovery, one lease.granted on the runtime subject by the runtime in the decision of its first model request; one settlement by the lifecycle, nothing after it', async () => {
    const { body } = await t.client.postMessage('conv-happy', { clientMessageId: `w1-${t.tag}`, content: 'What does DIA hold?' });
    const events = await t.waitForSettlement(body.runId, 60_000);
    // the projector applied its flushes of this Run from the deliveries alone, without reading the log
    const metrics = await eventually(
      async () => {
        const text = await (await fetch(`${t.stack.services.get('projector')!.url}/metrics`)).text();
        return /runplane_projector_runs_total\{[^}]*path="deliveries"[^}]*\} [1-9]/.test(text) ? text : null;
      },
      20_000,
      'projector flushes from deliveries',
    );
    process.stdout.write(
      `${metrics
        .split('\n')
        .filter((l) => l.startsWith('runplane_projector_runs_total'))
        .join('\n')}\n`,
    );
    const counts: Record<string, number> = {};
    for (const e of events) counts[e.event.type] = (counts[e.event.type] ?? 0) + 1;
    process.stdout.write(`W1 Run ${body.runId.slice(0, 8)}: ${events.length} events: ${JSON.stringify(counts)}\n`);

    expect(ofType(events, 'model.turn.requested')).toHaveLength(3);
    expect(ofType(events, 'tool.call.receipt')).toHaveLength(2);
    const settled = ofType(events, 'run.settled');
    expect(settled).toHaveLength(1);
    expect(['completed', 'partial']).toContain(settled[0]!.event.data.outcome);
    expect(settled[0]!.event.writer?.service).toBe('lifecycle');

    // recovery is off the happy path: no fence (settling or any other), nothing of its own
    expect(ofType(events, 'run.fenced')).toEqual([]);
    expect(events.filter((e) => e.event.owner === 'recovery' || e.event.writer?.service === 'recovery')).toEqual([]);
    expect(events.filter((e) => e.subject.split('.')[3] === 'recovery')).toEqual([]);

    // the runtime's own grant: on its subject, under that epoch, first of the decision that requested turn 1
    const grants = ofType(events, 'lease.granted');
    expect(grants).toHaveLength(1);
    const grant = grants[0]!;
    expect(grant.subject.startsWith(`${runSubject(t.log.space, body.runId, 'runtime')}`)).toBe(true);
    expect(grant.event.owner).toBe('runtime');
    expect(grant.event.writer).toMatchObject({ service: 'runtime', epoch: 1 });
    expect(grant.event.data).toMatchObject({ epoch: 1, holder: { service: 'runtime', instance: grant.event.writer!.instance }, ttlMs: LEASE_TTL_MS });
    const first = ofType(events, 'model.turn.requested')[0]!;
    expect(first.event.prevSeq).toBe(grant.seq); // the next event on the runtime subject
    expect(first.event.occurredAt).toBe(grant.event.occurredAt); // one decision, one clock
    expect(first.event.writer).toEqual(grant.event.writer);

    // the runtime subject ends in the runtime's own finish; nothing lands after the settlement
    const runtimeEvents = events.filter((e) => e.subject.split('.')[3] === 'runtime');
    expect(runtimeEvents.at(-1)!.event.type).toBe('run.execution.finished');
    await new Promise((r) => setTimeout(r, 3 * LEASE_TTL_MS)); // recovery's sweeps and the lease release have run
    const after = await t.log.readRun(body.runId);
    expect(after.filter((e) => e.seq > settled[0]!.seq)).toEqual([]);
  }, 90_000);

  it('a Run whose holder is killed is still fenced by recovery and settled interrupted by the lifecycle (K6, K10): the fault path is as before', async () => {
    const key = `killed-${t.tag}`;
    await t.setScenario({ steps: [{ reply: { content: `the late answer of ${key}` }, delayMs: 20_000 }] }, key);
    const { body } = await t.client.postMessage('conv-happy', { clientMessageId: key, content: `[${key}] What does DIA hold?` });
    await waitForType(t, body.runId, 'model.turn.requested', 30_000);
    const runtime = t.stack.services.get('runtime')!;
    const exited = new Promise((r) => runtime.child.once('exit', r));
    runtime.child.kill('SIGKILL');
    await exited;
    const events = await t.waitForSettlement(body.runId, 30_000);
    await t.stack.startService('runtime');
    const fences = ofType(events, 'run.fenced');
    expect(fences.map((f) => [f.event.data.fencedSubject, f.event.data.reason])).toEqual([
      ['tools', 'lease-expired'],
      ['runtime', 'lease-expired'],
    ]);
    expect(fences[1]!.event.data.uncertain).toEqual([{ kind: 'model-turn', turn: 1 }]);
    const settled = ofType(events, 'run.settled');
    expect(settled).toHaveLength(1);
    expect(settled[0]!.event.data.outcome).toBe('interrupted');
    expect(fences.every((f) => f.seq < settled[0]!.seq)).toBe(true);
    // the grant is the killed runtime's own, recorded with its first model request
    expect(ofType(events, 'lease.granted').map((g) => [g.event.owner, g.subject.split('.')[3], g.event.data.epoch])).toEqual([
      ['runtime', 'runtime', 1],
    ]);
  }, 90_000);
});
