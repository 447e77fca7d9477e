import { afterEach, describe, expect, it, afterAll } from '@jest/globals';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError } from 'openai';
import { loadScenarioFile, parseScenario, startScriptedModel, type ScenarioInput, type ScriptedModel } from '../src/index.js';

/** Folders this file made in the temporary directory: removed when it ends. */
const made: string[] = [];
afterAll(async () => {
  await Promise.all(made.map((dir) => rm(dir, { recursive: true, force: true })));
});

const user = [{ role: 'user' as const, content: 'hello' }];
let model: ScriptedModel | undefined;

afterEach(async () => {
  await model?.close();
  model = undefined;
});

async function start(scenario?: ScenarioInput): Promise<{ model: ScriptedModel; client: OpenAI }> {
  model = await startScriptedModel(scenario ? { scenario } : {});
  return { model, client: new OpenAI({ baseURL: model.url, apiKey: 'test', maxRetries: 0, timeout: 5000 }) };
}

async function until(check: () => boolean, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('scripted model over HTTP through the openai client', () => {
  it('answers a non-streaming request with the scripted content, finish reason and usage', async () => {
    const { client, model } = await start({ steps: [{ reply: { content: 'Scripted hello.', usage: { promptTokens: 7, completionTokens: 3 } } }] });
    expect(model.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);

    const r = await client.chat.completions.create({ model: 'any', messages: user });

    expect(r.object).toBe('chat.completion');
    expect(r.model).toBe('any');
    expect(r.choices[0]?.message).toMatchObject({ role: 'assistant', content: 'Scripted hello.' });
    expect(r.choices[0]?.finish_reason).toBe('stop');
    expect(r.usage).toEqual({ prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 });
  });

  it('estimates usage as chars/4 when the scenario gives none', async () => {
    const { client } = await start({ steps: [{ reply: { content: '12345678' } }] });
    const r = await client.chat.completions.create({ model: 'm', messages: user });
    expect(r.usage?.completion_tokens).toBe(2);
    expect(r.usage?.prompt_tokens).toBe(Math.ceil(JSON.stringify(user).length / 4));
    expect(r.usage?.total_tokens).toBe((r.usage?.prompt_tokens ?? 0) + 2);
  });

  it('streams content in several chunks, then the finish reason, then a usage chunk with no choices', async () => {
    const content = 'The scripted model streams this sentence in several small pieces, word by word.';
    const { client } = await start({ steps: [{ reply: { content, usage: { prompt_tokens: 11, completion_tokens: 5 } } }] });

    const stream = await client.chat.completions.create({
      model: 'm',
      messages: user,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);

    expect(chunks[0]?.choices[0]?.delta.role).toBe('assistant');
    const pieces = chunks.flatMap((c) => (c.choices[0]?.delta.content ? [c.choices[0].delta.content] : []));
    expect(pieces.length).toBeGreaterThanOrEqual(3);
    expect(pieces.join('')).toBe(content);
    const finishes = chunks.flatMap((c) => (c.choices[0]?.finish_reason ? [c.choices[0].finish_reason] : []));
    expect(finishes).toEqual(['stop']);
    const last = chunks[chunks.length - 1];
    expect(last?.choices).toEqual([]);
    expect(last?.usage).toEqual({ prompt_tokens: 11, completion_tokens: 5, total_tokens: 16 });
  });

  it('streams a raw chunk script verbatim (malformed on purpose), and refuses it to a non-streaming request', async () => {
    const { client } = await start({
      steps: [
        {
          rawChunks: [
            { delta: { tool_calls: [{ index: 0, id: 'a', function: { name: 'f', arguments: { x: 1 } } }] } },
            { delta: { tool_calls: [{ index: 0, function: { name: 'f' } }] } },
            { finishReason: 'tool_calls' },
            { usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } },
          ],
        },
        { rawChunks: [{ finishReason: 'stop' }] },
      ],
    });
    const stream = await client.chat.completions.create({ model: 'm', messages: user, stream: true });
    const chunks: unknown[] = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks).toHaveLength(4);
    expect(chunks[0]).toMatchObject({ choices: [{ delta: { tool_calls: [{ index: 0, id: 'a', function: { name: 'f', arguments: { x: 1 } } }] } }] });
    expect(chunks[2]).toMatchObject({ choices: [{ finish_reason: 'tool_calls' }] });
    expect(chunks[3]).toMatchObject({ choices: [], usage: { total_tokens: 3 } });
    await expect(client.chat.completions.create({ model: 'm', messages: user })).rejects.toMatchObject({ status: 400 });
    expect(() => parseScenario({ steps: [{ rawChunks: [{ finishReason: 'stop' }], reply: { content: 'x' } }] })).toThrow(/exactly one/);
  });

  it('sends no usage chunk when include_usage is not asked for', async () => {
    const { client } = await start({ steps: [{ reply: { content: 'hi' } }] });
    const stream = await client.chat.completions.create({ model: 'm', messages: user, stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.every((c) => c.choices.length === 1 && !c.usage)).toBe(true);
  });

  it('streams tool calls as index/id/name deltas then argument fragments, which reassemble', async () => {
    const { client } = await start({
      steps: [
        {
          reply: {
            toolCalls: [
              { name: 'get_holdings', arguments: { fund: 'SPY', asOf: '2025-09-30' } },
              { name: 'get_holdings', arguments: { fund: 'QQQ' } },
            ],
          },
        },
      ],
    });

    const stream = await client.chat.completions.create({ model: 'm', messages: user, stream: true });
    const calls: Array<{ id?: string; name?: string; arguments: string }> = [];
    let finish: string | null | undefined;
    let argumentDeltas = 0;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      finish = choice?.finish_reason ?? finish;
      for (const d of choice?.delta.tool_calls ?? []) {
        const call = (calls[d.index] ??= { arguments: '' });
        if (d.id) call.id = d.id;
        if (d.function?.name) call.name = d.function.name;
        if (d.function?.arguments) {
          call.arguments += d.function.arguments;
          argumentDeltas++;
        }
      }
    }

    expect(finish).toBe('tool_calls');
    expect(argumentDeltas).toBeGreaterThan(2);
    expect(calls.map((c) => c.name)).toEqual(['get_holdings', 'get_holdings']);
    expect(calls.map((c) => JSON.parse(c.arguments) as unknown)).toEqual([{ fund: 'SPY', asOf: '2025-09-30' }, { fund: 'QQQ' }]);
    expect(calls[0]?.id).toMatch(/^call_/);
    expect(new Set(calls.map((c) => c.id)).size).toBe(2);
  });

  it('returns tool calls in a non-streaming reply with finish reason tool_calls', async () => {
    const { client } = await start({ steps: [{ reply: { toolCalls: [{ name: 'list_funds', arguments: {} }] } }] });
    const r = await client.chat.completions.create({ model: 'm', messages: user });
    const call = r.choices[0]?.message.tool_calls?.[0];
    expect(r.choices[0]?.finish_reason).toBe('tool_calls');
    expect(call?.type).toBe('function');
    expect(call?.type === 'function' && call.function).toEqual({ name: 'list_funds', arguments: '{}' });
  });

  it('reports a scripted finish reason length', async () => {
    const { client } = await start({ steps: [{ reply: { content: 'cut sho', finishReason: 'length' } }] });
    const stream = await client.chat.completions.create({ model: 'm', messages: user, stream: true });
    const finishes: string[] = [];
    for await (const c of stream) if (c.choices[0]?.finish_reason) finishes.push(c.choices[0].finish_reason);
    expect(finishes).toEqual(['length']);
  });

  it('surfaces an injected 500 as an APIError without retry (one request counted)', async () => {
    const { client, model } = await start({ steps: [{ error: { status: 500, message: 'injected failure' } }] });

    const error = await client.chat.completions.create({ model: 'm', messages: user }).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).status).toBe(500);
    expect((error as APIError).message).toContain('injected failure');
    expect((error as APIError).type).toBe('server_error');
    expect(model.stats().total).toBe(1);
    expect(model.stats().perPath['/v1/chat/completions']).toBe(1);
  });

  it('uses the scripted error type (e.g. 429 rate limit)', async () => {
    const { client } = await start({ steps: [{ error: { status: 429, message: 'slow down', type: 'rate_limit_exceeded' } }] });
    const error = (await client.chat.completions.create({ model: 'm', messages: user }).catch((e: unknown) => e)) as APIError;
    expect(error.status).toBe(429);
    expect(error.type).toBe('rate_limit_exceeded');
  });

  it('sends a scripted Retry-After with an error, repeats the last step forever with then: repeat-last, and records arrival times', async () => {
    const { client, model: m } = await start({ steps: [{ error: { status: 429, message: 'slow down', retryAfter: 2 } }], then: 'repeat-last' });
    for (let i = 0; i < 3; i++) {
      const error = (await client.chat.completions.create({ model: 'm', messages: user }).catch((e: unknown) => e)) as APIError;
      expect(error.status).toBe(429);
      expect(error.headers?.get('retry-after')).toBe('2');
    }
    const arrivals = m.stats().arrivals;
    expect(arrivals).toHaveLength(3);
    expect(arrivals.every((a, i) => a.key === null && (i === 0 || a.at >= arrivals[i - 1]!.at))).toBe(true);
  });

  it('waits delayMs before answering', async () => {
    const { client } = await start({ steps: [{ reply: { content: 'late' }, delayMs: 300 }] });
    const t0 = Date.now();
    const r = await client.chat.completions.create({ model: 'm', messages: user });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(280);
    expect(r.choices[0]?.message.content).toBe('late');
  });

  it('waits chunkDelayMs between stream chunks', async () => {
    const { client } = await start({ steps: [{ reply: { content: 'a b' }, chunkDelayMs: 60 }] });
    const t0 = Date.now();
    const stream = await client.chat.completions.create({ model: 'm', messages: user, stream: true });
    let chunks = 0;
    for await (const _ of stream) chunks++;
    // role, content, finish: 3 chunks, 2 gaps of >= 60 ms.
    expect(chunks).toBe(3);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(115);
  });

  it('waits paragraphDelayMs after each finished paragraph, and never sends the end of one paragraph with the start of the next', async () => {
    const { client } = await start({ steps: [{ reply: { content: 'First one.\n\nSecond one.\n\nThird.' }, paragraphDelayMs: 150 }] });
    const t0 = Date.now();
    const stream = await client.chat.completions.create({ model: 'm', messages: user, stream: true });
    const pieces: { text: string; at: number }[] = [];
    for await (const chunk of stream) {
      const text = chunk.choices[0]?.delta?.content;
      if (text) pieces.push({ text, at: Date.now() });
    }
    expect(pieces.map((p) => p.text).join('')).toBe('First one.\n\nSecond one.\n\nThird.');
    const ends = pieces.map((p, i) => ({ i, end: p.text.endsWith('\n\n') })).filter((p) => p.end);
    expect(ends).toHaveLength(2);
    // The server waits 150 ms after each paragraph end, so the last piece cannot come before 2 x 150 ms from the request.
    // Each gap as the client sees it is 150 ms plus the later piece's delivery delay minus the earlier one's: a busy
    // event loop that reads a paragraph end late shortens it (CI saw 137 ms), so each gap only has to show a wait.
    expect(pieces.at(-1)!.at - t0).toBeGreaterThanOrEqual(295);
    for (const { i } of ends) expect(pieces[i + 1]!.at - pieces[i]!.at).toBeGreaterThanOrEqual(75);
    expect(pieces.some((p) => /\n\n./s.test(p.text))).toBe(false);
  });

  it('a hang hits the client timeout; the server drops the request and keeps serving', async () => {
    const { model } = await start({ steps: [{ hang: true }, { hang: true }, { reply: { content: 'after the hangs' } }] });
    // 1 s, not less: client and server share this event loop, and after a stall of the process (a loaded CI)
    // Node runs due timers before it polls sockets, so a shorter timeout could abort a request the server never read
    const impatient = new OpenAI({ baseURL: model.url, apiKey: 'test', maxRetries: 0, timeout: 1000 });

    const t0 = Date.now();
    const error = await impatient.chat.completions.create({ model: 'm', messages: user }).catch((e: unknown) => e);

    // Under Jest's VM realm, fetch's AbortError (a DOMException of the outer realm) is not an
    // `Error` here, so openai's castToError drops its name and reports a plain connection error.
    expect(error).toBeInstanceOf(APIConnectionError);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(980);
    // With the abort error re-created in this realm, the client classifies it as a timeout.
    const realmFetch: typeof fetch = async (url, init) => {
      try {
        return await fetch(url, init);
      } catch (e) {
        if (e instanceof Error || typeof e !== 'object' || e === null) throw e;
        const wrapped = new Error(String((e as { message?: unknown }).message));
        wrapped.name = String((e as { name?: unknown }).name);
        throw wrapped;
      }
    };
    const timed = new OpenAI({ baseURL: model.url, apiKey: 'test', maxRetries: 0, timeout: 1000, fetch: realmFetch });
    const timeout = await timed.chat.completions.create({ model: 'm', messages: user }).catch((e: unknown) => e);
    expect(timeout).toBeInstanceOf(APIConnectionTimeoutError);

    await until(() => model.stats().open === 0);
    expect(model.stats()).toMatchObject({ total: 2, aborted: 2, open: 0 });
    const r = await impatient.chat.completions.create({ model: 'm', messages: user });
    expect(r.choices[0]?.message.content).toBe('after the hangs');
  });

  it('close() ends a hanging request instead of waiting for it', async () => {
    const { client, model } = await start({ steps: [{ hang: true }] });
    const pending = client.chat.completions.create({ model: 'm', messages: user }).catch((e: unknown) => e);
    await until(() => model.stats().open === 1);

    await model.close();

    expect(await pending).toBeInstanceOf(APIConnectionError);
  });

  it('survives a client aborting mid-stream', async () => {
    // About 40 chunks 100 ms apart: the client aborts long before the stream could finish.
    const { client, model } = await start({
      steps: [{ reply: { content: 'one two three four five six seven eight nine ten '.repeat(25) }, chunkDelayMs: 100 }],
    });
    const controller = new AbortController();
    const stream = await client.chat.completions.create({ model: 'm', messages: user, stream: true }, { signal: controller.signal });
    let n = 0;
    await (async () => {
      for await (const _ of stream) if (++n === 2) controller.abort();
    })().catch(() => undefined);
    await until(() => model.stats().open === 0);
    expect(model.stats().aborted).toBe(1);
    const r = await client.chat.completions.create({ model: 'm', messages: user });
    expect(r.choices[0]?.finish_reason).toBe('stop');
  });

  it('counts requests per path, keeps the bodies, and does not count admin requests', async () => {
    const { client, model } = await start({ steps: [{ reply: { content: 'a' } }, { reply: { content: 'b' } }] });
    await client.chat.completions.create({ model: 'm1', messages: user });
    await client.chat.completions.create({ model: 'm2', messages: user, stream: true }).then(async (s) => {
      for await (const _ of s);
    });
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['scripted-research']);

    const viaHttp = (await (await fetch(model.url.replace('/v1', '/_scripted/stats'))).json()) as Record<string, unknown>;
    const stats = model.stats();

    expect(stats.total).toBe(3);
    expect(stats.perPath).toEqual({ '/v1/chat/completions': 2, '/v1/models': 1 });
    expect(stats.bodies.map((b) => (b as { model: string }).model)).toEqual(['m1', 'm2']);
    expect(viaHttp).toMatchObject({ total: 3, perPath: { '/v1/chat/completions': 2, '/v1/models': 1 } });

    const reset = await fetch(model.url.replace('/v1', '/_scripted/reset'), { method: 'POST' });
    expect(reset.status).toBe(200);
    expect(model.stats()).toMatchObject({ total: 0, perPath: {}, bodies: [] });
    // The scenario starts over after a reset.
    const again = await client.chat.completions.create({ model: 'm', messages: user });
    expect(again.choices[0]?.message.content).toBe('a');
  });

  it('rejects a malformed request with 400 and a reason, without taking a step', async () => {
    const { client, model } = await start({ steps: [{ reply: { content: 'first step' } }] });
    const post = (body: string) => fetch(`${model.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });

    const notJson = await post('{nope');
    const noMessages = await post(JSON.stringify({ model: 'm' }));
    const badRole = await post(JSON.stringify({ model: 'm', messages: [{ role: 'wizard', content: 'x' }] }));

    expect(notJson.status).toBe(400);
    expect(((await notJson.json()) as { error: { message: string } }).error.message).toMatch(/not valid JSON/);
    expect(noMessages.status).toBe(400);
    const noMessagesBody = (await noMessages.json()) as { error: { message: string; type: string } };
    expect(noMessagesBody.error.type).toBe('invalid_request_error');
    expect(noMessagesBody.error.message).toMatch(/messages/);
    expect(badRole.status).toBe(400);
    expect(((await badRole.json()) as { error: { message: string } }).error.message).toMatch(/messages\[0\]\.role/);
    const r = await client.chat.completions.create({ model: 'm', messages: user });
    expect(r.choices[0]?.message.content).toBe('first step');
    expect(model.stats().total).toBe(4);
  });

  it('refuses unpaired tool messages as the real API does: 400 invalid_request_error through the openai client, no step taken', async () => {
    const { client, model } = await start({ steps: [{ reply: { content: 'first step' } }] });
    const call = {
      role: 'assistant' as const,
      content: null,
      tool_calls: [{ id: 'c1', type: 'function' as const, function: { name: 'f', arguments: '{}' } }],
    };
    const unanswered = await client.chat.completions.create({ model: 'm', messages: [...user, call] }).catch((e: unknown) => e);
    expect(unanswered).toBeInstanceOf(APIError);
    expect((unanswered as APIError).status).toBe(400);
    expect((unanswered as APIError).type).toBe('invalid_request_error');
    expect((unanswered as APIError).message).toMatch(/did not have response messages: c1/);
    const orphan = await client.chat.completions
      .create({ model: 'm', messages: [...user, { role: 'tool', tool_call_id: 'c1', content: '{}' }] })
      .catch((e: unknown) => e);
    expect((orphan as APIError).status).toBe(400);
    expect((orphan as APIError).message).toMatch(/must be a response to a preceeding message with 'tool_calls'/);
    const paired = await client.chat.completions.create({
      model: 'm',
      messages: [...user, call, { role: 'tool', tool_call_id: 'c1', content: '{}' }],
    });
    expect(paired.choices[0]?.message.content).toBe('first step');
    expect(model.stats()).toMatchObject({ rejected: 2, chatRequests: 1 });
  });

  it('answers 404 for unknown endpoints and 405 for a wrong method', async () => {
    const { model } = await start();
    const missing = await fetch(`${model.url}/embeddings`, { method: 'POST', body: '{}' });
    const wrong = await fetch(`${model.url}/chat/completions`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { type: string } }).error.type).toBe('invalid_request_error');
    expect(wrong.status).toBe(405);
  });

  it('after the steps, then=error answers 500 scenario_exhausted; the default falls back to the research policy', async () => {
    const { client } = await start({ steps: [{ reply: { content: 'only step' } }], then: 'error' });
    await client.chat.completions.create({ model: 'm', messages: user });
    const error = (await client.chat.completions.create({ model: 'm', messages: user }).catch((e: unknown) => e)) as APIError;
    expect(error.status).toBe(500);
    expect(error.type).toBe('scenario_exhausted');

    await model?.close();
    const fallback = await start({ steps: [] });
    const r = await fallback.client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'Compare SPY and QQQ' }],
      tools: [{ type: 'function', function: { name: 'list_funds', parameters: { type: 'object' } } }],
    });
    const call = r.choices[0]?.message.tool_calls?.[0];
    expect(call?.type === 'function' && call.function.name).toBe('list_funds');
  });

  it('loads a new scenario through POST /_scripted/scenario and rejects a bad one with 400', async () => {
    const { client, model } = await start();
    const admin = (body: unknown) => fetch(model.url.replace('/v1', '/_scripted/scenario'), { method: 'POST', body: JSON.stringify(body) });
    expect((await admin({ steps: [{ reply: { content: 'loaded' } }] })).status).toBe(200);
    expect((await client.chat.completions.create({ model: 'm', messages: user })).choices[0]?.message.content).toBe('loaded');
    const bad = await admin({ steps: [{ reply: {}, hang: true }] });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(/exactly one of/);
  });
});

describe('scenario files', () => {
  async function fileWith(text: string): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'scripted-model-'));
    made.push(dir);
    const path = join(dir, 'scenario.json');
    await writeFile(path, text);
    return path;
  }

  it('loads a valid file with defaults', async () => {
    const path = await fileWith(JSON.stringify({ steps: [{ reply: { content: 'x' }, delayMs: 5 }, { hang: true }] }));
    const scenario = await loadScenarioFile(path);
    expect(scenario.then).toBe('research-policy');
    expect(scenario.steps).toHaveLength(2);
  });

  it('rejects a bad file with a message naming the file and the faulty field', async () => {
    const path = await fileWith(JSON.stringify({ steps: [{ reply: { content: 'ok', finishReason: 'done' } }] }));
    await expect(loadScenarioFile(path)).rejects.toThrow(path);
    await expect(loadScenarioFile(path)).rejects.toThrow(/steps\[0\]\.reply\.finishReason/);
  });

  it('rejects a file that is not JSON, a step with two kinds, and an unknown key', async () => {
    await expect(loadScenarioFile(await fileWith('{ steps: ['))).rejects.toThrow(/is not valid JSON/);
    expect(() => parseScenario({ steps: [{ error: { status: 500, message: 'x' }, hang: true }] })).toThrow(
      /exactly one of "reply", "error", "hang": true or "rawChunks"/,
    );
    expect(() => parseScenario({ steps: [{ reply: { content: 'x', tool_calls: [] } }] })).toThrow(/tool_calls/);
    await expect(loadScenarioFile('/nonexistent/scenario.json')).rejects.toThrow(/cannot be read/);
  });

  it('startScriptedModel rejects an invalid scenario object', async () => {
    await expect(startScriptedModel({ scenario: { steps: [{ error: { status: 200, message: 'not an error' } }] } })).rejects.toThrow(
      /steps\[0\]\.error\.status/,
    );
  });
});

describe('CLI (dist/main.js)', () => {
  const main = join(process.cwd(), 'apps/scripted-model/dist/main.js');

  it('prints exactly one listening line, serves, and exits 0 on SIGTERM', async () => {
    const child = spawn(process.execPath, [main, '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const lines: string[] = [];
    const rl = createInterface({ input: child.stdout });
    const first = await new Promise<string>((resolve) => rl.once('line', resolve));
    rl.on('line', (l) => lines.push(l));
    expect(first).toMatch(/^scripted-model listening on http:\/\/127\.0\.0\.1:\d+\/v1$/);

    const baseURL = first.replace('scripted-model listening on ', '');
    const client = new OpenAI({ baseURL, apiKey: 'test', maxRetries: 0, timeout: 5000 });
    const r = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'What funds are there?' }] });
    expect(r.choices[0]?.finish_reason).toBe('stop');

    const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exit).toBe(0);
    expect(lines).toEqual([]);
  });

  it('exits 2 with a clear message for a bad scenario file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'scripted-model-'));
    made.push(dir);
    const path = join(dir, 'bad.json');
    await writeFile(path, JSON.stringify({ steps: [{ wait: 5 }] }));
    const child = spawn(process.execPath, [main, '--scenario', path], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    let stdout = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
    expect(code).toBe(2);
    expect(stdout).toBe('');
    expect(stderr).toContain(`scenario file ${path} is not a valid scenario`);
    expect(stderr).toMatch(/wait/);
  });
});
