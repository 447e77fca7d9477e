/**
 * Clocks, the no-progress limit, metrics and the CLI's exit codes (K7, K8, K9), against the real
 * services, JetStream and PostgreSQL. The stack admits every Run with a 5 s no-progress limit
 * (`RUNPLANE_NO_PROGRESS_SECONDS`) and sweeps every 100 ms.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import { sha256Hex, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { natsEnvOf, repoRoot, serviceAllocatorEnv } from '@runplane/devstack';
import { natsUserOptions, runSubject } from '@runplane/eventlog';
import { waitForType } from '../support/faults.js';
import { eventually, settledProjection, startTestStack, type TestStack } from '../support/stack.js';

const NO_PROGRESS_SECONDS = 5;
let t: TestStack;

beforeAll(async () => {
  t = await startTestStack(
    'clocks',
    {
      RUNPLANE_NO_PROGRESS_SECONDS: String(NO_PROGRESS_SECONDS),
      RUNPLANE_RECOVERY_SWEEP_MS: '100',
      RUNPLANE_LEASE_TTL_MS: '3000',
    },
    { audit: 'report' },
  ); // forges events on the bus
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type).map((e) => e.event as Extract<RunEvent, { type: T }>);

async function ask(key: string, steps: unknown[]): Promise<{ runId: string; admittedAt: number }> {
  await t.setScenario({ steps }, key);
  const admittedAt = Date.now();
  const admitted = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] What does DIA hold?` });
  expect(admitted.status).toBe(201);
  return { runId: admitted.body.runId, admittedAt };
}

describe('the no-progress limit (K7)', () => {
  it('a model stream of keep-alive chunks only ends the Run no-progress within a bounded time; a slow but steady stream of text is not ended, in paragraphs or in one long paragraph', async () => {
    // 125 empty deltas 200 ms apart: 25 s of a live stream without a character of text
    const keepAlive = [
      { rawChunks: [...Array.from({ length: 125 }, () => ({ delta: { content: '' } })), { finishReason: 'stop' }], chunkDelayMs: 200 },
    ];
    // 7 paragraphs 1.5 s apart: ~9 s, longer than the limit, with progress all along
    const paragraphs = Array.from({ length: 7 }, (_, i) => `Paragraph ${i + 1} of a slow but steady answer.`).join('\n\n');
    const steady = [{ reply: { content: paragraphs, finishReason: 'stop' }, paragraphDelayMs: 1_500 }];
    // one long paragraph (no blank line) in 24 pieces 500 ms apart: ~12 s, more than twice the limit
    const words = Array.from({ length: 24 }, (_, i) => `word${i + 1} of one long unbroken paragraph${i === 23 ? '.' : ', '}`);
    const unbroken = [{ rawChunks: [...words.map((w) => ({ delta: { content: w } })), { finishReason: 'stop' }], chunkDelayMs: 500 }];
    const [silent, control, long] = await Promise.all([
      ask(`keepalive-${t.tag}`, keepAlive),
      ask(`steady-${t.tag}`, steady),
      ask(`unbroken-${t.tag}`, unbroken),
    ]);

    const silentEvents = await t.waitForSettlement(silent.runId, 30_000);
    const settleMs = Date.now() - silent.admittedAt;
    const settled = ofType(silentEvents, 'run.settled');
    expect(settled).toHaveLength(1);
    expect(settled[0]!.data.outcome).toBe('failed');
    expect(settled[0]!.data.reason).toMatch(/^no-progress: no answer was produced: no progress for \d+ s \(limit 5 s\)/);
    const fences = ofType(silentEvents, 'run.fenced');
    expect(fences.map((f) => f.data.reason)).toEqual(['no-progress', 'no-progress']);
    expect(fences[0]!.data.uncertain).toEqual([{ kind: 'model-turn', turn: 1 }]); // the keep-alive turn never completed before the fence
    // bounded: the limit, plus sweeps and appends; well before the 25 s stream would have ended by itself
    expect(settleMs).toBeLessThan(NO_PROGRESS_SECONDS * 1000 + 8_000);
    expect(ofType(silentEvents, 'model.turn.completed')).toHaveLength(0);
    expect(ofType(silentEvents, 'model.output.progress')).toHaveLength(0); // keep-alive chunks are never evidence of progress
    // the runtime's lease is marked fenced too, so its holder stops streaming at its next renewal:
    // recovery marks it after the fence is in the log (which alone refuses the holder's writes, K6),
    // so the settlement can be seen first on a loaded machine (seen once with the sets side by side)
    const leases = await new Kvm(t.log.nc).open(`${t.env.RUNPLANE_SUBJECT_PREFIX}_leases`);
    let lease: unknown = null;
    await eventually(
      async () => ((lease = (await leases.get(silent.runId))?.json()) as { state?: string } | null)?.state === 'fenced' || null,
      10_000,
      'the lease marked fenced',
    ).catch((e: unknown) => {
      throw new Error(`${(e as Error).message}; the lease last seen: ${JSON.stringify(lease)}`);
    });

    const controlEvents = await t.waitForSettlement(control.runId, 60_000);
    const controlSettled = ofType(controlEvents, 'run.settled')[0]!;
    expect(controlSettled.data.outcome).toBe('completed');
    expect(ofType(controlEvents, 'run.fenced').some((f) => f.data.reason === 'no-progress')).toBe(false);
    expect(Date.parse(controlSettled.occurredAt) - control.admittedAt).toBeGreaterThan(NO_PROGRESS_SECONDS * 1000); // it did outlive the limit
    expect(ofType(controlEvents, 'model.output.paragraph').length).toBeGreaterThanOrEqual(6);

    // the long paragraph: never a finished paragraph, but its streaming text was recorded as progress at a bounded rate
    const longEvents = await t.waitForSettlement(long.runId, 60_000);
    const longSettled = ofType(longEvents, 'run.settled')[0]!;
    expect(longSettled.data.outcome).toBe('completed');
    expect(ofType(longEvents, 'run.fenced').some((f) => f.data.reason === 'no-progress')).toBe(false);
    expect(Date.parse(longSettled.occurredAt) - long.admittedAt).toBeGreaterThan(2 * NO_PROGRESS_SECONDS * 1000);
    expect(ofType(longEvents, 'model.output.paragraph')).toHaveLength(0);
    const content = ofType(longEvents, 'model.turn.completed')[0]!.data.content;
    expect(content).toBe(words.join(''));
    const marks = ofType(longEvents, 'model.output.progress');
    // one per ~1.67 s (a third of the limit) of a ~12 s stream: enough to keep the clock, never one per chunk
    expect(marks.length).toBeGreaterThanOrEqual(3);
    expect(marks.length).toBeLessThanOrEqual(12);
    const progressTimes = [
      ofType(longEvents, 'run.admitted')[0]!.occurredAt,
      ...marks.map((m) => m.occurredAt),
      ofType(longEvents, 'model.turn.completed')[0]!.occurredAt,
    ].map((at) => Date.parse(at));
    const gaps = progressTimes.slice(1).map((at, i) => at - progressTimes[i]!);
    expect(Math.max(...gaps)).toBeLessThan(NO_PROGRESS_SECONDS * 1000); // the clock never ran out
    for (const [i, m] of marks.entries()) {
      expect(m.data.turn).toBe(1);
      if (i > 0) expect(m.data.characters).toBeGreaterThan(marks[i - 1]!.data.characters);
      expect(m.data.sha256).toBe(sha256Hex(content.slice(0, m.data.characters)));
    }
    // the timeline shows it
    const timeline = spawnSync(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), 'timeline', long.runId], {
      env: { ...t.env, ...natsEnvOf(t.users, 'ops') },
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(timeline.status).toBe(0);
    expect(timeline.stdout).toMatch(/model\.output\.progress .*still streaming \(\d+ chars so far/);
  }, 90_000);

  it('a Run parked on a human has no clock until its wake: answered, it runs again and a model that only sends keep-alive chunks gets it fenced no-progress (recovery re-arms the check at the delivered answer)', async () => {
    const key = `woken-${t.tag}`;
    const { runId } = await ask(key, [
      { reply: { content: '', toolCalls: [{ id: `call_ask_${key}`, name: 'ask_human', arguments: { question: 'Which share class?' } }] } },
      { rawChunks: [...Array.from({ length: 125 }, () => ({ delta: { content: '' } })), { finishReason: 'stop' }], chunkDelayMs: 200 },
    ]);
    const opened = ofType(await waitForType(t, runId, 'wait.opened', 30_000), 'wait.opened')[0]!;
    await eventually(async () => ((await t.client.getRun(runId))?.status === 'awaiting_human' ? true : null), 30_000, 'the Run parked');
    const answeredAt = Date.now();
    expect((await t.client.answerWait(runId, opened.data.waitId, 'Class A')).status).toBe(202);
    const settled = ofType(await waitForType(t, runId, 'run.settled', 40_000), 'run.settled')[0]!;
    expect(settled.data.outcome).toBe('failed');
    expect(settled.data.reason).toMatch(/^no-progress: /);
    const events = await t.log.readRun(runId);
    expect(ofType(events, 'run.fenced').map((f) => f.data.reason)).toEqual(['no-progress', 'no-progress']);
    expect(ofType(events, 'model.turn.requested')).toHaveLength(2); // the woken Run asked the model again
    // within the limit after the answer (the answer is progress) plus the sweep and the settlement
    expect(Date.parse(settled.occurredAt) - answeredAt).toBeLessThan(NO_PROGRESS_SECONDS * 1000 + 8_000);
  });
});

/** One sample of a Prometheus text exposition, or 0 when the series is absent. */
function sample(text: string, name: string, labels: Record<string, string>): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && Object.entries(labels).every(([k, v]) => l.includes(`${k}="${v}"`)));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

async function scrape(service: 'lifecycle' | 'runtime'): Promise<string> {
  const res = await fetch(`${t.stack.services.get(service)!.url}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
  return res.text();
}

describe('metrics (K9, K11)', () => {
  it('a garbage message on a Run subject is counted as an anomaly by kind and service on /metrics; settlements are counted by outcome', async () => {
    const kind = { service: 'lifecycle', kind: 'invalid-message' };
    const before = sample(await scrape('lifecycle'), 'runplane_bus_anomalies_total', kind);
    const settledBefore = sample(await scrape('lifecycle'), 'runplane_settlements_total', { service: 'lifecycle', outcome: 'completed' });
    const nc = await connect({
      servers: t.env.NATS_URL!,
      ...natsUserOptions(t.users.admin.user, t.users.admin.password),
      ...t.tls,
      reconnect: false,
    });
    try {
      // the lifecycle consumes the publication subject: a message there that is not a fact
      nc.publish(runSubject(t.log.space, `garbage-${t.tag}`, 'publication'), 'garbage {not json');
      await nc.flush();
    } finally {
      await nc.close();
    }
    const after = await eventually(
      async () => {
        const n = sample(await scrape('lifecycle'), 'runplane_bus_anomalies_total', kind);
        return n > before ? n : null;
      },
      20_000,
      'the anomaly counted on /metrics',
    );
    expect(after).toBe(before + 1);
    // a Run that completes is counted once under its outcome
    const { runId } = await ask(`metrics-${t.tag}`, [{ reply: { content: 'The answer.' } }]);
    const events = await t.waitForSettlement(runId, 30_000);
    expect(ofType(events, 'run.settled')[0]!.data.outcome).toBe('completed');
    expect(ofType(events, 'model.output.progress')).toHaveLength(0); // an ordinary short reply records no progress evidence
    const settledAfter = sample(await scrape('lifecycle'), 'runplane_settlements_total', { service: 'lifecycle', outcome: 'completed' });
    expect(settledAfter).toBe(settledBefore + 1);
    // every service labels its own series
    const runtime = await scrape('runtime');
    expect(runtime).toMatch(/process_cpu_seconds_total\{service="runtime"\}/);
    // and says which malloc it runs: jemalloc wherever the stack found one to preload (devstack allocator.ts)
    const allocator = serviceAllocatorEnv({}).LD_PRELOAD === undefined ? 'system' : 'jemalloc';
    expect(sample(runtime, 'runplane_process_allocator_info', { service: 'runtime', allocator })).toBe(1);
  }, 60_000);
});

/** Runs `runplane ask` against the stack; resolves with its exit code and output. */
function cliAsk(question: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const { admission, publication } = t.stack.endpoints;
    const child = spawn(
      process.execPath,
      [join(repoRoot(), 'apps/cli/dist/main.js'), 'ask', question, '--admission', admission, '--publication', publication],
      {
        env: t.env,
      },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('runplane ask: exit codes tell outcomes apart (K9)', () => {
  it('0 for completed, 3 for partial with the unanswered parts printed, 1 for failed', async () => {
    const gaps = [{ part: 'holdings of XYZ', reason: 'no holdings file for XYZ in the data' }];
    const block = `\`\`\`json runplane-unanswered\n${JSON.stringify({ unanswered: gaps })}\n\`\`\``;
    const keys = { completed: `cli-ok-${t.tag}`, partial: `cli-part-${t.tag}`, failed: `cli-fail-${t.tag}` };
    await t.setScenario({ steps: [{ reply: { content: 'SPY holds 500 stocks.' } }], then: 'error' }, keys.completed);
    await t.setScenario(
      { steps: [{ reply: { content: `SPY and QQQ overlap by half.\n\nNot answered: XYZ.\n${block}` } }], then: 'error' },
      keys.partial,
    );
    await t.setScenario({ steps: [{ reply: { content: '' } }], then: 'error' }, keys.failed); // an empty reply is not an answer
    const [completed, partial, failed] = await Promise.all([
      cliAsk(`[${keys.completed}] What does SPY hold?`),
      cliAsk(`[${keys.partial}] Compare SPY, QQQ and XYZ`),
      cliAsk(`[${keys.failed}] What does QQQ hold?`),
    ]);
    expect(completed.stdout).toMatch(/Settlement \(by lifecycle\): COMPLETED/);
    expect(completed.code).toBe(0);
    expect(partial.stdout).toMatch(/Settlement \(by lifecycle\): PARTIAL/);
    expect(partial.stdout).toContain('unanswered: holdings of XYZ (no holdings file for XYZ in the data)');
    expect(partial.code).toBe(3);
    expect(failed.stdout).toMatch(/Settlement \(by lifecycle\): FAILED/);
    expect(failed.code).toBe(1);
    // the answer reads as one piece after the protocol lines, before the settlement (docs/cli.md)
    const answerOf = (out: string) => /\nAnswer:\n([\s\S]*?)\nSettlement \(by lifecycle\)/.exec(out)?.[1] ?? null;
    expect(answerOf(completed.stdout)).toBe('\nSPY holds 500 stocks.\n');
    expect(answerOf(partial.stdout)).toContain('SPY and QQQ overlap by half.');
    expect(answerOf(partial.stdout)).not.toMatch(/^ {2}#\d+ \[/m);
    expect(failed.stdout).toContain('\nAnswer: none (no passage was committed)\n');
    expect(completed.stdout.indexOf('[publication] passage 1 of turn ')).toBeLessThan(completed.stdout.indexOf('\nAnswer:\n'));
  }, 90_000);
});

describe('clocks and budget in the Run projection, the timeline and the CLI (K7)', () => {
  it('a Run with a tool call: GET /v1/runs shows used/limit, queue and execution time, last progress and deadline; `status` and `timeline` print them', async () => {
    const steps = [
      { reply: { toolCalls: [{ name: 'list_funds', arguments: {} }] } },
      { reply: { content: 'DIA holds the 30 Dow stocks.' }, delayMs: 300 },
    ];
    // this file's 5 s no-progress limit can fence a Run on a machine starved by the other test
    // worker (a CI run: 5.2 s without progress beside partitions.test's 21 processes): the product
    // keeping its limit, not the clocks under test; such a Run is asked once more, and the second
    // must complete
    let runId = (await ask(`clocked-${t.tag}`, steps)).runId;
    let events = await t.waitForSettlement(runId, 30_000);
    const first = ofType(events, 'run.settled')[0]!.data;
    if (first.outcome === 'failed' && first.reason.startsWith('no-progress')) {
      console.log(`clocks: the first Run was fenced by the 5 s limit on a starved machine (${first.reason}); asking again`);
      runId = (await ask(`clocked-again-${t.tag}`, steps)).runId;
      events = await t.waitForSettlement(runId, 30_000);
    }
    expect(ofType(events, 'run.settled')[0]!.data.outcome).toBe('completed');
    const view = await settledProjection(t, runId);
    const admitted = ofType(events, 'run.admitted')[0]!;
    const firstRequest = ofType(events, 'model.turn.requested')[0]!;
    const finished = ofType(events, 'run.execution.finished')[0]!;
    const receipt = ofType(events, 'tool.call.receipt')[0]!;
    expect(view).toMatchObject({
      modelRequests: 2,
      maxModelRequests: admitted.data.limits.maxModelRequests,
      toolCalls: 1,
      maxToolCalls: admitted.data.limits.maxToolCalls,
      noProgressSeconds: NO_PROGRESS_SECONDS,
      deadlineAt: admitted.data.limits.deadlineAt,
      executionEndedAt: finished.occurredAt,
    });
    const firstStart = [firstRequest.occurredAt, ...ofType(events, 'lease.granted').map((e) => e.occurredAt)].sort()[0]!;
    expect(view.startedAt).toBe(firstStart);
    expect(view.queuedMs).toBe(Date.parse(firstStart) - Date.parse(admitted.occurredAt));
    expect(view.executingMs).toBe(Date.parse(finished.occurredAt) - Date.parse(firstStart));
    expect(view.executingMs!).toBeGreaterThanOrEqual(300); // the scripted answer waited 300 ms
    // the answer's text is the last progress; it comes after the tool's receipt
    expect(Date.parse(view.lastProgressAt!)).toBeGreaterThan(Date.parse(receipt.occurredAt));

    const cli = (args: string[], env: NodeJS.ProcessEnv = t.env) =>
      spawnSync(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), ...args], { env, encoding: 'utf8', timeout: 30_000 });
    const statusOut = cli(['status', runId, '--admission', t.stack.endpoints.admission]);
    expect(statusOut.status).toBe(0);
    expect(statusOut.stdout).toContain(`model requests: 2/${admitted.data.limits.maxModelRequests}`);
    expect(statusOut.stdout).toContain(`tool calls:     1/${admitted.data.limits.maxToolCalls}`);
    expect(statusOut.stdout).toMatch(/queued: +\d/);
    expect(statusOut.stdout).toMatch(/executing: +\d.* \(ended /);
    const timelineOut = cli(['timeline', runId], { ...t.env, ...natsEnvOf(t.users, 'ops') });
    expect(timelineOut.status).toBe(0);
    expect(timelineOut.stdout).toMatch(/model\.turn\.completed .*\[turn took \d/);
    expect(timelineOut.stdout).toMatch(/tool\.call\.dispatched .*\[\d.* after its proposal\]/);
    expect(timelineOut.stdout).toMatch(/tool\.call\.receipt .*\[ran \d/);
    expect(timelineOut.stdout).toMatch(/ \+\d+(\.\d)? m?s /);
  }, 60_000);
});

// last in this file: its 10 s Retry-After pauses this runtime's model limiter for every later Run
describe('a Run waiting out a rate-limit pause (K7)', () => {
  it('has no model turn in flight while it waits: fenced no-progress meanwhile, no request is named uncertain and the model receives none', async () => {
    const key = `paused-${t.tag}`;
    // turn 1 is rate-limited for 10 s, longer than the 5 s no-progress limit; the retry would answer
    const { runId, admittedAt } = await ask(key, [
      { error: { status: 429, message: 'slow down', retryAfter: 10 } },
      { reply: { content: 'Late answer.' } },
    ]);
    const events = await t.waitForSettlement(runId, 30_000);
    const settleMs = Date.now() - admittedAt;
    // the retry was never recorded as requested: the Run waited for the limiter before asking
    expect(ofType(events, 'model.turn.requested')).toHaveLength(1);
    expect(ofType(events, 'model.turn.failed').map((f) => f.data.error.status)).toEqual([429]);
    const fences = ofType(events, 'run.fenced');
    expect(fences.length).toBeGreaterThanOrEqual(1);
    expect(fences.every((f) => f.data.reason === 'no-progress' && f.data.uncertain.length === 0)).toBe(true);
    const settled = ofType(events, 'run.settled');
    expect(settled).toHaveLength(1);
    expect(settled[0]!.data.outcome).toBe('failed');
    expect(settled[0]!.data.reason).toMatch(/^no-progress/);
    expect(settled[0]!.data.reason).not.toMatch(/outcome unknown/);
    expect(settleMs).toBeLessThan(10_000); // settled before the pause ended
    await new Promise((r) => setTimeout(r, 10_500 - (Date.now() - admittedAt)));
    const s = (await (await fetch(`${t.stack.modelUrl.replace(/\/v1$/, '/_scripted')}/stats`)).json()) as { perKey?: Record<string, number> };
    expect(s.perKey?.[key]).toBe(1); // nothing was sent after the fence, not even when the pause ended
  }, 60_000);
});
