import { afterEach, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { requestKey, startScriptedModel, type ScriptedModel } from '../src/index.js';

let model: ScriptedModel | undefined;

afterEach(async () => {
  await model?.close();
  model = undefined;
});

async function start(): Promise<{ model: ScriptedModel; client: OpenAI; admin: (key: string | null, body: unknown) => Promise<Response> }> {
  model = await startScriptedModel({ scenario: { steps: [{ reply: { content: 'global 1' } }, { reply: { content: 'global 2' } }] } });
  const base = model.url.replace('/v1', '/_scripted/scenario');
  return {
    model,
    client: new OpenAI({ baseURL: model.url, apiKey: 'test', maxRetries: 0, timeout: 5000 }),
    admin: (key, body) =>
      fetch(key === null ? base : `${base}?key=${encodeURIComponent(key)}`, { method: 'POST', body: body === undefined ? '' : JSON.stringify(body) }),
  };
}

const ask = (text: string) => [{ role: 'user' as const, content: text }];
const content = (r: OpenAI.Chat.Completions.ChatCompletion) => r.choices[0]?.message.content;

describe('scenarios bound to a key (per conversation or Run)', () => {
  it('matches a Run by its key in the user message text, each key with its own step counter, interleaved', async () => {
    const { client, admin } = await start();
    for (const k of ['run-A', 'run-B']) {
      const r = await admin(k, { steps: [{ reply: { content: `${k} step 1` } }, { reply: { content: `${k} step 2` } }], then: 'error' });
      expect(r.status).toBe(200);
      expect(await r.json()).toEqual({ ok: true, key: k });
    }
    // Interleaved like concurrent Runs: A, B, B, A; then the global scenario is untouched.
    expect(content(await client.chat.completions.create({ model: 'm', messages: ask('[run-A] What does DIA hold?') }))).toBe('run-A step 1');
    expect(content(await client.chat.completions.create({ model: 'm', messages: ask('[run-B] What does DIA hold?') }))).toBe('run-B step 1');
    expect(content(await client.chat.completions.create({ model: 'm', messages: ask('[run-B] What does DIA hold?') }))).toBe('run-B step 2');
    expect(content(await client.chat.completions.create({ model: 'm', messages: ask('[run-A] What does DIA hold?') }))).toBe('run-A step 2');
    expect(content(await client.chat.completions.create({ model: 'm', messages: ask('no key here') }))).toBe('global 1');
    // A keyed scenario's `then` applies to its own requests only.
    const exhausted = await client.chat.completions.create({ model: 'm', messages: ask('[run-A] again') }).catch((e: unknown) => e);
    expect((exhausted as InstanceType<typeof OpenAI.APIError>).status).toBe(500);
    expect(content(await client.chat.completions.create({ model: 'm', messages: ask('no key here') }))).toBe('global 2');
    expect(model!.stats()).toMatchObject({ chatRequests: 7, perKey: { 'run-A': 3, 'run-B': 2 } });
  });

  it('streams a keyed reply to concurrent requests in their own order', async () => {
    const { client, admin } = await start();
    const keys = Array.from({ length: 8 }, (_, i) => `conv-${i}`);
    for (const k of keys) await admin(k, { steps: [{ reply: { content: `${k}:1` }, chunkDelayMs: 2 }, { reply: { content: `${k}:2` } }] });
    const turn = async (k: string) => {
      const s = await client.chat.completions.create({
        model: 'm',
        messages: [{ role: 'system', content: 'sys' }, ...ask(`Question for ${k}`)],
        stream: true,
      });
      let text = '';
      for await (const c of s) text += c.choices[0]?.delta.content ?? '';
      return text;
    };
    const first = await Promise.all(keys.map(turn));
    const second = await Promise.all([...keys].reverse().map(turn));
    expect(first).toEqual(keys.map((k) => `${k}:1`));
    expect(second).toEqual([...keys].reverse().map((k) => `${k}:2`));
  });

  it('matches the x-scripted-key header or the OpenAI user field exactly, before the message text', async () => {
    const { client, admin } = await start();
    await admin('alpha', { steps: [{ reply: { content: 'alpha' } }, { reply: { content: 'alpha again' } }] });
    await admin('beta', { steps: [{ reply: { content: 'beta' } }] });
    const byUser = await client.chat.completions.create({ model: 'm', messages: ask('mentions alpha'), user: 'beta' });
    expect(content(byUser)).toBe('beta');
    const byHeader = await client.chat.completions.create({ model: 'm', messages: ask('no key') }, { headers: { 'x-scripted-key': 'alpha' } });
    expect(content(byHeader)).toBe('alpha');
    expect(content(await client.chat.completions.create({ model: 'm', messages: ask('mentions alpha') }))).toBe('alpha again');
  });

  it('prefers the longest key in the text; the system prompt and tool messages do not match', () => {
    const keys = ['run-1', 'run-12'];
    expect(requestKey(keys, { messages: ask('about run-12 only') })).toBe('run-12');
    expect(requestKey(keys, { messages: ask('about run-1.') })).toBe('run-1');
    expect(requestKey(keys, { messages: [{ role: 'system', content: 'run-1' }, ...ask('none')] })).toBeUndefined();
    expect(requestKey([], { messages: ask('run-1') })).toBeUndefined();
  });

  it('removes a binding with an empty body, restarts keyed counters on reset, refuses an empty key or a bad scenario', async () => {
    const { client, admin, model } = await start();
    await admin('k1', { steps: [{ reply: { content: 'k1 step 1' } }, { reply: { content: 'k1 step 2' } }] });
    expect(content(await client.chat.completions.create({ model: 'm', messages: ask('k1') }))).toBe('k1 step 1');
    expect((await fetch(model.url.replace('/v1', '/_scripted/reset'), { method: 'POST' })).status).toBe(200);
    expect(content(await client.chat.completions.create({ model: 'm', messages: ask('k1') }))).toBe('k1 step 1');
    expect(model.keys()).toEqual(['k1']);

    expect((await admin('k1', undefined)).status).toBe(200);
    expect(model.keys()).toEqual([]);
    expect(content(await client.chat.completions.create({ model: 'm', messages: ask('k1') }))).toBe('global 1');

    expect((await admin('', { steps: [] })).status).toBe(400);
    const bad = await admin('k2', { steps: [{ hang: true, error: { status: 500, message: 'x' } }] });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(/key k2/);
    // Replacing the global scenario keeps the bindings.
    await admin('k3', { steps: [{ reply: { content: 'k3' } }] });
    expect((await admin(null, { steps: [{ reply: { content: 'new global' } }] })).status).toBe(200);
    expect(content(await client.chat.completions.create({ model: 'm', messages: ask('k3') }))).toBe('k3');
    expect(content(await client.chat.completions.create({ model: 'm', messages: ask('plain') }))).toBe('new global');
  });
});
