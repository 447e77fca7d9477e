/**
 * A model request reads the stored results it carries (large tool results, kept in the result
 * store) after its turn is recorded as requested, and a redelivered wake never calls the model for
 * a turn in flight. A read that failed while NATS moved (a trial's rolling restart) was thrown: the
 * Run kept a live holder and a request never sent until the no-progress limit settled it `failed`
 * five minutes later. Now the read is tried again until it answers or the request's signal stops it.
 *
 * Given a Run whose tool result is stored by reference in the real result store (shared
 * nats-server) and a model activity against the real scripted model over HTTP, with the store's
 * reads failing with a NATS timeout (the fault injected at ResultStore.get): when the first two
 * reads fail, then the request is made with the stored result; when every read fails, then the
 * request stops when its signal is aborted, and the model is never asked.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { errors } from '@nats-io/transport-node';
import type { EventData, ResultRef } from '@runplane/contracts';
import { EventLog, ResultStore } from '@runplane/eventlog';
import { foldRun } from '@runplane/run-facts';
import { startScriptedModel, type ScriptedModel } from '@runplane/app-scripted-model';
import { ModelActivity } from '../src/model-activity.js';
import { ModelClient } from '../src/model-client.js';
import { History } from '../../../test/support/history.js';
import { SHARED_NATS_URL, SUITE_NATS } from '../../../test/support/nats-server.js';

const tag = randomBytes(4).toString('hex');
let log: EventLog;
let store: ResultStore;
let model: ScriptedModel;
let ref: ResultRef;

beforeAll(async () => {
  log = await EventLog.connect({ ...SUITE_NATS, natsUrl: SHARED_NATS_URL, stream: `RPTEST_SR_${tag}`, prefix: `tsr${tag}`, name: 'runtime' });
  store = await ResultStore.open(log);
  ref = await store.put(JSON.stringify({ fund: 'SPY', holdings: [`STORED-${tag}`] }));
  model = await startScriptedModel({ port: 0 });
}, 60_000);
afterAll(async () => {
  await model?.close();
  await store?.destroy();
  await log?.destroyStream();
  await log?.close();
});

/** A Run whose one tool call succeeded with its result stored by `ref`, and its turn 2 requested. */
function runWithStoredResult(runId: string) {
  const h = new History(runId, `conv-${runId}`)
    .admitted({ content: `[${runId}] What does SPY hold?` })
    .turn(1, { calls: [{ id: 'c1', name: 'get_holdings' }] })
    .proposed(1, 'c1', 'get_holdings')
    .dispatched('c1', 'get_holdings')
    .receipt('c1', 'get_holdings', 'succeeded');
  const receipt = h.events.at(-1)!.event.data as { result?: unknown; resultRef?: ResultRef };
  delete receipt.result;
  receipt.resultRef = ref;
  const request = { turn: 2, model: 'scripted' } as EventData<'model.turn.requested'>;
  return { facts: foldRun(runId, h.events), request };
}

/** Makes ResultStore.get fail with a NATS timeout `failures` times (Infinity: always) while `body` runs; returns the reads made. */
async function withFailingReads<T>(failures: number, body: () => Promise<T>): Promise<{ value: unknown; reads: number }> {
  // restored below; called with the store it was called on
  // eslint-disable-next-line @typescript-eslint/unbound-method
  const get = ResultStore.prototype.get;
  let reads = 0;
  ResultStore.prototype.get = function (this: ResultStore, r: ResultRef) {
    reads++;
    return reads <= failures ? Promise.reject(new errors.TimeoutError()) : get.call(this, r);
  };
  try {
    return { value: await body().catch((e: unknown) => e), reads };
  } finally {
    ResultStore.prototype.get = get;
  }
}

describe("a model request's stored results read through a NATS hiccup", () => {
  it('given the first two reads of a stored result failing, when the turn is requested, then the model is asked with the stored result', async () => {
    const runId = `sr1${tag}`;
    model.setScenario({ steps: [{ reply: { content: 'SPY holds what the file says.' } }] }, runId);
    const { facts, request } = runWithStoredResult(runId);
    const activity = new ModelActivity(log, new ModelClient({ baseURL: model.url, apiKey: 'k', model: 'scripted', timeoutMs: 30_000 }), undefined);
    const { value, reads } = await withFailingReads(2, () => activity.request(facts, request, new AbortController().signal, async () => {}));
    expect(value).toMatchObject({ ok: true });
    expect(reads).toBe(3);
    // the request carried the stored result, read on the third try
    expect(JSON.stringify(model.stats().bodies.filter((b) => JSON.stringify(b).includes(runId)))).toContain(`STORED-${tag}`);
  }, 30_000);

  it('given every read of a stored result failing, when the request is stopped (a lost lease, a cancel), then it ends with the signal aborted and the model is never asked', async () => {
    const runId = `sr2${tag}`;
    const { facts, request } = runWithStoredResult(runId);
    const activity = new ModelActivity(log, new ModelClient({ baseURL: model.url, apiKey: 'k', model: 'scripted', timeoutMs: 30_000 }), undefined);
    const abort = new AbortController();
    setTimeout(() => abort.abort(), 500);
    const { value, reads } = await withFailingReads(Number.POSITIVE_INFINITY, () => activity.request(facts, request, abort.signal, async () => {}));
    // stopped by the signal (its AbortError), not a result to record
    expect(value).toMatchObject({ name: 'AbortError' });
    expect(abort.signal.aborted).toBe(true);
    expect(reads).toBeGreaterThan(1);
    expect(model.stats().bodies.filter((b) => JSON.stringify(b).includes(runId))).toHaveLength(0);
  }, 30_000);
});
