/**
 * One Run never starves another (K8), against the real processes, NATS JetStream and PostgreSQL:
 * one Run streams a model reply of several megabytes (in many paragraphs, then as one paragraph)
 * on the same runtime as a batch of ordinary Runs, with the default lease TTL. The ordinary Runs
 * all complete (none fenced `interrupted`, none `failed` on the no-progress limit), the big Run
 * keeps its paragraphs (each one recorded while it streams and committed as a passage) or, as one
 * paragraph, its progress evidence, and nobody's lease is lost; the big Run then settles honestly
 * (its turn record is cut at the size limit, so it is no answer; its later requests fail: `partial`
 * with every passage kept, or `failed` when nothing was committed: K9). Its grant and requests
 * allow the reply's ~800,000 output tokens: the runtime cuts a reply at its reservation (K7), and
 * the stack's audit is strict (nothing measured over the grant). The ordinary Runs' latency (post to
 * settlement) is measured without and beside the big reply and printed for the report.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { StoredEvent } from '@runplane/contracts';
import { ofType, waitForSettled, waitForType } from '../support/faults.js';
import { startTestStack, type TestStack } from '../support/stack.js';

/** Ordinary Runs per batch. */
const ORDINARY = 8;
/** The big reply: ~3.2 MB, as 800 paragraphs of ~4,000 characters or as one paragraph. */
const SENTENCE = 'The fund holds a broad mix of large companies, weighted by market value, and rebalances each quarter. ';
const PARAGRAPH = SENTENCE.repeat(40).trim();
const PARAGRAPHS = 800;
let t: TestStack;

beforeAll(async () => {
  // the default lease TTL (15 s) and sweep: what a deployment runs; output tokens enough for the 3.2 MB reply (~800,000
  // tokens by the chars/4 estimate), in the grant and in one request: the runtime cuts a reply at its reservation (K7)
  t = await startTestStack(
    'bigreply',
    {
      RUNPLANE_ACK_WAIT_MS: '30000',
      RUNPLANE_MAX_OUTPUT_TOKENS: '1000000',
      RUNPLANE_MODEL_MAX_TOKENS: '1000000',
    },
    { audit: 'strict' },
  );
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

/** Posts `n` ordinary questions (the research policy answers them) and waits for their settlements; resolves with each Run's latency, ms. */
async function ordinaryBatch(label: string, n: number): Promise<{ latencies: number[]; outcomes: string[]; events: StoredEvent[][] }> {
  const started = Date.now();
  const posted = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      t.client.postMessage(`conv-${label}-${i}`, { clientMessageId: `${label}-${i}`, content: 'What does DIA hold?' }).then((r) => {
        expect(r.status).toBe(201);
        return r.body.runId;
      }),
    ),
  );
  const settled = await Promise.all(
    posted.map(async (runId) => {
      const events = await waitForSettled(t, runId, 240_000);
      return { events, at: Date.now() };
    }),
  );
  return {
    latencies: settled.map((s) => s.at - started),
    outcomes: settled.map((s) => ofType(s.events, 'run.settled')[0]!.data.outcome),
    events: settled.map((s) => s.events),
  };
}

const stats = (ms: number[]) => {
  const sorted = [...ms].sort((a, b) => a - b);
  return { median: sorted[Math.floor(sorted.length / 2)]!, max: sorted[sorted.length - 1]! };
};

/** Why the big Run's first turn record was cut (`size-limit`), or undefined when it was not. */
const sizeCutOfFirstTurn = (events: StoredEvent[]) => ofType(events, 'model.turn.completed')[0]?.data.cut?.find((c) => c.field === 'content')?.reason;

/** Starts the big Run (its reply bound to its key) and waits until its model turn is requested. */
async function startBig(key: string, content: string, repeat: number): Promise<string> {
  await t.setScenario({ steps: [{ reply: { content, repeatContent: repeat } }], then: 'error' }, key);
  const { body, status } = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] Describe every holding of DIA.` });
  expect(status).toBe(201);
  await waitForType(t, body.runId, 'model.turn.requested', 60_000);
  return body.runId;
}

describe('a reply of several megabytes beside ordinary Runs on one runtime (K8)', () => {
  let baseline: { median: number; max: number };

  it('baseline: the ordinary Runs alone', async () => {
    const batch = await ordinaryBatch('alone', ORDINARY);
    expect(batch.outcomes).toEqual(Array(ORDINARY).fill('completed'));
    baseline = stats(batch.latencies);
    console.log(`[K8] ${ORDINARY} ordinary Runs alone: latency median ${baseline.median} ms, max ${baseline.max} ms`);
  }, 300_000);

  it('in 800 paragraphs (3.2 MB): the ordinary Runs all complete, and the big Run records every paragraph while it streams', async () => {
    const key = `big-paragraphs-${t.tag}`;
    const bigStarted = Date.now();
    const big = await startBig(key, `${PARAGRAPH}\n\n`, PARAGRAPHS);
    const batch = await ordinaryBatch('beside-paragraphs', ORDINARY);
    const beside = stats(batch.latencies);
    console.log(
      `[K8] ${ORDINARY} ordinary Runs beside a 3.2 MB reply in ${PARAGRAPHS} paragraphs: latency median ${beside.median} ms, max ${beside.max} ms (alone: median ${baseline.median} ms, max ${baseline.max} ms)`,
    );
    expect(batch.outcomes).toEqual(Array(ORDINARY).fill('completed'));
    for (const events of batch.events) expect(ofType(events, 'run.fenced').filter((f) => f.data.reason !== 'settling')).toEqual([]);
    // the big Run keeps its paragraphs: each one recorded (the last one is finished by its separator too)
    const paragraphs = await waitForType(t, big, 'model.output.paragraph', 10_000).then(async () => {
      for (;;) {
        const events = await t.log.readRun(big);
        const n = ofType(events, 'model.output.paragraph').length;
        if (n >= PARAGRAPHS || ofType(events, 'model.turn.completed').length + ofType(events, 'run.fenced').length > 0) return events;
        if (Date.now() - bigStarted > 300_000) return events;
        await new Promise((r) => setTimeout(r, 500));
      }
    });
    const recorded = ofType(paragraphs, 'model.output.paragraph').map((p) => p.data);
    console.log(`[K8] the big Run recorded ${recorded.length} of ${PARAGRAPHS} paragraphs in ${Date.now() - bigStarted} ms`);
    expect(recorded.map((p) => p.index)).toEqual(Array.from({ length: PARAGRAPHS }, (_, i) => i));
    expect(recorded.every((p) => p.text === PARAGRAPH)).toBe(true);
    // nobody's lease was lost to the big reply
    expect(ofType(paragraphs, 'run.fenced').filter((f) => f.data.reason === 'lease-expired')).toEqual([]);
    const bigEvents = await waitForSettled(t, big, 300_000);
    const settled = ofType(bigEvents, 'run.settled')[0]!.data;
    // and it settles honestly (K9): its turn record was cut at the size limit (not an answer), the later requests failed
    // (the scenario has one step), and every committed passage is kept
    expect(sizeCutOfFirstTurn(bigEvents)).toBe('size-limit');
    expect(settled.outcome).toBe('partial');
    expect(settled.passageIds).toHaveLength(PARAGRAPHS);
    expect(settled.reason).toMatch(/the model request failed.*the 800 passage\(s\) committed before it are kept/);
    console.log(`[K8] the big Run settled ${settled.outcome}: ${settled.reason.slice(0, 160)}...`);
  }, 600_000);

  it('as one paragraph (3.2 MB without a blank line): the ordinary Runs all complete, and the big Run records its progress', async () => {
    const key = `big-one-${t.tag}`;
    const big = await startBig(key, `${SENTENCE}`, PARAGRAPHS * 40);
    const batch = await ordinaryBatch('beside-one', ORDINARY);
    const beside = stats(batch.latencies);
    console.log(
      `[K8] ${ORDINARY} ordinary Runs beside a 3.2 MB reply as one paragraph: latency median ${beside.median} ms, max ${beside.max} ms (alone: median ${baseline.median} ms, max ${baseline.max} ms)`,
    );
    expect(batch.outcomes).toEqual(Array(ORDINARY).fill('completed'));
    for (const events of batch.events) expect(ofType(events, 'run.fenced').filter((f) => f.data.reason !== 'settling')).toEqual([]);
    const events = await t.log.readRun(big);
    expect(ofType(events, 'run.fenced').filter((f) => f.data.reason === 'lease-expired')).toEqual([]);
    const bigEvents = await waitForSettled(t, big, 300_000);
    const settled = ofType(bigEvents, 'run.settled')[0]!.data;
    // nothing was committed (one paragraph never finished): it settles failed, saying why (K9)
    expect(sizeCutOfFirstTurn(bigEvents)).toBe('size-limit');
    expect(settled.outcome).toBe('failed');
    expect(settled.passageIds).toHaveLength(0);
    expect(settled.reason).toMatch(/the model request failed/);
  }, 600_000);
});
