/**
 * The scripted model server: an OpenAI-compatible HTTP endpoint (`/v1/chat/completions`,
 * `/v1/models`) answering from a scenario and, after it or without one, the research policy.
 *
 * Scenarios are global (one step counter for every request) or bound to a key: a keyed scenario
 * has its own step counter and answers only the requests that carry its key (see
 * {@link requestKey}), so concurrent Runs each follow their own script.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { researchPolicy } from './research-policy.js';
import { actionFor, parseScenario, ScenarioFileError, type Scenario, type ScenarioInput, type StepAction } from './scenario.js';
import {
  ChatCompletionRequest,
  completionBody,
  contentText,
  errorBody,
  errorTypeFor,
  rawChunkBody,
  resolveReply,
  streamChunks,
  toolPairingError,
  type Reply,
} from './wire.js';

export interface ScriptedModelOptions {
  /** TCP port; 0 or absent = any free port. */
  port?: number;
  /** Interface to listen on; default 127.0.0.1. */
  host?: string;
  /** Scripted answers; absent = every request is answered by the policy. */
  scenario?: Scenario | ScenarioInput;
  /** The policy answering requests not covered by the scenario; only `research` exists (the default). */
  policy?: 'research';
  /** Largest accepted request body in bytes (default 32 MiB); larger ones get 413. */
  maxBodyBytes?: number;
}

/** What the server received since start or the last reset. Admin (`/_scripted/*`) requests are not counted. */
export interface ScriptedModelStats {
  /** Model requests received (any path except `/_scripted/*`), including rejected ones. */
  total: number;
  /** Model requests received per URL path (query string dropped), e.g. `/v1/chat/completions`. */
  perPath: Record<string, number>;
  /** Bodies of the chat-completion requests received, in order: parsed JSON, or the raw text when it did not parse. */
  bodies: unknown[];
  /** Chat requests that were given a step (well-formed ones). */
  chatRequests: number;
  /** When each well-formed chat request arrived (epoch ms) and the scenario key it matched, in arrival order. */
  arrivals: { at: number; key: string | null }[];
  /** Chat requests refused for unpaired tool messages (a call without its result, a result without its call), as the real API does. */
  rejected: number;
  /** Chat requests answered from each keyed scenario's counter, by key (steps taken, policy after them included). */
  perKey: Record<string, number>;
  /** Requests whose client went away before the answer was complete (aborts, timeouts, hangs). */
  aborted: number;
  /** Model requests being answered right now (a hang stays open until its client goes away). */
  open: number;
}

export interface ScriptedModel {
  /** Base URL for the `openai` client, ending in `/v1` (e.g. `http://127.0.0.1:41234/v1`). */
  readonly url: string;
  readonly port: number;
  /** A snapshot of the counters (see {@link ScriptedModelStats}). */
  stats(): ScriptedModelStats;
  /** Clears the counters and restarts the scenario at step 0 (also `POST /_scripted/reset`). */
  reset(): void;
  /**
   * Without `key`: replaces the global scenario and resets (also `POST /_scripted/scenario`).
   * With `key`: binds the scenario to that key with its own counter at step 0, or removes the
   * binding when `scenario` is undefined; the global scenario and other keys are untouched
   * (also `POST /_scripted/scenario?key=K`).
   * @throws ScenarioFileError
   */
  setScenario(scenario: Scenario | ScenarioInput | undefined, key?: string): void;
  /** The keys that have a scenario bound, in binding order. */
  keys(): string[];
  /** Stops listening and drops every open connection, hanging ones included. */
  close(): Promise<void>;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

function sendError(res: ServerResponse, status: number, message: string, type = errorTypeFor(status), headers: Record<string, string> = {}): void {
  sendJson(res, status, errorBody(message, type), headers);
}

async function readBody(req: IncomingMessage, limit: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) throw new HttpError(413, `request body is larger than ${limit} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Waits `ms`; resolves false instead when `signal` aborts first. */
/** The content delta of a stream chunk ('' for none). */
function chunkContent(chunk: Record<string, unknown>): string {
  const choices = chunk.choices as Array<{ delta?: { content?: unknown } }> | undefined;
  const content = choices?.[0]?.delta?.content;
  return typeof content === 'string' ? content : '';
}

/** How many blank-line paragraph separators `text` holds. */
function paragraphSeparators(text: string): number {
  return text.match(/\r?\n[ \t]*\r?\n/g)?.length ?? 0;
}

async function wait(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return false;
  if (ms <= 0) return true;
  try {
    await sleep(ms, undefined, { signal });
    return true;
  } catch {
    return false;
  }
}

async function writeChunk(res: ServerResponse, data: string): Promise<void> {
  if (res.destroyed) return;
  if (!res.write(`data: ${data}\n\n`)) {
    await new Promise<void>((resolve) => {
      res.once('drain', resolve);
      res.once('close', resolve);
    });
  }
}

/** Header naming the scenario key of a request explicitly. */
export const SCENARIO_KEY_HEADER = 'x-scripted-key';

/**
 * The bound key a chat request belongs to, if any: the `x-scripted-key` header or the OpenAI
 * `user` field when it equals a bound key, else the longest bound key that occurs in the text of a
 * user message (so a Run is matched by an id in its question, with no change to the caller).
 */
export function requestKey(
  keys: Iterable<string>,
  request: Pick<ChatCompletionRequest, 'messages'> & { user?: unknown },
  header?: string | string[],
): string | undefined {
  const bound = new Set(keys);
  if (bound.size === 0) return undefined;
  const explicit = [...(Array.isArray(header) ? header : header ? [header] : []), typeof request.user === 'string' ? request.user : undefined];
  for (const k of explicit) if (k !== undefined && bound.has(k)) return k;
  const texts = request.messages.filter((m) => m.role === 'user').map((m) => contentText(m.content));
  let best: string | undefined;
  for (const k of bound) {
    if (k.length > (best?.length ?? 0) && texts.some((t) => t.includes(k))) best = k;
  }
  return best;
}

/**
 * Starts the scripted model server.
 * @returns once listening; `url` is the base URL for the `openai` client.
 * @throws ScenarioFileError when `scenario` is not valid; the listen error when the port is taken.
 */
export async function startScriptedModel(options: ScriptedModelOptions = {}): Promise<ScriptedModel> {
  const host = options.host ?? '127.0.0.1';
  const maxBodyBytes = options.maxBodyBytes ?? 32 * 1024 * 1024;
  let scenario: Scenario | undefined = options.scenario ? parseScenario(options.scenario) : undefined;

  let stats: ScriptedModelStats;
  const resetStats = () => {
    stats = { total: 0, perPath: {}, bodies: [], chatRequests: 0, arrivals: [], rejected: 0, perKey: {}, aborted: 0, open: 0 };
  };
  resetStats();
  let stepIndex = 0;
  /** Keyed scenarios, each with its own next step index. */
  const keyed = new Map<string, { scenario: Scenario; next: number }>();
  const openResponses = new Set<ServerResponse>();

  const nextAction = (key: string | undefined): StepAction => {
    const bound = key === undefined ? undefined : keyed.get(key);
    if (key !== undefined && bound) {
      stats.perKey[key] = (stats.perKey[key] ?? 0) + 1;
      return actionFor(bound.scenario, bound.next++);
    }
    const index = stepIndex++;
    return scenario ? actionFor(scenario, index) : { kind: 'policy' };
  };

  async function answer(
    res: ServerResponse,
    request: ChatCompletionRequest,
    reply: Reply,
    timing: { chunkDelayMs: number; paragraphDelayMs: number },
    signal: AbortSignal,
    sequence: number,
  ) {
    const resolved = resolveReply(reply, request, sequence);
    if (!request.stream) {
      sendJson(res, 200, completionBody(resolved));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    const chunks = streamChunks(resolved, request.stream_options?.include_usage === true);
    let sent = '';
    let separators = 0;
    for (let i = 0; i < chunks.length; i++) {
      if (i > 0 && !(await wait(timing.chunkDelayMs, signal))) return;
      if (signal.aborted) return;
      await writeChunk(res, JSON.stringify(chunks[i]));
      if (timing.paragraphDelayMs > 0) {
        // a paragraph is finished once a blank-line separator follows it: pause after the chunk that completes one
        sent += chunkContent(chunks[i]!);
        const now = paragraphSeparators(sent);
        if (now > separators && !(await wait(timing.paragraphDelayMs, signal))) return;
        separators = now;
      }
    }
    if (signal.aborted) return;
    await writeChunk(res, '[DONE]');
    res.end();
  }

  async function chat(req: IncomingMessage, res: ServerResponse, signal: AbortSignal): Promise<void> {
    const text = await readBody(req, maxBodyBytes);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (e) {
      stats.bodies.push(text);
      throw new HttpError(400, `request body is not valid JSON: ${(e as Error).message}`);
    }
    stats.bodies.push(json);
    const parsed = ChatCompletionRequest.safeParse(json);
    if (!parsed.success) throw new HttpError(400, `invalid chat completion request: ${z.prettifyError(parsed.error)}`);
    const request = parsed.data;
    // as strict as the real API: a tool call without its result, or a result without its call, is refused
    const pairing = toolPairingError(request.messages);
    if (pairing) {
      stats.rejected++;
      throw new HttpError(400, pairing);
    }
    stats.chatRequests++;
    const sequence = stats.chatRequests;
    const key = requestKey(keyed.keys(), request, req.headers[SCENARIO_KEY_HEADER]);
    stats.arrivals.push({ at: Date.now(), key: key ?? null });
    const action = nextAction(key);

    if (action.kind !== 'policy' && !(await wait(action.delayMs, signal))) return;
    switch (action.kind) {
      case 'hang':
        // Never answer: the response stays open until the client goes away or the server closes.
        await new Promise<void>((resolve) => {
          if (signal.aborted) resolve();
          else signal.addEventListener('abort', () => resolve(), { once: true });
        });
        return;
      case 'error':
        sendError(
          res,
          action.status,
          action.message,
          action.type ?? errorTypeFor(action.status),
          action.retryAfter !== undefined ? { 'retry-after': String(action.retryAfter) } : {},
        );
        return;
      case 'reply':
        await answer(res, request, action.reply, { chunkDelayMs: action.chunkDelayMs, paragraphDelayMs: action.paragraphDelayMs }, signal, sequence);
        return;
      case 'policy':
        await answer(res, request, researchPolicy(request.messages, request.tools), { chunkDelayMs: 0, paragraphDelayMs: 0 }, signal, sequence);
        return;
      case 'raw':
        if (!request.stream) throw new HttpError(400, 'this scenario step is a raw chunk script: it answers streaming requests only');
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
        for (const [i, raw] of action.chunks.entries()) {
          if (i > 0 && !(await wait(action.chunkDelayMs, signal))) return;
          if (signal.aborted) return;
          await writeChunk(res, JSON.stringify(rawChunkBody(raw, sequence, request.model)));
        }
        if (signal.aborted) return;
        await writeChunk(res, '[DONE]');
        res.end();
        return;
    }
  }

  async function admin(path: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? 'GET';
    const key = new URL(req.url ?? '/', 'http://x').searchParams.get('key') ?? undefined;
    if (key === '') throw new HttpError(400, 'the scenario key must not be empty');
    if (path === '/_scripted/stats' && method === 'GET') return sendJson(res, 200, model.stats());
    if (path === '/_scripted/reset' && method === 'POST') {
      await readBody(req, maxBodyBytes);
      model.reset();
      return sendJson(res, 200, { ok: true });
    }
    if (path === '/_scripted/scenario' && method === 'POST') {
      const text = await readBody(req, maxBodyBytes);
      let json: unknown;
      try {
        json = text.trim() === '' ? undefined : JSON.parse(text);
      } catch (e) {
        throw new HttpError(400, `scenario body is not valid JSON: ${(e as Error).message}`);
      }
      try {
        model.setScenario(json === null ? undefined : (json as ScenarioInput | undefined), key);
      } catch (e) {
        if (e instanceof ScenarioFileError) throw new HttpError(400, e.message);
        throw e;
      }
      return sendJson(res, 200, { ok: true, ...(key !== undefined && { key }) });
    }
    throw new HttpError(404, `no admin endpoint ${method} ${path}`);
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const method = req.method ?? 'GET';
    if (path.startsWith('/_scripted/')) return admin(path, req, res);

    stats.total++;
    stats.perPath[path] = (stats.perPath[path] ?? 0) + 1;
    stats.open++;
    openResponses.add(res);
    const controller = new AbortController();
    res.on('close', () => {
      stats.open--;
      openResponses.delete(res);
      if (!res.writableFinished) {
        stats.aborted++;
        controller.abort();
      }
    });

    if (path === '/v1/chat/completions') {
      if (method !== 'POST') throw new HttpError(405, `${method} is not allowed on ${path}; use POST`);
      return chat(req, res, controller.signal);
    }
    if (path === '/v1/models') {
      if (method !== 'GET') throw new HttpError(405, `${method} is not allowed on ${path}; use GET`);
      return sendJson(res, 200, {
        object: 'list',
        data: [{ id: 'scripted-research', object: 'model', created: 0, owned_by: 'runplane-scripted-model' }],
      });
    }
    throw new HttpError(404, `unknown endpoint ${method} ${path}`);
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((e: unknown) => {
      if (e instanceof HttpError) sendError(res, e.status, e.message);
      else if (!res.headersSent) sendError(res, 500, `scripted model failed: ${(e as Error)?.message ?? String(e)}`);
      else res.destroy();
    });
  });
  server.on('clientError', (_err, socket) => socket.destroy());
  // idle kept-alive connections live a minute, not Node's 5 s: a client (the runtime's openai
  // client, a test's fetch) reusing one just as a short timeout passed got "other side closed"
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  const model: ScriptedModel = {
    url: `http://${urlHost}:${port}/v1`,
    port,
    stats: () => structuredClone(stats),
    reset: () => {
      resetStats();
      stepIndex = 0;
      for (const b of keyed.values()) b.next = 0;
      // Responses still open keep their place in `open` until they close.
      stats.open = openResponses.size;
    },
    setScenario: (next, key) => {
      if (key !== undefined) {
        if (next) keyed.set(key, { scenario: parseScenario(next, `scenario for key ${key}`), next: 0 });
        else keyed.delete(key);
        delete stats.perKey[key];
        return;
      }
      scenario = next ? parseScenario(next) : undefined;
      model.reset();
    },
    keys: () => [...keyed.keys()],
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const res of openResponses) res.destroy();
      server.closeAllConnections();
      await closed;
    },
  };
  return model;
}
