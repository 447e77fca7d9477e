/**
 * The model client against the real scripted model over HTTP (K7): a request never waits past the
 * Run's deadline (its timeout is the smaller of the model timeout and the time left), a 429's
 * Retry-After is recorded and pauses the next request to that model (one limiter shared by all
 * Runs of the process), and `max_tokens` carries the ledger's reservation.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { ModelClient } from '../src/model-client.js';
import { startScriptedModel, type ScriptedModel } from '@runplane/app-scripted-model';
import { modelRequestSeconds, modelTokensTotal } from '@runplane/service-kit';

let model: ScriptedModel;
beforeAll(async () => {
  model = await startScriptedModel({ port: 0 });
});
afterAll(async () => {
  await model?.close();
});

const client = () => new ModelClient({ baseURL: model.url, apiKey: 'k', model: 'scripted', timeoutMs: 60_000 });
const ask = (key: string) => [{ role: 'user' as const, content: `[${key}] What does SPY hold?` }];
const none = () => undefined;

const run = promisify(execFile);

// Every test has a scenario key, a client and a model name of its own, and mostly waits on timers
// (deadlines, Retry-After, streamed paragraphs): they run together (the live signals are counted in
// a process of their own).
describe('the model client (K7)', () => {
  it.concurrent('a hanging model request ends at the deadline, not at the 60 s model timeout', async () => {
    model.setScenario({ steps: [{ hang: true }] }, 'hang');
    const started = Date.now();
    const result = await client().turn(1, ask('hang'), [], none, undefined, { deadlineAt: new Date(Date.now() + 800).toISOString() });
    const took = Date.now() - started;
    expect(result.ok).toBe(false);
    expect(result).toMatchObject({ ok: false, error: { kind: 'timeout', message: expect.stringMatching(/deadline/) } });
    expect(took).toBeGreaterThanOrEqual(700);
    expect(took).toBeLessThan(5_000);
  });

  it.concurrent("a 429 with Retry-After: 1 is recorded and delays the next request to the model, another Run's included", async () => {
    model.setScenario({ steps: [{ error: { status: 429, message: 'slow down', retryAfter: 1 } }] }, 'rl-a');
    model.setScenario({ steps: [{ reply: { content: 'B.' } }] }, 'rl-b');
    const shared = client();
    const first = await shared.turn(1, ask('rl-a'), [], none, undefined, { deadlineAt: new Date(Date.now() + 30_000).toISOString() });
    expect(first).toMatchObject({ ok: false, error: { kind: 'http', status: 429, retryAfterMs: 1000 } });
    const other = await shared.turn(1, ask('rl-b'), [], none, undefined, { deadlineAt: new Date(Date.now() + 30_000).toISOString(), maxTokens: 123 });
    expect(other).toMatchObject({ ok: true, turn: { content: 'B.' } });
    const arrivals = model.stats().arrivals;
    const a = arrivals.find((x) => x.key === 'rl-a')!.at;
    const b = arrivals.find((x) => x.key === 'rl-b')!.at;
    expect(b - a).toBeGreaterThanOrEqual(950);
    // its own request's body (the other tests' requests arrive at the same model meanwhile)
    const body = model.stats().bodies.find((b) => JSON.stringify(b).includes('[rl-b]')) as { max_tokens?: number };
    expect(body.max_tokens).toBe(123);
  });

  it.concurrent('a pause that would end after the deadline: the request is not sent at all', async () => {
    model.setScenario({ steps: [{ error: { status: 429, message: 'slow down', retryAfter: 30 } }, { reply: { content: 'never' } }] }, 'rl-long');
    const c = client();
    await c.turn(1, ask('rl-long'), [], none, undefined, { deadlineAt: new Date(Date.now() + 60_000).toISOString() });
    const before = model.stats().perKey['rl-long'];
    const result = await c.turn(2, ask('rl-long'), [], none, undefined, { deadlineAt: new Date(Date.now() + 2_000).toISOString() });
    // never sent: its own kind (nothing is charged for it, K7), not a timeout of a request the model received
    expect(result).toMatchObject({
      ok: false,
      error: { kind: 'not-sent', message: expect.stringMatching(/not sent: the rate-limit pause \(\d+ ms\) ends after/) },
    });
    expect(model.stats().perKey['rl-long']).toBe(before);
    // and the wait before recording a request does not wait for a pause that ends after the deadline
    const started = Date.now();
    expect(await c.waitForPause(new Date(Date.now() + 2_000).toISOString())).toBe(false);
    // at once: a wait would last until the deadline (2 s) at least; 1 s leaves a loaded machine room
    expect(Date.now() - started).toBeLessThan(1_000);
  });

  it.concurrent('waitForPause waits out a short rate-limit pause before a request is recorded', async () => {
    model.setScenario({ steps: [{ error: { status: 429, message: 'slow down', retryAfter: 1 } }] }, 'rl-wait');
    const c = client();
    // the 1 s pause starts when the 429 arrives, after this: the wait cannot end sooner than 1 s from here
    // (measured from after the turn instead, a loaded machine that returned the turn late saw 740 ms)
    const sent = Date.now();
    await c.turn(1, ask('rl-wait'), [], none, undefined, { deadlineAt: new Date(Date.now() + 30_000).toISOString() });
    expect(await c.waitForPause(new Date(Date.now() + 30_000).toISOString())).toBe(true);
    expect(Date.now() - sent).toBeGreaterThanOrEqual(1_000);
    expect(await c.waitForPause(undefined)).toBe(false); // no pause left
  });

  it.concurrent(
    'a finished request holds nothing: no timer and no abort signal stays alive until its bound (before: 2 signals per request, for a parked Run until its deadline)',
    async () => {
      model.setScenario({ steps: [{ reply: { content: 'Done.' } }], then: 'repeat-last' }, 'held');
      // the client as built (dist/), in a process of its own whose heap is the client's alone (held-signals.mjs)
      const { stdout } = await run(process.execPath, [
        '--expose-gc',
        fileURLToPath(new URL('./held-signals.mjs', import.meta.url)),
        new URL('../dist/model-client.js', import.meta.url).href,
        model.url,
        'held',
        '20',
      ]);
      const counted = JSON.parse(stdout.trim().split('\n').pop()!) as { before: number; after: number; ok: number; runAborted: boolean };
      expect(counted.ok).toBe(20);
      expect(counted.after - counted.before).toBeLessThan(10);
      expect(counted.runAborted).toBe(false);
    },
  );

  it.concurrent('a reply that streams longer than the model timeout is cut at the timeout, its streamed text delivered first', async () => {
    const paragraphs = Array.from({ length: 12 }, (_, i) => `Paragraph ${i + 1}.`);
    // 12 paragraphs 500 ms apart (6 s) against a 3 s bound: the first arrives well inside it even on a
    // loaded machine (with 400 ms against 1.5 s, a full unit run beside other work once saw none)
    model.setScenario({ steps: [{ reply: { content: paragraphs.join('\n\n') }, paragraphDelayMs: 500 }] }, 'slow-stream');
    const c = new ModelClient({ baseURL: model.url, apiKey: 'k', model: 'scripted', timeoutMs: 3_000 });
    let text = '';
    const started = Date.now();
    const result = await c.turn(1, ask('slow-stream'), [], (d) => (text += d), undefined, {
      deadlineAt: new Date(Date.now() + 60_000).toISOString(),
    });
    const took = Date.now() - started;
    // the client's own `timeout` covers only the headers: without the whole-request bound this took ~4.4 s and succeeded
    expect(result).toMatchObject({ ok: false, error: { kind: 'timeout', message: expect.stringMatching(/model timeout/) } });
    expect(took).toBeGreaterThanOrEqual(2_900);
    expect(took).toBeLessThan(5_500);
    expect(text).toContain('Paragraph 1.');
    expect(text).not.toContain('Paragraph 12.');
  });

  it.concurrent("the same stream is cut at the Run's deadline when that comes first", async () => {
    const paragraphs = Array.from({ length: 12 }, (_, i) => `Part ${i + 1}.`);
    model.setScenario({ steps: [{ reply: { content: paragraphs.join('\n\n') }, paragraphDelayMs: 400 }] }, 'slow-deadline');
    const started = Date.now();
    const result = await client().turn(1, ask('slow-deadline'), [], none, undefined, { deadlineAt: new Date(Date.now() + 1_200).toISOString() });
    const took = Date.now() - started;
    expect(result).toMatchObject({ ok: false, error: { kind: 'timeout', message: expect.stringMatching(/Run's deadline/) } });
    expect(took).toBeLessThan(2_200);
  });

  it.concurrent('an abort by the caller (process stopping, lease lost) is not reported as a timeout', async () => {
    model.setScenario({ steps: [{ reply: { content: 'A.\n\nB.\n\nC.' }, paragraphDelayMs: 1_000 }] }, 'caller-abort');
    const abort = new AbortController();
    setTimeout(() => abort.abort(), 300);
    const result = await client().turn(1, ask('caller-abort'), [], none, abort.signal, { deadlineAt: new Date(Date.now() + 60_000).toISOString() });
    expect(result.ok).toBe(false);
    expect(result.ok ? null : result.error.kind).not.toBe('timeout');
    expect(abort.signal.aborted).toBe(true);
  });

  it.concurrent(
    'an endpoint killed mid-stream is a connection failure (retried after a backoff, K7), not a malformed reply; then a refused connection is one too',
    async () => {
      const own = await startScriptedModel({ port: 0, scenario: { steps: [{ reply: { content: 'One.\n\nTwo.' }, paragraphDelayMs: 60_000 }] } });
      const c = new ModelClient({ baseURL: own.url, apiKey: 'k', model: 'scripted', timeoutMs: 60_000 });
      let streamed = '';
      const kill: { done?: Promise<void> } = {};
      const result = await c.turn(
        1,
        ask('killed'),
        [],
        (text) => {
          streamed += text;
          kill.done ??= own.close(); // the endpoint dies once the first paragraph arrived
        },
        undefined,
        { deadlineAt: new Date(Date.now() + 30_000).toISOString() },
      );
      await kill.done;
      expect(streamed).toBe('One.\n\n');
      expect(result).toMatchObject({ ok: false, error: { kind: 'connection', status: null, message: expect.stringMatching(/cut by the network/) } });
      const refused = await c.turn(2, ask('killed'), [], none, undefined, { deadlineAt: new Date(Date.now() + 30_000).toISOString() });
      // refused: the request never reached the provider (no output tokens are charged for it, K7)
      expect(refused).toMatchObject({
        ok: false,
        error: { kind: 'connection', status: null, refused: true, message: expect.stringMatching(/ECONNREFUSED/) },
      });
      expect(result.ok ? null : result.error.refused).toBeUndefined(); // the cut stream may have generated: not refused
    },
  );

  it.concurrent(
    'records each request it sent by model and finish, and the tokens the model reported; an aborted request as aborted, one never sent not at all',
    async () => {
      const count = async (finish: string, name = 'metered') =>
        (await modelRequestSeconds.get()).values.find(
          (v) => v.metricName === 'runplane_model_request_seconds_count' && v.labels.model === name && v.labels.finish === finish,
        )?.value ?? 0;
      const tokens = async (kind: string) =>
        (await modelTokensTotal.get()).values.find((v) => v.labels.model === 'metered' && v.labels.kind === kind)?.value ?? 0;
      const metered = new ModelClient({ baseURL: model.url, apiKey: 'k', model: 'metered', timeoutMs: 60_000 });
      model.setScenario(
        {
          steps: [
            { reply: { content: 'Metered.', usage: { promptTokens: 11, completionTokens: 7 } } },
            { error: { status: 429, message: 'slow down', retryAfter: 30 } },
          ],
        },
        'metered',
      );
      expect(await metered.turn(1, ask('metered'), [], none, undefined, {})).toMatchObject({ ok: true });
      expect([await count('stop'), await tokens('input'), await tokens('output')]).toEqual([1, 11, 7]);
      expect(await metered.turn(2, ask('metered'), [], none, undefined, {})).toMatchObject({ ok: false, error: { kind: 'http' } });
      expect(await count('http')).toBe(1);
      // the pause outlasts the deadline: never sent, never observed
      expect(await metered.turn(3, ask('metered'), [], none, undefined, { deadlineAt: new Date(Date.now() + 1_000).toISOString() })).toMatchObject({
        ok: false,
        error: { kind: 'not-sent' },
      });
      expect(await count('not-sent')).toBe(0);
      model.setScenario({ steps: [{ reply: { content: 'A.\n\nB.' }, paragraphDelayMs: 1_000 }] }, 'metered-abort');
      const abort = new AbortController();
      setTimeout(() => abort.abort(), 300);
      // another model: the 429 above paused every request to 'metered' (one limiter per model)
      const other = new ModelClient({ baseURL: model.url, apiKey: 'k', model: 'metered-other', timeoutMs: 60_000 });
      await other.turn(1, ask('metered-abort'), [], none, abort.signal, {});
      expect(await count('aborted', 'metered-other')).toBe(1);
    },
  );
});
