/**
 * The only path to the model: the `openai` client, chat completions with tools, streaming.
 * The client's own retries are off (`maxRetries: 0`): one layer retries, and it is not this one
 * (K7: the runtime's decider, each retry a new charged turn after the backoff recorded on the
 * failure). Errors are classified for the `model.turn.failed` fact.
 */
import PQueue from 'p-queue';
import { MAX_TIMER_MS } from '@runplane/contracts';
import OpenAI from 'openai';
import { SpanStatusCode, type Span } from '@opentelemetry/api';
import { inSpan, SpanKind, traceContext } from '@runplane/eventlog';
import { modelRequestSeconds, modelTokensTotal } from '@runplane/service-kit';
import type { ModelTurnResult } from './decide.js';
import { TurnAssembler } from './turn-assembly.js';

export interface ModelClientOptions {
  baseURL: string;
  apiKey: string;
  model: string;
  /**
   * Per request, milliseconds: bounds the WHOLE request, response headers and streamed body
   * (further bounded by the time left to the Run's deadline, K7).
   */
  timeoutMs: number;
  /** Model requests in flight at once for this model, across all Runs of this process (K7). Default 8. */
  maxConcurrent?: number;
  /** Smallest gap between the starts of two requests to this model, ms (a request rate). Default 0. */
  minIntervalMs?: number;
}

/** How long a 429 without `Retry-After` pauses the model's limiter, ms. */
export const DEFAULT_RATE_LIMIT_PAUSE_MS = 1_000;

/** Per-request options of {@link ModelClient.turn}. */
export interface TurnOptions {
  /** `max_tokens` to send: the ledger's reservation (K7). */
  maxTokens?: number;
  /** The Run's deadline: the request (and any wait for the limiter) never goes past it. */
  deadlineAt?: string;
  /** Offer no tools (the finalization request, K9). */
  noTools?: boolean;
}

/**
 * One limiter per model for every Run of this runtime process (K7): a provider's rate limit is
 * shared, so concurrency and request rate are limited here (`p-queue`: at most `maxConcurrent`
 * requests at once, and with `minIntervalMs` at most one start in any such period, a sliding
 * window; a request with room starts at once, without a timer), and a 429 (or 503) with
 * `Retry-After` pauses every Run's next request to that model until then, not only the Run that
 * got it. Never waits past a request's deadline, in the queue (every slot busy) or in a pause:
 * such a request is not sent (a `not-sent` failure: the provider received nothing, so nothing is
 * charged, K7). A request whose caller aborts while it waits leaves the queue at once, unsent.
 */
export class ModelRateLimiter {
  private readonly queue: PQueue;
  /** Epoch ms before which no request to this model starts (a provider's Retry-After). */
  private pausedUntil = 0;

  constructor(opts: { maxConcurrent?: number; minIntervalMs?: number } = {}) {
    const interval = opts.minIntervalMs ?? 0;
    this.queue = new PQueue({ concurrency: opts.maxConcurrent ?? 8, ...(interval > 0 ? { interval, intervalCap: 1, strict: true } : {}) });
  }

  /** Every request waits at least until `untilMs` (epoch ms) before it starts. */
  pauseUntil(untilMs: number): void {
    this.pausedUntil = Math.max(this.pausedUntil, untilMs);
  }

  /** How long (ms) the provider's rate-limit pause still lasts; 0 when none. */
  pauseLeftMs(): number {
    return Math.max(0, this.pausedUntil - Date.now());
  }

  /**
   * Waits out the rate-limit pause before a request is recorded as requested: a Run queued
   * behind a provider's Retry-After has no turn "in flight". Returns at once when there is no
   * pause, when the pause ends after `deadlineMs` (the request will then be `not-sent`), or when
   * `signal` aborts. @returns true when it waited.
   */
  async waitForPause(deadlineMs: number, signal?: AbortSignal): Promise<boolean> {
    let waited = false;
    for (;;) {
      const wait = this.pausedUntil - Date.now();
      if (wait <= 0 || Date.now() + wait >= deadlineMs || signal?.aborted) return waited;
      waited = true;
      await sleep(wait, signal);
    }
  }

  /**
   * Runs `job` under the limiter, after any pause. `deadlineMs` (epoch ms): when the queue or the
   * pause would end after it, `job` is not run and `onLate` answers instead (with the pause left,
   * ms, or 0): a request waiting for a slot leaves the queue when its deadline passes, and at once
   * when `signal` aborts.
   */
  schedule<T>(job: () => Promise<T>, deadlineMs: number, onLate: (waitMs: number) => T, signal?: AbortSignal): Promise<T> {
    if (Date.now() >= deadlineMs || signal?.aborted) return Promise.resolve(onLate(0));
    // while queued: its deadline or its caller's abort takes the request out of the queue; once it
    // has started, neither aborts it here (the queue would answer for a request still running)
    const queued = new AbortController();
    const giveUp = () => queued.abort();
    const left = deadlineMs - Date.now();
    // (a deadline past what a timer can hold is past every queue: no timer)
    const timer = left <= MAX_TIMER_MS ? setTimeout(giveUp, left) : undefined;
    timer?.unref();
    signal?.addEventListener('abort', giveUp, { once: true });
    const started = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', giveUp);
    };
    return this.queue
      .add(
        async () => {
          started();
          for (;;) {
            const wait = this.pausedUntil - Date.now();
            if (wait <= 0) break;
            if (Date.now() + wait >= deadlineMs) return onLate(wait);
            await sleep(wait, signal);
            if (signal?.aborted) return onLate(0);
          }
          if (Date.now() >= deadlineMs || signal?.aborted) return onLate(0);
          return job();
        },
        { signal: queued.signal },
      )
      .catch((e: unknown) => {
        started();
        if (queued.signal.aborted && e === queued.signal.reason) return onLate(0);
        throw e;
      });
  }
}

/** Resolves after `ms`, or at once when `signal` aborts (before or during); leaves no listener behind. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/**
 * A `Retry-After` header as milliseconds: delta-seconds or an HTTP date (RFC 9110), or undefined
 * when absent or unreadable. `retry-after-ms` (OpenAI's own header) wins when present.
 */
export function retryAfterMs(headers: Headers | Record<string, string | null | undefined> | undefined, now = Date.now()): number | undefined {
  if (!headers) return undefined;
  const get = (k: string) => (headers instanceof Headers ? headers.get(k) : (headers[k] ?? undefined)) ?? undefined;
  const ms = get('retry-after-ms');
  if (ms !== undefined && /^\d+(\.\d+)?$/.test(ms.trim())) return Math.ceil(Number(ms));
  const v = get('retry-after')?.trim();
  if (!v) return undefined;
  if (/^\d+(\.\d+)?$/.test(v)) return Math.ceil(Number(v) * 1000);
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

export class ModelClient {
  private readonly client: OpenAI;
  private readonly limiter: ModelRateLimiter;

  constructor(private readonly opts: ModelClientOptions) {
    this.client = new OpenAI({ baseURL: opts.baseURL, apiKey: opts.apiKey, maxRetries: 0, timeout: opts.timeoutMs });
    this.limiter = new ModelRateLimiter(opts);
  }

  get model(): string {
    return this.opts.model;
  }

  /** See {@link ModelRateLimiter.waitForPause}: waits out this model's rate-limit pause, within `deadlineAt`. */
  waitForPause(deadlineAt: string | undefined, signal?: AbortSignal): Promise<boolean> {
    return this.limiter.waitForPause(deadlineAt ? Date.parse(deadlineAt) : Number.POSITIVE_INFINITY, signal);
  }

  /**
   * One streamed chat completion, assembled by {@link TurnAssembler} into exactly the calls the
   * model made, under the shared per-model limiter. Content deltas are passed to `onDelta` as
   * they arrive (for live observers; they are not facts). The WHOLE request (response headers and
   * the streamed body) is bounded by the smaller of the model timeout and the time left to
   * `deadlineAt` (a model step never runs past the deadline, K7): a timer
   * combined with `signal` ({@link boundedCut}) cuts the stream, and the turn is a `timeout` failure (what it streamed
   * was already passed to `onDelta`). A request the limiter never sent (its pause ends after the
   * deadline, or the deadline passed) is a `not-sent` failure. An abort by `signal` (the process
   * stops, the lease was lost, a cancel) is returned as a `connection` failure that the caller
   * must not decide on (it checks its own signal). Never throws for model-side failures: returns
   * them (a malformed stream is an `invalid-response` failure; a 429/503 carries `retryAfterMs`
   * and pauses the limiter). A reply that streams past `maxTokens` (the ledger's reservation) is
   * cut there and ends `length`, whatever the provider does with `max_tokens` (K7, see
   * {@link TurnAssembler}).
   */
  async turn(
    turnNo: number,
    messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[],
    tools: OpenAI.Chat.Completions.ChatCompletionTool[],
    onDelta: (text: string) => void,
    signal?: AbortSignal,
    options: TurnOptions = {},
  ): Promise<ModelTurnResult> {
    const deadlineMs = options.deadlineAt ? Date.parse(options.deadlineAt) : Number.POSITIVE_INFINITY;
    const late = (waitMs: number): ModelTurnResult => ({
      ok: false,
      error: {
        kind: 'not-sent',
        status: null,
        message: waitMs > 0 ? `not sent: the rate-limit pause (${waitMs} ms) ends after the Run's deadline` : "not sent: the Run's deadline passed",
      },
    });
    // a request that waits for a slot or a pause runs later, from the limiter's queue: in the trace of the turn that asked for it
    const parent = traceContext.active();
    return this.limiter.schedule(
      () =>
        traceContext.with(parent, () =>
          inSpan(
            `chat ${this.opts.model}`,
            {
              kind: SpanKind.CLIENT,
              attributes: {
                'gen_ai.operation.name': 'chat',
                'gen_ai.provider.name': 'openai',
                'gen_ai.request.model': this.opts.model,
                'server.address': this.opts.baseURL,
                'runplane.turn': turnNo,
                ...(options.maxTokens ? { 'gen_ai.request.max_tokens': options.maxTokens } : {}),
              },
            },
            async (span) => {
              const result = await this.measured(
                () => this.request(turnNo, messages, options.noTools ? [] : tools, onDelta, signal, options, deadlineMs),
                signal,
              );
              recordTurn(span, result);
              return result;
            },
          ),
        ),
      deadlineMs,
      late,
      signal,
    );
  }

  /**
   * Records a request that was sent (`runplane_model_request_seconds{model, finish}`, and the
   * reported usage as `runplane_model_tokens_total{model, kind}`): the one place a request is made.
   * `finish` is the model's finish reason (bounded to the known ones, else `other`), the failure
   * kind, or `aborted` when the caller's `signal` stopped it.
   */
  private async measured(send: () => Promise<ModelTurnResult>, signal: AbortSignal | undefined): Promise<ModelTurnResult> {
    const startedAt = performance.now();
    const result = await send();
    const model = this.opts.model;
    const finish = signal?.aborted ? 'aborted' : result.ok ? knownFinish(result.turn.finishReason) : result.error.kind;
    modelRequestSeconds.labels(model, finish).observe((performance.now() - startedAt) / 1000);
    const usage = result.ok ? result.turn.usage : null;
    if (usage) {
      modelTokensTotal.labels(model, 'input').inc(usage.promptTokens);
      modelTokensTotal.labels(model, 'output').inc(usage.completionTokens);
    }
    return result;
  }

  private async request(
    turnNo: number,
    messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[],
    tools: OpenAI.Chat.Completions.ChatCompletionTool[],
    onDelta: (text: string) => void,
    signal: AbortSignal | undefined,
    options: TurnOptions,
    deadlineMs: number,
  ): Promise<ModelTurnResult> {
    const leftMs = deadlineMs - Date.now();
    const byDeadline = leftMs < this.opts.timeoutMs;
    const timeout = Math.max(1, Math.min(this.opts.timeoutMs, leftMs));
    // one bound for the whole request, headers AND streamed body: the client's own `timeout` covers the headers only
    const bound = boundedCut(timeout, signal);
    const cut = bound.signal;
    const startedAt = Date.now();
    try {
      const stream = await this.client.chat.completions.create(
        {
          model: this.opts.model,
          messages,
          ...(tools.length > 0 ? { tools } : {}),
          ...(options.maxTokens ? { max_tokens: options.maxTokens } : {}),
          stream: true,
          stream_options: { include_usage: true },
        },
        { timeout, signal: cut },
      );
      const assembler = new TurnAssembler({ maxOutputTokens: options.maxTokens });
      for await (const chunk of stream) {
        const text = assembler.push(chunk);
        if (text) onDelta(text);
        // past the reservation (a provider that ignores max_tokens): stop reading; leaving the loop closes the stream (K7)
        if (assembler.overReservation) break;
      }
      if (bound.timedOut && !signal?.aborted) return { ok: false, error: cutError(Date.now() - startedAt, byDeadline) };
      return assembler.result(turnNo);
    } catch (e) {
      // cut by the bound (not by the caller): a timeout, whether it hit the headers or the stream
      if (bound.timedOut && !signal?.aborted) return { ok: false, error: cutError(Date.now() - startedAt, byDeadline) };
      const error = classify(e);
      // a rate limit slows every Run of this model: until Retry-After, or a second when the provider did not say
      if (error.retryAfterMs !== undefined) this.limiter.pauseUntil(Date.now() + error.retryAfterMs);
      else if (error.status === 429) this.limiter.pauseUntil(Date.now() + DEFAULT_RATE_LIMIT_PAUSE_MS);
      return { ok: false, error };
    } finally {
      bound.release();
    }
  }
}

/** A request's abort signal, cut after a time or by the caller, and let go of when the request ends: see {@link boundedCut}. */
export interface BoundedCut {
  /** Aborted `timeoutMs` after the start, or when the caller's signal aborts. */
  readonly signal: AbortSignal;
  /** True when the time bound (not the caller) cut it. */
  readonly timedOut: boolean;
  /** Clears the timer and the listener on the caller's signal; call it when the request has ended. */
  release(): void;
}

/**
 * An abort signal for one request, aborted after `timeoutMs` or when `signal` aborts, that holds
 * nothing once released. `AbortSignal.any([AbortSignal.timeout(t), signal])` held, for each model
 * request, its timer and both signals (and what their listeners reach) until the timer fired:
 * Node keeps a composite signal with listeners alive while a source may still abort. The timer is
 * the Run's time left (up to the deadline, hours for a Run parked on a question), so 2,000 parked
 * Runs kept 2,000 timers and 4,000 signals in the runtime (a heap snapshot of the parked bench).
 * @param timeoutMs the bound, ms (at least 1).
 * @param signal the caller's own signal (a stop, a lost lease, a cancel), if any.
 */
export function boundedCut(timeoutMs: number, signal?: AbortSignal): BoundedCut {
  const controller = new AbortController();
  let timedOut = false;
  const onAbort = () => controller.abort(signal?.reason);
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new DOMException('The model request took longer than its bound', 'TimeoutError'));
  }, timeoutMs);
  timer.unref(); // like AbortSignal.timeout: a bound alone does not keep the process alive
  if (signal?.aborted) onAbort();
  else signal?.addEventListener('abort', onAbort, { once: true });
  return {
    signal: controller.signal,
    get timedOut() {
      return timedOut;
    },
    release() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    },
  };
}

/**
 * Records a model request's outcome on its span (OpenTelemetry GenAI conventions): token counts
 * (`gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, when the provider reported usage),
 * the finish reason and number of tool calls; a failure as `error.type` (its kind) with status ERROR.
 */
function recordTurn(span: Span, result: ModelTurnResult): void {
  if (!span.isRecording()) return;
  if (!result.ok) {
    span.setAttributes({
      'error.type': result.error.kind,
      ...(result.error.status !== null ? { 'http.response.status_code': result.error.status } : {}),
    });
    span.setStatus({ code: SpanStatusCode.ERROR, message: result.error.message });
    return;
  }
  const { usage, finishReason, toolCalls } = result.turn;
  span.setAttributes({
    'gen_ai.response.finish_reasons': [finishReason],
    'runplane.tool_calls': toolCalls.length,
    ...(usage?.promptTokens !== undefined ? { 'gen_ai.usage.input_tokens': usage.promptTokens } : {}),
    ...(usage?.completionTokens !== undefined ? { 'gen_ai.usage.output_tokens': usage.completionTokens } : {}),
  });
}

/** Finish reasons a metric label may carry as they are (OpenAI's); any other is `other`, so a provider cannot grow the series. */
const KNOWN_FINISH = new Set(['stop', 'tool_calls', 'length', 'content_filter', 'function_call']);

function knownFinish(reason: string): string {
  return KNOWN_FINISH.has(reason) ? reason : 'other';
}

/** The `timeout` failure of a request cut by its bound after `elapsedMs`. */
function cutError(elapsedMs: number, byDeadline: boolean): Extract<ModelTurnResult, { ok: false }>['error'] {
  const why = byDeadline ? "the Run's deadline" : 'the model timeout';
  return { kind: 'timeout', status: null, message: `request cut after ${elapsedMs} ms by ${why} (headers and streamed reply are bounded together)` };
}

/**
 * Maps an openai client error to the recorded failure kind. A streamed reply cut by the network
 * (the endpoint died mid-stream: Node's fetch throws `TypeError: terminated`, its cause the socket
 * error) is a `connection` failure, retried after a backoff (K7), not a malformed reply.
 */
export function classify(e: unknown): Extract<ModelTurnResult, { ok: false }>['error'] {
  if (e instanceof OpenAI.APIConnectionTimeoutError) return { kind: 'timeout', status: null, message: e.message };
  if (e instanceof OpenAI.APIConnectionError) {
    const refused = refusedConnection(e);
    return { kind: 'connection', status: null, message: refused ? `${e.message} (${refused})` : e.message, ...(refused ? { refused: true } : {}) };
  }
  if (isCutStream(e)) {
    const cause = (e as { cause?: { message?: unknown } }).cause?.message;
    const why = `${String((e as { message?: unknown }).message)}${typeof cause === 'string' ? `: ${cause}` : ''}`;
    return { kind: 'connection', status: null, message: `the streamed reply was cut by the network (${why})` };
  }
  if (e instanceof OpenAI.APIError) {
    const status = typeof e.status === 'number' ? e.status : null;
    const headers = e.headers as Headers | undefined;
    const wait = status === 429 || status === 503 ? retryAfterMs(headers) : undefined;
    return { kind: 'http', status, message: e.message, ...(wait !== undefined ? { retryAfterMs: wait } : {}) };
  }
  return { kind: 'invalid-response', status: null, message: e instanceof Error ? e.message : String(e) };
}

/**
 * Undici's error for a response body whose connection was lost: `TypeError: terminated` (its
 * cause the socket error, `UND_ERR_SOCKET`), possibly wrapped by the client; by name and message,
 * since the error may come from another realm.
 */
function isCutStream(e: unknown): boolean {
  for (let err = e, depth = 0; err && typeof err === 'object' && depth < 4; err = (err as { cause?: unknown }).cause, depth++) {
    const { name, message, code } = err as { name?: unknown; message?: unknown; code?: unknown };
    if (name === 'TypeError' && message === 'terminated') return true;
    if (message === 'TypeError: terminated') return true;
    if (typeof code === 'string' && code.startsWith('UND_ERR_SOCKET')) return true;
  }
  return false;
}

/**
 * The socket error's message when the connection was refused (`ECONNREFUSED` in the error's cause
 * chain; every address refused, for a host with several): the request never reached the
 * provider. Else null.
 */
function refusedConnection(e: unknown): string | null {
  for (let err = e, depth = 0; err && typeof err === 'object' && depth < 5; err = (err as { cause?: unknown }).cause, depth++) {
    const { code, message, errors } = err as { code?: unknown; message?: unknown; errors?: unknown };
    if (code === 'ECONNREFUSED') return typeof message === 'string' ? message : 'ECONNREFUSED';
    if (Array.isArray(errors) && errors.length > 0 && errors.every((x) => (x as { code?: unknown })?.code === 'ECONNREFUSED'))
      return errors.map((x) => String((x as { message?: unknown }).message)).join('; ');
  }
  return null;
}
