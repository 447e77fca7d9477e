/**
 * The only path to the model: the `openai` client, chat completions with tools, streaming.
 * The client's own retries are off (`maxRetries: 0`): one layer retries, and it is not this one
 * (K7: the runtime's decider, each retry a new charged turn after the backoff recorded on the
 * failure). Errors are classified for the `model.turn.failed` fact.
 */
import OpenAI from 'openai';
import { SpanStatusCode, type Span } from '@opentelemetry/api';
import { inSpan, SpanKind, traceContext } from '@runplane/eventlog';
import { modelRequestSeconds, modelTokensTotal } from '@runplane/service-kit';
import type { ModelTurnResult } from './decide.js';
import { TurnAssembler } from './turn-assembly.js';
import { DEFAULT_RATE_LIMIT_PAUSE_MS, ModelRateLimiter, retryAfterMs } from './model-limiter.js';

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

/** Per-request options of {@link ModelClient.turn}. */
export interface TurnOptions {
  /** `max_tokens` to send: the ledger's reservation (K7). */
  maxTokens?: number;
  /** The Run's deadline: the request (and any wait for the limiter) never goes past it. */
  deadlineAt?: string;
  /** Offer no tools (the finalization request, K9). */
  noTools?: boolean;
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
