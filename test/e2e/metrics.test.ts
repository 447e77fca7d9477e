/**
 * The SRE's metrics (docs/metrics.md) read from each service's real `/metrics` after one Run with a
 * tool call, on the real JetStream and PostgreSQL: the Run's duration and queue time, its model
 * requests and tokens, the tool's duration by receipt status, appends by owner (equal to the
 * events each owner stored), consumer deliveries, lease renewals, the open SSE observer, and the
 * Run reads of the services that decide on deliveries (none from the log on a normal Run).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { ObservedEvent } from '@runplane/client';
import type { RunEvent, StoredEvent } from '@runplane/contracts';
import { DeadlineStore } from '@runplane/app-recovery';
import type { ServiceName } from '@runplane/devstack';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

let t: TestStack;
beforeAll(async () => {
  // a short lease TTL: the keeper renews every second, within the Run's slow second turn
  t = await startTestStack('metrics', { RUNPLANE_LEASE_TTL_MS: '3000' });
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

async function scrape(service: ServiceName): Promise<string> {
  const res = await fetch(`${t.stack.services.get(service)!.url}/metrics`);
  expect(res.status).toBe(200);
  return res.text();
}

/** The sum of every sample of `name` whose labels include `labels` (0 when there is none). */
function total(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!(line.startsWith(`${name}{`) || line.startsWith(`${name} `))) continue;
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
    sum += Number(line.split(' ').at(-1));
  }
  return sum;
}

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type).map((e) => e.event as Extract<RunEvent, { type: T }>);

describe('metrics an SRE reads, after one Run', () => {
  let events: StoredEvent[];
  let observerWhileOpen = 0;

  beforeAll(async () => {
    await t.setScenario({
      steps: [
        // a model that takes a moment (as a real one does): every service has seen run.admitted before
        // the proposal is stored, so each decides from the fold it started there (a service whose
        // run.admitted delivery lags behind the event it decides on reads the log for it instead)
        { reply: { toolCalls: [{ name: 'list_funds', arguments: {} }] }, delayMs: 200 },
        { reply: { content: 'First passage.\n\nSecond passage.' }, delayMs: 2_500, chunkDelayMs: 20 },
      ],
      then: 'error',
    });
    const { body } = await t.client.postMessage('conv-metrics', { clientMessageId: 'metrics-1', content: 'List the funds you cover.' });
    const seen: ObservedEvent[] = [];
    const observing = t.client.streamEvents(body.runId, { onEvent: (e) => seen.push(e) });
    observerWhileOpen = await eventually(
      async () => {
        const n = total(await scrape('publication'), 'runplane_sse_observers');
        return n > 0 ? n : null;
      },
      20_000,
      'the observer counted while its stream is open',
    );
    events = await t.waitForSettlement(body.runId, 60_000);
    expect((await observing).ended).toBe('server');
    // each owner observes right after its append returns: a moment after the log shows the settlement
    await eventually(
      async () => (total(await scrape('lifecycle'), 'runplane_run_duration_seconds_count') > 0 ? true : null),
      10_000,
      'the settlement observed',
    );
  }, 120_000);

  it('the Run settled completed with a tool call, and the open observer stream was counted', () => {
    expect(ofType(events, 'run.settled')[0]!.data.outcome).toBe('completed');
    expect(ofType(events, 'tool.call.receipt')).toHaveLength(1);
    expect(observerWhileOpen).toBe(1);
  });

  it('the lifecycle observed the run duration once, under its outcome, from the events’ timestamps', async () => {
    const text = await scrape('lifecycle');
    expect(total(text, 'runplane_run_duration_seconds_count', { outcome: 'completed' })).toBe(1);
    const admitted = Date.parse(events[0]!.event.occurredAt);
    const settled = Date.parse(events.at(-1)!.event.occurredAt);
    expect(total(text, 'runplane_run_duration_seconds_sum', { outcome: 'completed' })).toBeCloseTo((settled - admitted) / 1000, 3);
  });

  it('the runtime observed the queue time once, every model request by finish, the tokens the model reported, and lease renewals', async () => {
    const text = await scrape('runtime');
    expect(total(text, 'runplane_run_queue_seconds_count')).toBe(1);
    const requested = ofType(events, 'model.turn.requested').length;
    expect(total(text, 'runplane_model_request_seconds_count')).toBe(requested);
    expect(total(text, 'runplane_model_request_seconds_count', { finish: 'tool_calls' })).toBe(1);
    expect(total(text, 'runplane_model_request_seconds_count', { finish: 'stop' })).toBe(1);
    const usage = ofType(events, 'model.turn.completed').map((e) => e.data.usage!);
    expect(total(text, 'runplane_model_tokens_total', { kind: 'input' })).toBe(usage.reduce((n, u) => n + u.promptTokens, 0));
    expect(total(text, 'runplane_model_tokens_total', { kind: 'output' })).toBe(usage.reduce((n, u) => n + u.completionTokens, 0));
    expect(total(text, 'runplane_model_tokens_total', { kind: 'output' })).toBeGreaterThan(0);
    expect(total(text, 'runplane_lease_renewals_total', { result: 'ok' })).toBeGreaterThan(0);
    expect(total(text, 'runplane_lease_renewals_total', { result: 'lost' })).toBe(0);
  });

  it('the tools service observed the execution under its tool and receipt status', async () => {
    const text = await scrape('tools');
    expect(total(text, 'runplane_tool_duration_seconds_count', { tool: 'list_funds', status: 'succeeded' })).toBe(1);
  });

  it('the services that decide on deliveries took every decision on the Run from the folds kept from them: no read of its log', async () => {
    const counts: Record<string, { kept: number; log: number }> = {};
    for (const service of ['runtime', 'tools', 'publication', 'lifecycle', 'recovery'] as const) {
      const text = await scrape(service);
      counts[service] = {
        kept: total(text, 'runplane_run_reads_total', { source: 'kept' }),
        log: total(text, 'runplane_run_reads_total', { source: 'log' }),
      };
    }
    console.log(`metrics: Run reads per service on one Run: ${JSON.stringify(counts)}`);
    // each decided on the Run (the tool call, the passages, the settlement, the closing) from its
    // fold, started at run.admitted and kept from the deliveries
    for (const service of ['tools', 'publication', 'lifecycle', 'recovery'] as const)
      expect([service, counts[service]!.kept > 0, counts[service]!.log]).toEqual([service, true, 0]);
    // recovery forgot the Run's deadline at its settlement: its clean-up pass (every 30 s) will not
    // read the Run's log to find that it ended
    const deadlines = await DeadlineStore.open(t.log);
    const runId = events[0]!.event.runId;
    await eventually(
      async () => ((await deadlines.getRecord(runId)) === null ? true : null),
      10_000,
      "recovery's deadline entry of the settled Run gone",
    );
    // the runtime too, but its lease keeper also wakes a Run not woken within a lease TTL (3 s here,
    // and the second turn takes 2.5 s) from a timer, outside any delivery: such a wake reads the log,
    // as often as it decides, depending on timing (not counted here)
    expect(counts.runtime!.kept).toBeGreaterThan(0);
  });

  it('every owner counted exactly the events it stored as appends, and its consumers counted deliveries', async () => {
    for (const owner of ['admission', 'runtime', 'tools', 'publication', 'lifecycle'] as const) {
      const text = await scrape(owner);
      const stored = events.filter((e) => e.event.owner === owner).length;
      expect(stored).toBeGreaterThan(0);
      expect([owner, total(text, 'runplane_appends_total', { owner, result: 'ok' })]).toEqual([owner, stored]);
      if (owner !== 'admission') expect(total(text, 'runplane_consumer_deliveries_total')).toBeGreaterThan(0);
    }
    // no lease expired; the observer stream ended with the settlement
    expect(total(await scrape('recovery'), 'runplane_lease_expiries_total')).toBe(0);
    expect(await scrape('recovery')).toMatch(/^runplane_lease_expiries_total\{service="recovery"\} 0$/m);
    await eventually(async () => (total(await scrape('publication'), 'runplane_sse_observers') === 0 ? true : null), 10_000, 'the observer gone');
  });
});
