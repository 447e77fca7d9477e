/**
 * The one home for HTTP errors of every service: {@link apiError} builds one, the
 * {@link ProblemDetailsFilter} answers every error (ours, Nest's own, a dependency being down,
 * a bug) as RFC 9457 problem details (`application/problem+json`, contracts `ProblemDetails`).
 */
import { Catch, HttpException, Logger, HttpStatus, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import type { z } from 'zod';
import { isTransientNatsError } from '@runplane/kit';
import {
  openApiDocument,
  PROBLEM_CONTENT_TYPE,
  PROBLEM_TYPE_PREFIX,
  ProblemTitles,
  zodIssues,
  type ProblemDetails,
  type HttpService,
  type ProblemIssue,
} from '@runplane/contracts';

/** Seconds a client is told to wait (`Retry-After`) when a dependency is unavailable. */
export const DEPENDENCY_RETRY_AFTER_SECONDS = 2;

/** Options of {@link apiError}. */
export interface ApiErrorOptions {
  /** Every validation reason (400s). */
  issues?: ProblemIssue[];
  /** Response headers to set with the error (e.g. `Retry-After`). */
  headers?: Record<string, string>;
  /** Further extension members of the problem body. */
  extensions?: Record<string, unknown>;
}

/**
 * An HTTP error answer of the API: status, problem `code`, `detail` and extension members. Throw
 * it from a controller; {@link ProblemDetailsFilter} writes it (adding `type`, `title` and
 * `instance`). Build it with {@link apiError}.
 */
export class ApiError extends HttpException {
  constructor(
    status: number,
    readonly code: string,
    readonly detail: string,
    readonly extras: ApiErrorOptions = {},
  ) {
    super(detail, status);
    this.name = 'ApiError';
  }

  /** The problem body for a request to `instance`. */
  problem(instance?: string): ProblemDetails & Record<string, unknown> {
    return problemBody(this.getStatus(), this.code, this.detail, instance, this.extras);
  }
}

/** Builds the API error `code` with status and reason (the only way services build one). */
export function apiError(status: HttpStatus | number, code: string, detail: string, options: ApiErrorOptions = {}): ApiError {
  return new ApiError(status, code, detail, options);
}

/** 400 `bad_request` naming `what` was wrong, with every zod reason as `issues` (paths prefixed with `what`). */
export function badRequestFromZod(what: string, error: z.ZodError): ApiError {
  const issues = zodIssues(error).map((i) => ({ path: i.path === '(body)' ? what : `${what}.${i.path}`, message: i.message }));
  // each path already starts with `what`: the detail names it once ("Last-Event-ID: must be ...")
  return apiError(HttpStatus.BAD_REQUEST, 'bad_request', issues.map((i) => `${i.path}: ${i.message}`).join('; '), { issues });
}

/**
 * Validates a request's query with its zod object schema (contracts `RunsQuery`, `RunEventsQuery`):
 * the one place an endpoint turns a bad query into its answer. Unknown parameters are ignored, but
 * a known one in a bracketed form (`limit[]=2`, `limit[x]=3`: what a client writes for an array or
 * an object) is refused: the client meant that parameter, which would otherwise be silently left out.
 * @throws 400 `bad_request` with every reason in `issues` (paths `query.<name>`).
 */
export function parseQuery<S extends z.ZodObject>(schema: S, query: unknown): z.infer<S> {
  const given = query && typeof query === 'object' ? (query as Record<string, unknown>) : {};
  const known = new Set(Object.keys(schema.shape));
  const bracketed = Object.keys(given).filter((key) => known.has(key.split('[')[0]!) && key.includes('['));
  if (bracketed.length > 0) {
    const issues = bracketed.map((key) => ({ path: `query.${key}`, message: `${key.split('[')[0]} takes one plain value: ${key} is not accepted` }));
    throw apiError(HttpStatus.BAD_REQUEST, 'bad_request', issues.map((i) => `${i.path}: ${i.message}`).join('; '), { issues });
  }
  const parsed = schema.safeParse(given);
  if (!parsed.success) throw badRequestFromZod('query', parsed.error);
  return parsed.data;
}

/**
 * Validates a JSON request body with its zod schema: the one place an endpoint turns a bad body
 * into its answer.
 * @param what how the body is named in the error ("the message body").
 * @param opts.optional a body left out (no body, no Content-Type) is allowed and parsed as `{}`; one
 *   sent in another format is still 415.
 * @throws 415 `unsupported_media_type` when a body is not sent as JSON, or declares a charset
 *   other than UTF-8; 400 `invalid_body` with
 *   every zod reason in `detail` and `issues`.
 */
export function parseJsonBody<S extends z.ZodType>(
  schema: S,
  body: unknown,
  contentType: string | undefined,
  what: string,
  opts: { optional?: boolean } = {},
): z.infer<S> {
  const empty = body === undefined || body === null || (typeof body === 'object' && !Array.isArray(body) && Object.keys(body).length === 0);
  // an optional body may be left out, not sent in another format: a `text/plain` POST (which a
  // browser sends cross-origin without a preflight) is refused, never read as an empty body
  const omitted = empty && (contentType === undefined || contentType === '');
  if (!(opts.optional && omitted) && !/^application\/json\s*(;|$)/i.test(contentType ?? '')) {
    throw apiError(HttpStatus.UNSUPPORTED_MEDIA_TYPE, 'unsupported_media_type', `send ${what} as JSON (Content-Type: application/json)`);
  }
  // JSON is UTF-8 (RFC 8259): a body declared in another charset (utf-16 would be decoded and accepted) is refused
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(contentType ?? '')?.[1]?.toLowerCase();
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
    throw apiError(HttpStatus.UNSUPPORTED_MEDIA_TYPE, 'unsupported_media_type', `send ${what} as UTF-8 JSON (charset=${charset} is not accepted)`);
  }
  const parsed = schema.safeParse(body ?? {});
  if (!parsed.success) {
    const issues = zodIssues(parsed.error);
    throw apiError(HttpStatus.BAD_REQUEST, 'invalid_body', `${what} is invalid: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`, {
      issues,
    });
  }
  return parsed.data;
}

/** 503 `dependency_unavailable` with `Retry-After`: `dependency` (e.g. "PostgreSQL") cannot be reached. */
export function dependencyUnavailable(dependency: string, reason?: string, extensions?: Record<string, unknown>): ApiError {
  return apiError(
    HttpStatus.SERVICE_UNAVAILABLE,
    'dependency_unavailable',
    `${dependency} is unavailable${reason ? `: ${reason}` : ''}; retry later`,
    {
      headers: { 'Retry-After': String(DEPENDENCY_RETRY_AFTER_SECONDS) },
      ...(extensions ? { extensions } : {}),
    },
  );
}

function problemBody(
  status: number,
  code: string,
  detail: string,
  instance: string | undefined,
  options: ApiErrorOptions = {},
): ProblemDetails & Record<string, unknown> {
  return {
    ...options.extensions,
    type: `${PROBLEM_TYPE_PREFIX}${code}`,
    title: ProblemTitles[code] ?? HttpStatus[status]?.toLowerCase().replace(/_/g, ' ') ?? 'error',
    status,
    detail,
    ...(instance ? { instance } : {}),
    code,
    ...(options.issues ? { issues: options.issues } : {}),
  };
}

const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
  '57P01',
  '57P03',
]);
const NATS_UNAVAILABLE = new Set([
  'ClosedConnectionError',
  'DrainingConnectionError',
  'ConnectionError',
  'TimeoutError',
  'NoRespondersError',
  'JetStreamNotEnabled',
]);

/**
 * Which dependency an unexpected error says is unreachable: `PostgreSQL` for a refused/reset
 * database connection (also inside MikroORM's wrappers), `NATS` for a closed, draining, timed-out
 * or unanswered NATS request, and for every error after which the event log retries a NATS request
 * (`isTransientNatsError` of `@runplane/kit`: a lost connection, a JetStream 503 such as "JetStream
 * system temporarily unavailable" while a cluster elects a leader, an atomic batch not stored) once
 * its retries are spent; null for anything else (a bug: 500). Follows `cause` and
 * `AggregateError.errors`.
 */
export function unavailableDependency(error: unknown, depth = 0): string | null {
  if (!(error instanceof Error) || depth > 5) return null;
  const e = error as Error & { code?: unknown; errors?: unknown[] };
  if (NATS_UNAVAILABLE.has(e.name) || NATS_UNAVAILABLE.has(e.constructor.name) || isTransientNatsError(e)) return 'NATS';
  if (typeof e.code === 'string' && CONNECTION_CODES.has(e.code)) return /nats/i.test(e.stack ?? '') ? 'NATS' : 'PostgreSQL';
  if (/Connection terminated|connection (?:is )?closed|too many clients/i.test(e.message) && /pg|postgres|mikro/i.test(e.stack ?? ''))
    return 'PostgreSQL';
  for (const inner of [e.cause, ...(Array.isArray(e.errors) ? e.errors : [])]) {
    const found = unavailableDependency(inner, depth + 1);
    if (found) return found;
  }
  return null;
}

interface HttpResponse {
  headersSent: boolean;
  status(code: number): HttpResponse;
  setHeader(name: string, value: string): void;
  json(body: unknown): void;
  end(): void;
}

/**
 * Writes `error` as problem details on `res` (its headers, `application/problem+json`, the body
 * for `instance`): for routes served outside Nest's controllers, and by {@link ProblemDetailsFilter}.
 */
export function writeProblem(res: Pick<HttpResponse, 'setHeader' | 'status'>, error: ApiError, instance: string | undefined): void {
  for (const [name, value] of Object.entries(error.extras.headers ?? {})) res.setHeader(name, value);
  res.setHeader('Content-Type', `${PROBLEM_CONTENT_TYPE}; charset=utf-8`);
  res.status(error.getStatus()).json(error.problem(instance));
}

/**
 * The body parser accepts only a JSON object or array at the top (strict mode) and calls anything
 * else malformed. A body that is valid JSON of another kind (`null`, `"text"`, `42`) is not
 * malformed: it is a body of the wrong shape, answered like every invalid body (400
 * `invalid_body`). Null for any other error.
 */
function jsonThatIsNotAnObject(exception: unknown): ApiError | null {
  // Nest's Express adapter wraps the parser's error in a BadRequestException (as its cause)
  const cause = exception instanceof HttpException ? exception.cause : undefined;
  const e = (cause ?? exception) as { type?: unknown; body?: unknown };
  if (e?.type !== 'entity.parse.failed' || typeof e.body !== 'string') return null;
  let value: unknown;
  try {
    value = JSON.parse(e.body);
  } catch {
    return null; // really malformed: bad_request, as before
  }
  const kind = value === null ? 'null' : typeof value;
  return apiError(HttpStatus.BAD_REQUEST, 'invalid_body', `the body must be a JSON object, not ${kind}`, {
    issues: [{ path: '(body)', message: `expected a JSON object, received ${kind}` }],
  });
}

/** What a {@link ProblemMapping} may use of the request that failed. */
export interface ProblemRequest {
  method?: string;
  /** The matched route's pattern (Express `req.route.path`, e.g. `/v1/runs/:runId/cancel`), when a route matched. */
  route?: { path?: string };
}

/**
 * How one domain error of a service is answered over HTTP: errors of class `error` (and its
 * subclasses) become the {@link ApiError} `problem` builds. Build entries with {@link problemFor}.
 */
export interface ProblemMapping {
  readonly error: abstract new (...args: never[]) => Error;
  readonly problem: (error: Error, request: ProblemRequest) => ApiError;
}

/**
 * A service's table of domain errors and their problems (`ServiceSpec.problems`), first match
 * wins: controllers let a decider's error propagate and {@link ProblemDetailsFilter} answers it.
 */
export type ProblemTable = readonly ProblemMapping[];

/** One {@link ProblemTable} entry: `problem(e, request)` for every error that is an instance of `error`. */
export function problemFor<E extends Error>(
  error: abstract new (...args: never[]) => E,
  problem: (e: E, request: ProblemRequest) => ApiError,
): ProblemMapping {
  return { error, problem: (e, request) => problem(e as E, request) };
}

/** The problem `table` gives for `exception`, or null when no entry matches. */
export function problemFromTable(table: ProblemTable, exception: unknown, request: ProblemRequest = {}): ApiError | null {
  for (const entry of table) if (exception instanceof entry.error) return entry.problem(exception, request);
  return null;
}

/**
 * Answers every HTTP error of a service as problem details (`application/problem+json`):
 * {@link ApiError}s as built; the service's domain errors as its {@link ProblemTable} says; Nest's own exceptions (unknown route: `route_not_found`, malformed
 * JSON: `bad_request`, too large a body: `payload_too_large`) with the status name as code; an
 * unreachable PostgreSQL or NATS as 503 `dependency_unavailable` with `Retry-After`; anything
 * else as 500 `internal_error` (logged with its stack, never shown to the client).
 */
@Catch()
export class ProblemDetailsFilter implements ExceptionFilter {
  private readonly logger = new Logger('http');

  /** @param problems the service's domain errors and their problems (`ServiceSpec.problems`; none by default). */
  constructor(private readonly problems: ProblemTable = []) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const res = http.getResponse<HttpResponse>();
    const req = http.getRequest<{ originalUrl?: string; url?: string } & ProblemRequest>();
    const instance = (req.originalUrl ?? req.url ?? '').split('?')[0];
    const error = problemFromTable(this.problems, exception, req) ?? this.toApiError(exception, req.method);
    if (res.headersSent) {
      // a stream already started (SSE): nothing can be said any more but ending it
      this.logger.warn({ instance, code: error.code, detail: error.detail }, 'error after the answer started');
      res.end();
      return;
    }
    writeProblem(res, error, instance);
  }

  private toApiError(exception: unknown, method = 'GET'): ApiError {
    if (exception instanceof ApiError) return exception;
    const notAnObject = jsonThatIsNotAnObject(exception);
    if (notAnObject) return notAnObject;
    if (exception instanceof HttpException) {
      const status = exception.getStatus();
      const body = exception.getResponse();
      const raw = typeof body === 'string' ? body : ((body as { message?: unknown }).message ?? exception.message);
      const detail = Array.isArray(raw) ? raw.join('; ') : typeof raw === 'string' ? raw : JSON.stringify(raw);
      if (status === 404 && /^Cannot [A-Z]+ /.test(detail))
        return apiError(404, 'route_not_found', `no route ${method} ${detail.replace(/^Cannot [A-Z]+ /, '')}`);
      if (status === 413) return apiError(413, 'payload_too_large', detail);
      if (status === 400) return apiError(400, 'bad_request', detail);
      return apiError(status, (HttpStatus[status] ?? 'error').toLowerCase(), detail);
    }
    // body-parser and similar middleware errors that carry a client status
    const withStatus = exception as { status?: unknown; expose?: unknown; message?: unknown };
    if (typeof withStatus?.status === 'number' && withStatus.status >= 400 && withStatus.status < 500 && withStatus.expose === true) {
      const code =
        withStatus.status === 413
          ? 'payload_too_large'
          : withStatus.status === 400
            ? 'bad_request'
            : (HttpStatus[withStatus.status] ?? 'error').toLowerCase();
      return apiError(withStatus.status, code, String(withStatus.message));
    }
    const dependency = unavailableDependency(exception);
    if (dependency) {
      this.logger.warn({ dependency, reason: exception instanceof Error ? exception.message : String(exception) }, 'dependency unavailable');
      return dependencyUnavailable(dependency);
    }
    this.logger.error({ err: exception instanceof Error ? exception : JSON.stringify(exception) }, 'unhandled error in an HTTP handler');
    return apiError(500, 'internal_error', 'internal error; see the service log');
  }
}

/**
 * Serves `GET /openapi.json` on `app`: the OpenAPI 3.1 description of `service`'s routes,
 * generated from the contracts' route registry on the first request (start-up does not pay for it). Call before `listen`.
 */
export function serveOpenApi(
  app: { getHttpAdapter(): { get(path: string, handler: (req: unknown, res: { json(body: unknown): void }) => void): unknown } },
  service: HttpService,
): void {
  // built on the first request, not at start-up (every process of a stack would pay for it)
  let document: ReturnType<typeof openApiDocument> | undefined;
  app.getHttpAdapter().get('/openapi.json', (_req, res) => res.json((document ??= openApiDocument(service))));
}

/** What Node's HTTP parser refused before any route saw the request, as a problem (status, code, detail). */
function clientErrorProblem(err: Error & { code?: string }): { status: number; code: string; detail: string } {
  if (err.code === 'HPE_HEADER_OVERFLOW')
    return { status: 431, code: 'headers_too_large', detail: 'the request line and headers are larger than the server takes (16 KiB)' };
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT')
    return { status: 408, code: 'request_timeout', detail: 'the whole request (headers and body) did not arrive in time' };
  return { status: 400, code: 'bad_request', detail: `the request is not valid HTTP/1.1 (${err.code ?? 'parse error'})` };
}

/**
 * Answers a request Node's HTTP parser refused (the server's `clientError`: headers over 16 KiB, a
 * control character in a header, a request that did not arrive in time, malformed HTTP) with problem
 * details like every other error (`application/problem+json`, contracts `ProblemDetails`) and closes
 * the connection; Node's own answer is a bare status line with no body. A socket that can no longer
 * be written to (the client reset it) is destroyed.
 */
export function answerClientError(err: Error & { code?: string }, socket: { writable: boolean; end(data: string): void; destroy(): void }): void {
  if (!socket.writable || err.code === 'ECONNRESET') {
    socket.destroy();
    return;
  }
  const { status, code, detail } = clientErrorProblem(err);
  const body = JSON.stringify(problemBody(status, code, detail, undefined));
  socket.end(
    `HTTP/1.1 ${status} ${String(HttpStatus[status] ?? 'Error').replace(/_/g, ' ')}\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}
