/**
 * A small typed client for Runplane's HTTP API. Every response body is validated with the
 * contracts' zod schemas; errors carry the HTTP status and the server's reason.
 */
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { retry } from '@runplane/kit/retry';
import {
  AnswerView,
  AnswerWaitResponse,
  CancelRunResponse,
  ProblemDetails,
  PostMessageResponse,
  MessageOutcome,
  type PostMessageBody,
  RunEvent,
  RunView,
  WaitsView,
} from '@runplane/contracts';

export interface RunplaneEndpoints {
  /** Base URL of the admission service, e.g. http://127.0.0.1:8081 */
  admission: string;
  /** Base URL of the publication service, e.g. http://127.0.0.1:8082 */
  publication: string;
  /** The bearer token (a JWT the deployment's issuer signed) sent with every request; none when the services run with authentication disabled. */
  token?: string;
  /**
   * Where a newer token may be had when the services answer 401 (a local stack started again signs
   * with a new key: the CLI reads `.runplane/auth/token` again). A request answered 401 is sent
   * once more when this returns a token other than the one it carried, which every later request
   * then carries.
   */
  refreshToken?: () => string | undefined;
}

/**
 * An HTTP error answer: `status`, the URL asked, the raw body and, when the server answered with
 * problem details (RFC 9457, contracts `ProblemDetails`), the parsed `problem`. The message says
 * it all in one line: status, code, the server's reason (`detail`) and every issue.
 */
export class RunplaneHttpError extends Error {
  /** The parsed problem details, or null when the body was not problem details (e.g. a proxy's page). */
  readonly problem: ProblemDetails | null;
  /**
   * How long the server asked the client to wait before trying again (its `Retry-After`, seconds:
   * delta-seconds, or an HTTP date turned into the seconds until it, at least 0), or null when it
   * sent none or one that is neither (RFC 9110 section 10.2.3).
   */
  readonly retryAfterSeconds: number | null;

  constructor(
    readonly status: number,
    readonly body: unknown,
    readonly url = '',
    headers?: Pick<Headers, 'get'>,
  ) {
    const parsed = ProblemDetails.safeParse(body);
    const problem = parsed.success ? parsed.data : null;
    const issues = problem?.issues?.length ? ` (${problem.issues.map((i) => `${i.path}: ${i.message}`).join('; ')})` : '';
    const reason = problem
      ? `${problem.code}: ${problem.detail}${issues && !problem.detail.includes(problem.issues![0]!.message) ? issues : ''}`
      : typeof body === 'string'
        ? body.slice(0, 300)
        : JSON.stringify(body);
    super(`HTTP ${status}${url ? ` from ${url}` : ''}: ${reason}`);
    this.name = 'RunplaneHttpError';
    this.problem = problem;
    this.retryAfterSeconds = retryAfterSecondsOf(headers?.get('retry-after') ?? null);
  }

  /** The problem's `code` (e.g. `invalid_body`), or null. */
  get code(): string | null {
    return this.problem?.code ?? null;
  }
}

/**
 * A `Retry-After` value in seconds (RFC 9110 section 10.2.3): delta-seconds as given, an HTTP date
 * as the whole seconds from now until it (0 when past); null for none or anything else.
 * @param now the current time, ms since the epoch (for the date form).
 */
export function retryAfterSecondsOf(value: string | null, now = Date.now()): number | null {
  const text = value?.trim() ?? '';
  if (/^\d+$/.test(text)) return Number(text);
  const at = /[a-z]/i.test(text) ? Date.parse(text) : NaN;
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - now) / 1000));
}

/**
 * The service could not be reached at all (connection refused, unknown host, timeout): which
 * service, the URL tried and the network reason.
 */
export class RunplaneUnreachableError extends Error {
  constructor(
    readonly service: string,
    readonly url: string,
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(`cannot reach ${service} at ${url}: ${reason}`, options);
    this.name = 'RunplaneUnreachableError';
  }
}

const NETWORK_REASONS: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset',
  ENOTFOUND: 'unknown host',
  EAI_AGAIN: 'host name lookup failed',
  ETIMEDOUT: 'connection timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  UND_ERR_CONNECT_TIMEOUT: 'connection timed out',
  UND_ERR_SOCKET: 'connection closed by the server',
};

/** The network reason of a failed `fetch` ("fetch failed" hides it in `cause`). */
function networkReason(e: unknown): string {
  for (let cur: unknown = e, depth = 0; cur instanceof Error && depth < 5; depth++) {
    const code = (cur as { code?: unknown }).code;
    if (typeof code === 'string') return NETWORK_REASONS[code] ?? `${code}${cur.message && !cur.message.includes(code) ? ` ${cur.message}` : ''}`;
    const inner = (cur as { errors?: unknown[] }).errors?.[0];
    cur = cur.cause ?? inner;
  }
  return e instanceof Error ? e.message : String(e);
}

/** True when `fetch` failed because the server closed or reset the connection (not a refusal, not a timeout). */
export function closedByServer(e: unknown): boolean {
  // duck-typed: the errors may come from another realm (a test runner's vm context), where instanceof Error fails
  for (let cur: unknown = e, depth = 0; typeof cur === 'object' && cur !== null && depth < 5; depth++) {
    const { code, cause, errors } = cur as { code?: unknown; cause?: unknown; errors?: unknown[] };
    if (code === 'UND_ERR_SOCKET' || code === 'ECONNRESET') return true;
    cur = cause ?? errors?.[0];
  }
  return false;
}

/**
 * A Run id as one path segment (percent-encoded).
 * @throws Error when it is empty: `/v1/runs/` is the list of Runs, never a Run (a trial's
 *   `status ''` got the list and printed a 295-line validation error of it).
 */
function runSegment(runId: string): string {
  if (runId.length === 0) throw new Error('the Run id is empty: give the id of a Run');
  return encodeURIComponent(runId);
}

/** One event received over SSE: its stream sequence (the SSE id) and the validated event. */
export interface ObservedEvent {
  seq: number;
  event: RunEvent;
}

async function readJson(res: Response): Promise<unknown> {
  const text = await res.text();
  try {
    return text === '' ? null : JSON.parse(text);
  } catch {
    return text;
  }
}

export class RunplaneClient {
  /** The token requests carry now ({@link RunplaneEndpoints.token}, or the newer one `refreshToken` gave after a 401). */
  private token: string | undefined;

  constructor(readonly endpoints: RunplaneEndpoints) {
    this.token = endpoints.token;
  }

  /**
   * `fetch` that turns a network failure into {@link RunplaneUnreachableError} (service, URL,
   * reason). A connection the server closed as the request went out on it (an idle keep-alive
   * socket reused at the moment the server's idle timeout closes it, "other side closed") is tried
   * once more on a new connection: every Runplane request is safe to repeat (reads; writes keyed by
   * their ids, K1, K10).
   */
  private async request(service: 'admission' | 'publication', url: string | URL, init?: RequestInit): Promise<Response> {
    const send = async (token: string | undefined) => {
      const headers = new Headers(init?.headers);
      if (token) headers.set('authorization', `Bearer ${token}`);
      try {
        return await retry('closedConnection', () => fetch(url, { ...init, headers }), {
          shouldRetry: ({ error }) => !init?.signal?.aborted && closedByServer(error),
        });
      } catch (e) {
        if (init?.signal?.aborted) throw e;
        throw new RunplaneUnreachableError(service, String(url), networkReason(e), { cause: e });
      }
    };
    const res = await send(this.token);
    if (res.status !== 401 || !this.endpoints.refreshToken) return res;
    const fresh = this.endpoints.refreshToken();
    if (!fresh || fresh === this.token) return res;
    await res.body?.cancel().catch(() => undefined);
    this.token = fresh;
    return send(fresh);
  }

  /**
   * {@link request}, then the body read as JSON and checked by `schema`.
   * @returns the HTTP status and the parsed body.
   * @throws RunplaneHttpError for a status outside 2xx (with the body as sent); a ZodError when a 2xx body is not of `schema`.
   */
  private async call<T>(
    service: 'admission' | 'publication',
    url: string,
    schema: { parse(json: unknown): T },
    init?: RequestInit,
  ): Promise<{ status: number; body: T }> {
    const res = await this.request(service, url, init);
    const json = await readJson(res);
    if (!res.ok) throw new RunplaneHttpError(res.status, json, url, res.headers);
    return { status: res.status, body: schema.parse(json) };
  }

  /** {@link call} of a GET whose 404 means "none": the parsed body, or null on 404. */
  private async find<T>(service: 'admission' | 'publication', url: string, schema: { parse(json: unknown): T }): Promise<T | null> {
    try {
      return (await this.call(service, url, schema)).body;
    } catch (e) {
      if (e instanceof RunplaneHttpError && e.status === 404) return null;
      throw e;
    }
  }

  /**
   * Submits a message: an ordinary one, an explicit Continue (`continuationOfRunId`, K3) or a
   * clarification answer (`replyTo`, K2). Resolves with the status (201 admitted, 200 existing) and the body.
   * @throws RunplaneHttpError for 4xx/5xx (400 invalid body, 404 no such parent or clarification,
   *   409 conflicting clientMessageId, ineligible parent or answered clarification);
   * RunplaneUnreachableError when admission cannot be reached.
   */
  async postMessage(conversationId: string, body: PostMessageBody): Promise<{ status: number; body: PostMessageResponse }> {
    const url = `${this.endpoints.admission}/v1/conversations/${encodeURIComponent(conversationId)}/messages`;
    return this.call('admission', url, PostMessageResponse, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  }

  /**
   * Asks to cancel a Run (K4): resolves with the 202 body, the same for a repeated cancel.
   * @throws RunplaneHttpError 404 (no such Run), 409 `run_settled` (its `outcome` in the problem body).
   */
  async cancelRun(runId: string, opts: { reason?: string; user?: string } = {}): Promise<CancelRunResponse> {
    const url = `${this.endpoints.admission}/v1/runs/${runSegment(runId)}/cancel`;
    return (
      await this.call('admission', url, CancelRunResponse, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(opts.user ? { 'x-runplane-user': opts.user } : {}) },
        body: JSON.stringify(opts.reason ? { reason: opts.reason } : {}),
      })
    ).body;
  }

  /**
   * Answers a Run's pending wait (K10): resolves with the HTTP status (202 accepted now, 200 the
   * same answer recorded before) and the wait as recorded.
   * @throws RunplaneHttpError 400 (blank answer), 404 (no such Run or wait), 409 `wait_not_pending`
   *   (expired, Run settled) or `wait_conflict` (answered differently).
   */
  async answerWait(
    runId: string,
    waitId: string,
    answer: string,
    opts: { user?: string } = {},
  ): Promise<{ status: number; body: AnswerWaitResponse }> {
    const url = `${this.endpoints.admission}/v1/runs/${runSegment(runId)}/waits/${encodeURIComponent(waitId)}`;
    return this.call('admission', url, AnswerWaitResponse, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(opts.user ? { 'x-runplane-user': opts.user } : {}) },
      body: JSON.stringify({ answer }),
    });
  }

  /** A Run's waits, as its log says. @throws RunplaneHttpError 404 (no such Run). */
  async listWaits(runId: string): Promise<WaitsView> {
    const url = `${this.endpoints.admission}/v1/runs/${runSegment(runId)}/waits`;
    return (await this.call('admission', url, WaitsView)).body;
  }

  /** The Run projection, or null on 404 (unknown or not projected yet). */
  async getRun(runId: string): Promise<RunView | null> {
    const url = `${this.endpoints.admission}/v1/runs/${runSegment(runId)}`;
    return this.find('admission', url, RunView);
  }

  /** What became of a message, by its clientMessageId (K1), or null when none was admitted (404). */
  async getMessage(conversationId: string, clientMessageId: string): Promise<MessageOutcome | null> {
    const url = `${this.endpoints.admission}/v1/conversations/${encodeURIComponent(conversationId)}/messages/${encodeURIComponent(clientMessageId)}`;
    return this.find('admission', url, MessageOutcome);
  }

  /** The Run's committed answer passages. */
  async getAnswer(runId: string): Promise<AnswerView> {
    const url = `${this.endpoints.publication}/v1/runs/${runSegment(runId)}/answer`;
    return (await this.call('publication', url, AnswerView)).body;
  }

  /**
   * Observes a Run over SSE from after `lastEventId` (0 = from the start). Calls `onEvent` for
   * every stored event and `onDelta` for live token deltas (when requested). Resolves when the
   * server ends the stream (`server`: after `run.settled`, or early when the server shuts down;
   * the caller can tell by whether it saw the settlement), when the server answers 204 (`complete`:
   * the settlement is already behind `lastEventId`) or when `signal` aborts (a disconnect: the Run
   * goes on).
   * @param opts.lastEventId 0 or an id this Run's stream sent (a position in its log); the server
   *   refuses any other cursor (K4).
   * @throws RunplaneHttpError with code `invalid_cursor` (400; `problem` carries `cursor` and
   *   `reason`) when `lastEventId` is not a position of this Run's log, `bad_request` when it is
   *   malformed, `not_found` for an unknown Run.
   */
  async streamEvents(
    runId: string,
    opts: {
      lastEventId?: number;
      signal?: AbortSignal;
      deltas?: boolean;
      onEvent: (e: ObservedEvent) => void;
      onDelta?: (d: { turn: number; text: string }) => void;
      /** Called once publication has answered and the stream is open (before its first event). */
      onOpen?: () => void;
    },
  ): Promise<{ lastEventId: number; ended: 'server' | 'complete' | 'aborted' }> {
    const url = new URL(`${this.endpoints.publication}/v1/runs/${runSegment(runId)}/events`);
    if (opts.deltas) url.searchParams.set('deltas', 'true');
    const headers: Record<string, string> = { accept: 'text/event-stream' };
    if (opts.lastEventId) headers['last-event-id'] = String(opts.lastEventId);
    let last = opts.lastEventId ?? 0;
    let res: Response;
    try {
      res = await this.request('publication', url, { headers, signal: opts.signal });
    } catch (e) {
      if (opts.signal?.aborted) return { lastEventId: last, ended: 'aborted' };
      throw e;
    }
    if (res.status === 204) return { lastEventId: last, ended: 'complete' }; // the settlement is already behind Last-Event-ID
    if (!res.ok || !res.body) throw new RunplaneHttpError(res.status, await readJson(res), String(url), res.headers);
    opts.onOpen?.();
    const parser = createParser({
      onEvent: (m: EventSourceMessage) => {
        if (opts.signal?.aborted) return; // detached: what arrives after the disconnect is not seen
        if (m.event === 'delta') {
          opts.onDelta?.(JSON.parse(m.data) as { turn: number; text: string });
          return;
        }
        if (!m.id) return;
        last = Number(m.id);
        opts.onEvent({ seq: last, event: RunEvent.parse(JSON.parse(m.data)) as RunEvent });
      },
    });
    const decoder = new TextDecoder();
    try {
      for await (const chunk of res.body) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
    } catch (e) {
      if (opts.signal?.aborted) return { lastEventId: last, ended: 'aborted' };
      throw e;
    }
    return { lastEventId: last, ended: opts.signal?.aborted ? 'aborted' : 'server' };
  }
}

/** Admission's answer when NATS was slow to take the append (restarting, a hung cluster node being left): worth the same message again. */
export function isAdmissionUnavailable(e: unknown): e is RunplaneHttpError {
  return e instanceof RunplaneHttpError && e.status === 503 && e.code === 'dependency_unavailable';
}

/**
 * Posts a message with `client.postMessage`, and when admission answers 503
 * `dependency_unavailable` ({@link isAdmissionUnavailable}) posts the same message again after 2 s
 * (its `Retry-After`), up to five more times (kit policy `admissionUnavailable`), calling
 * `onRepeat(error, attempt)` before each repeat (`attempt` 2..6). The same `clientMessageId` is
 * admitted at most once (K1), so a repeat is safe. Any other answer is the caller's.
 * Used by the CLI's `ask`, `continue` and `reply` and by the tests' client.
 * @returns the status (201 admitted, 200 existing) and body of the attempt that was answered.
 * @throws RunplaneHttpError of the last attempt, or whatever else `postMessage` threw.
 */
export async function postMessagePatiently(
  client: Pick<RunplaneClient, 'postMessage'>,
  conversationId: string,
  body: PostMessageBody,
  onRepeat: (error: RunplaneHttpError, attempt: number) => void = () => {},
): ReturnType<RunplaneClient['postMessage']> {
  return retry('admissionUnavailable', () => client.postMessage(conversationId, body), {
    shouldRetry: ({ error }) => isAdmissionUnavailable(error),
    onFailedAttempt: ({ error, attemptNumber, retriesLeft }) => {
      if (retriesLeft > 0 && isAdmissionUnavailable(error)) onRepeat(error, attemptNumber + 1);
    },
  });
}
