/**
 * Every HTTP route of every Runplane service, with its zod request and response shapes, in one
 * registry ({@link HttpRoutes}); the OpenAPI 3.1 description is generated from it by
 * `zod-openapi` ({@link openApiDocument}). A route added to a controller is added here too, next
 * to its shapes in `http.ts`: each service serves its part at `GET /openapi.json` and
 * docs/openapi.json holds the whole (a test fails when it is stale).
 */
import { z } from 'zod';
import { createDocument, type ZodOpenApiOperationObject, type ZodOpenApiPathsObject, type ZodOpenApiResponseObject } from 'zod-openapi';
import { RunEvent } from './events.js';
import {
  AnswerView,
  ConversationIdParams,
  HealthBody,
  MessageOutcome,
  MessageParams,
  PostMessageBody,
  PostMessageResponse,
  PROBLEM_CONTENT_TYPE,
  ProblemDetails,
  PartitionsBody,
  ReconcileHeaders,
  ReconcileToolCallBody,
  AnswerHeaders,
  AnswerWaitBody,
  AnswerWaitResponse,
  CancelHeaders,
  WaitParams,
  WaitsView,
  CancelRunBody,
  CancelRunResponse,
  ReconcileToolCallResponse,
  ToolCallParams,
  RunEventsHeaders,
  RunEventsQuery,
  RunIdParams,
  RunView,
  RunsPage,
  RunsQuery,
  ObserverLimitProblem,
  QuotaProblem,
} from './http.js';

/** The service processes that serve HTTP (every one serves `/healthz` and `/openapi.json`). */
export const HttpServices = ['admission', 'publication', 'runtime', 'tools', 'lifecycle', 'recovery', 'projector'] as const;
export type HttpService = (typeof HttpServices)[number];

/** One documented answer of a route. */
export interface RouteResponse {
  description: string;
  /** Body media type and zod schema; none for an empty answer (204). */
  body?: { contentType: string; schema: z.ZodType };
  /** Response headers worth documenting (e.g. `Retry-After`). */
  headers?: Record<string, string>;
}

/** One HTTP route: who serves it, its request shapes and its answers (status -> answer). */
export interface HttpRoute {
  services: readonly HttpService[];
  method: 'get' | 'post';
  /** OpenAPI path template, e.g. `/v1/runs/{runId}`. */
  path: string;
  operationId: string;
  summary: string;
  description?: string;
  request?: {
    path?: z.ZodObject;
    query?: z.ZodObject;
    header?: z.ZodObject;
    body?: { contentType: string; schema: z.ZodType };
  };
  responses: Record<number, RouteResponse>;
  /** True for a route outside `/v1` that wants a bearer token all the same (`/partitions` on admission and publication). */
  token?: boolean;
}

const json = (schema: z.ZodType) => ({ contentType: 'application/json', schema });
const problem = (description: string, headers?: Record<string, string>): RouteResponse => ({
  description,
  body: { contentType: PROBLEM_CONTENT_TYPE, schema: ProblemDetails },
  ...(headers ? { headers } : {}),
});
const RETRY_AFTER = { 'Retry-After': 'Seconds to wait before retrying' };
const unavailable = (what: string) =>
  problem(`${what} is unreachable (\`dependency_unavailable\`); retry after \`Retry-After\` seconds`, RETRY_AFTER);
/** Answers several routes give, worded once. */
const BAD_RUN_ID = problem('Bad runId (`bad_request`)');
const NO_SUCH_RUN = problem("No such Run, or another principal's (`not_found`, the same answer)");
const NOT_JSON = problem('The body is not JSON (`unsupported_media_type`)');
const NATS_UNAVAILABLE = unavailable('NATS JetStream');

/** An OpenAPI description is a JSON object whose `openapi` names the version (3.1.x). */
export const OpenApiDocumentBody = z.object({ openapi: z.string(), info: z.object({ title: z.string(), version: z.string() }) }).loose();

/** What every readiness route checks (docs/operations.md, "Health probes"). */
const READINESS =
  'Each check within 2 s: `nats` (a round trip), `stream` (the Run stream answers), `consumers` (every durable consumer this ' +
  'replica serves exists on the server, looked up at most every 5 s, and is being pulled from), and `postgres` where ' +
  'PostgreSQL is used: required on the projector, and on admission when a quota is configured (else reported with ' +
  '`required: false` and never failing readiness).';

/** A readiness route (`/healthz`, `/readyz`): every service serves it, checking {@link READINESS}. */
const readinessRoute = (path: string, operationId: string, summary: string): HttpRoute => ({
  services: HttpServices,
  method: 'get',
  path,
  operationId,
  summary,
  description: READINESS,
  responses: {
    200: { description: 'Ready: every required check up (`info` and `details` say each check)', body: json(HealthBody) },
    503: problem('A required check is down (`dependency_unavailable` naming it; `checks` gives each result)', RETRY_AFTER),
  },
});

/** The registry: every HTTP route of every service. */
export const HttpRoutes: readonly HttpRoute[] = [
  {
    services: ['admission'],
    method: 'post',
    path: '/v1/conversations/{conversationId}/messages',
    operationId: 'postMessage',
    summary:
      'Submit a Message: admits it and its Run exactly once per clientMessageId (K1); an explicit Continue (K3) or a clarification answer (K2)',
    description:
      "Without `continuationOfRunId` or `replyTo` the message starts an ordinary new Run that may read the conversation's earlier Runs as " +
      'history and inherits nothing (K2). `continuationOfRunId` names a settled, eligible parent of the same conversation (completed, ' +
      'partial, or interrupted by a lost runtime), read from its log; the new Run is linked to it and gets a fresh grant and limits (K3). ' +
      '`replyTo` names a clarification a Run of the same conversation registered and nobody answered yet; the new Run carries it (K2).',
    request: { path: ConversationIdParams, body: json(PostMessageBody) },
    responses: {
      201: { description: 'A new Message and Run were admitted', body: json(PostMessageResponse) },
      200: { description: 'The same clientMessageId, text and parent were admitted before: nothing new', body: json(PostMessageResponse) },
      400: problem(
        'Bad body (`invalid_body`, every zod reason in `issues`: blank or invisible-only content, bidirectional overrides, control characters), ' +
          'bytes that are not UTF-8, malformed JSON or bad conversationId (`bad_request`)',
      ),
      404: problem('`continuationOfRunId` or `replyTo` names a Run or clarification that does not exist in this conversation (`not_found`)'),
      409: problem(
        'The same clientMessageId was admitted with other text, parent or reply (`message_conflict`, the field in `field`); the parent ' +
          'cannot be continued (`continuation_not_eligible`, why in `reason`); the clarification was answered by another message (`clarification_answered`)',
      ),
      413: problem('The body is larger than the server accepts (`payload_too_large`)'),
      415: NOT_JSON,
      429: {
        description:
          'A new Run would exceed a quota of the principal (`quota_exceeded`: which `quota`, its `limit`, what is `used`); nothing was ' +
          'appended. Retry after `Retry-After` seconds. A repeat of an admitted message is never refused',
        body: { contentType: PROBLEM_CONTENT_TYPE, schema: QuotaProblem },
        headers: RETRY_AFTER,
      },
      503: problem(
        'NATS JetStream, or with a quota set PostgreSQL (the projections it counts), is unreachable (`dependency_unavailable`); retry after `Retry-After` seconds',
        RETRY_AFTER,
      ),
    },
  },
  {
    services: ['admission'],
    method: 'get',
    path: '/v1/conversations/{conversationId}/messages/{clientMessageId}',
    operationId: 'getMessage',
    summary: 'What became of a message, by its clientMessageId (K1: a lost answer is reconciled by id, never by text)',
    request: { path: MessageParams },
    responses: {
      200: { description: 'The message was admitted: its ids, link and Run status, read from the log', body: json(MessageOutcome) },
      400: problem('Bad conversationId or clientMessageId (`bad_request`)'),
      404: problem('No message with this id was admitted in this conversation (`not_found`)'),
      503: NATS_UNAVAILABLE,
    },
  },
  {
    services: ['admission'],
    method: 'get',
    path: '/v1/runs',
    operationId: 'listRuns',
    summary: "The caller's Runs, newest admission first, a page at a time (from the projections)",
    description:
      "Runs of the token's principal (every Run with the `runplane:admin` scope, or with authentication disabled), read from the " +
      'projections: a Run admitted a moment ago may not be listed yet (projections follow the log). Each item is the Run projection ' +
      'of `GET /v1/runs/{runId}`. `nextCursor` continues the list after this page; null on the last page.',
    request: { query: RunsQuery },
    responses: {
      200: { description: 'One page of Runs', body: json(RunsPage) },
      400: problem('`limit` is not 1 to 100, or `cursor` is not one this API gave (`bad_request`, the reason in `issues`)'),
      503: unavailable('PostgreSQL (projections)'),
    },
  },
  {
    services: ['admission'],
    method: 'get',
    path: '/v1/runs/{runId}',
    operationId: 'getRun',
    summary: 'The Run projection',
    request: { path: RunIdParams },
    responses: {
      200: { description: 'The Run projection (status, outcome, counts, lastSeq)', body: json(RunView) },
      400: BAD_RUN_ID,
      404: problem('No such Run (`not_found`), or admitted but not projected yet (`not_projected_yet`, with `Retry-After: 1`)', RETRY_AFTER),
      503: unavailable('PostgreSQL (projections) or NATS JetStream'),
    },
  },
  {
    services: ['admission'],
    method: 'post',
    path: '/v1/runs/{runId}/tool-calls/{toolCallId}/reconcile',
    operationId: 'reconcileToolCall',
    summary: "Record an operator's reconciliation of a tool call whose outcome is unknown (K5)",
    description:
      "Records what was found at the destination (`succeeded`, `failed`, `not_executed`), the evidence, who (the token's `sub`; with " +
      'authentication disabled, body `operator` or the `X-Runplane-Operator` header) and when, as the event `tool.call.reconciled`. ' +
      'Dispatches nothing and never rewrites the receipt. Needs the `runplane:admin` scope.',
    request: { path: ToolCallParams, header: ReconcileHeaders, body: json(ReconcileToolCallBody) },
    responses: {
      201: { description: 'The reconciliation was recorded', body: json(ReconcileToolCallResponse) },
      200: { description: 'The same reconciliation was recorded before: nothing appended', body: json(ReconcileToolCallResponse) },
      400: problem('Bad body or ids (`invalid_body` / `bad_request`), or no operator named'),
      403: problem('The token lacks the `runplane:admin` scope (`forbidden`)'),
      404: problem('No such Run or tool call (`not_found`)'),
      409: problem('The call is not `unknown`, or was reconciled differently (`reconcile_conflict`)'),
      415: NOT_JSON,
      503: NATS_UNAVAILABLE,
    },
  },
  {
    services: ['admission'],
    method: 'post',
    path: '/v1/runs/{runId}/cancel',
    operationId: 'cancelRun',
    summary: "Record the user's intent to cancel a Run (K4)",
    description:
      'Records `run.cancel.requested` once; nothing new is started for the Run after it, recovery fences its execution and the lifecycle ' +
      'settles it `canceled`, keeping what was published. A repeated cancel gets the same answer and appends nothing. A dropped event ' +
      'stream is never a cancel.',
    request: { path: RunIdParams, header: CancelHeaders, body: json(CancelRunBody) },
    responses: {
      202: { description: 'The cancel intent is recorded (now or before)', body: json(CancelRunResponse) },
      400: problem('Bad runId or body (`bad_request` / `invalid_body`)'),
      404: NO_SUCH_RUN,
      409: problem('The Run is already settled (`run_settled`, with its `outcome`)'),
      415: NOT_JSON,
      503: NATS_UNAVAILABLE,
    },
  },
  {
    services: ['admission'],
    method: 'post',
    path: '/v1/runs/{runId}/waits/{waitId}',
    operationId: 'answerWait',
    summary: "Answer a Run's pending question for a human (K10)",
    description:
      'Records `wait.answered` once; the Run then continues within its original grant and remaining budget, with the answer as the ' +
      'result of its `ask_human` call. The same answer again gets 200 with the recorded answer and appends nothing; a different ' +
      'answer after one was recorded, an expired wait or a settled Run get 409 with the reason; a blank answer 400. Header ' +
      '`X-Runplane-User` names who answers.',
    request: { path: WaitParams, header: AnswerHeaders, body: json(AnswerWaitBody) },
    responses: {
      202: { description: 'The answer was accepted and recorded: the Run wakes', body: json(AnswerWaitResponse) },
      200: { description: 'The same answer was recorded before: nothing appended', body: json(AnswerWaitResponse) },
      400: problem('Bad ids or body, a blank answer (`bad_request` / `invalid_body`)'),
      404: problem("No such Run or wait, or another principal's Run (`not_found`)"),
      409: problem('The wait is not pending (`wait_not_pending`: expired, or the Run settled) or was answered differently (`wait_conflict`)'),
      415: NOT_JSON,
      503: NATS_UNAVAILABLE,
    },
  },
  {
    services: ['admission'],
    method: 'get',
    path: '/v1/runs/{runId}/waits',
    operationId: 'listWaits',
    summary: "A Run's waits (questions for a human), from its log",
    request: { path: RunIdParams },
    responses: {
      200: { description: 'Every wait the Run opened, with its status (`pending`, `answered`, `expired`, `closed`)', body: json(WaitsView) },
      400: BAD_RUN_ID,
      404: NO_SUCH_RUN,
      503: NATS_UNAVAILABLE,
    },
  },
  {
    services: ['publication'],
    method: 'get',
    path: '/v1/runs/{runId}/events',
    operationId: 'streamRunEvents',
    summary: "Server-Sent Events of a Run's stored events, replayed after Last-Event-ID, then live",
    description:
      'Each SSE message has `id: <stream seq>`, `event: <event type>` and `data: <event envelope JSON>`. The stream ends after `run.settled`. ' +
      'With `deltas=true`, live token deltas are interleaved as `event: delta` without an id (never replayed). The `Last-Event-ID` header wins over `?lastEventId=`. ' +
      'Each open stream holds one JetStream consumer: a principal may hold `RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL` open streams on one publication process ' +
      "(429 beyond), the process `RUNPLANE_OBSERVER_STREAMS_MAX` (503 beyond). The 200 is sent only once the stream's consumer exists: " +
      'every refusal is a problem answer, never a 200 that closes at once.',
    request: { path: RunIdParams, query: RunEventsQuery, header: RunEventsHeaders },
    responses: {
      200: {
        description: 'The event stream; every `data` is one event envelope',
        body: { contentType: 'text/event-stream', schema: RunEvent.meta({ id: 'RunEvent' }) },
      },
      204: { description: 'Last-Event-ID is at or after the settlement: nothing more will come' },
      400: problem(
        "Bad runId, Last-Event-ID or query (a repeated parameter too): `bad_request` with `issues`; a `Last-Event-ID` that is not 0 and not a position in this Run's log (a message on its subjects): `invalid_cursor` with `cursor` and `reason` (to an admin `beyond-end`, `other-run`, `not-an-event`; to anyone else `not-this-run`)",
      ),
      404: NO_SUCH_RUN,
      429: {
        description:
          'The principal holds as many open event streams on this publication process as `RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL` allows ' +
          '(`observer_limit`: the `setting`, its `limit`, the streams `open`); nothing was written. Close one, or retry after `Retry-After` seconds',
        body: { contentType: PROBLEM_CONTENT_TYPE, schema: ObserverLimitProblem },
        headers: RETRY_AFTER,
      },
      503: {
        description:
          'This publication process holds as many open event streams as `RUNPLANE_OBSERVER_STREAMS_MAX` allows (`observer_capacity`, with `setting`, ' +
          "`limit`, `open`), or NATS JetStream is unreachable or refused the stream's consumer (the stream's consumer limit: `dependency_unavailable`); " +
          'nothing was written. Retry after `Retry-After` seconds',
        body: { contentType: PROBLEM_CONTENT_TYPE, schema: ObserverLimitProblem.or(ProblemDetails) },
        headers: RETRY_AFTER,
      },
    },
  },
  {
    services: ['publication'],
    method: 'get',
    path: '/v1/runs/{runId}/answer',
    operationId: 'getAnswer',
    summary: 'The committed answer passages of a Run, in order',
    request: { path: RunIdParams },
    responses: {
      200: { description: 'Passages, joined text, `complete` and `outcome`', body: json(AnswerView) },
      400: BAD_RUN_ID,
      404: NO_SUCH_RUN,
      503: NATS_UNAVAILABLE,
    },
  },
  readinessRoute('/healthz', 'health', 'Readiness (the same as `/readyz`)'),
  readinessRoute(
    '/readyz',
    'readiness',
    'Readiness probe (`@nestjs/terminus`): NATS, the Run stream, the durable consumers this replica serves, and PostgreSQL where used',
  ),
  {
    services: HttpServices,
    method: 'get',
    path: '/livez',
    operationId: 'liveness',
    summary: 'Liveness probe: 200 while the process answers HTTP (no dependency checked: a NATS or PostgreSQL outage must not restart the pod)',
    responses: { 200: { description: 'Alive', body: json(HealthBody) } },
  },
  {
    services: ['admission', 'publication'],
    method: 'get',
    path: '/partitions',
    operationId: 'partitions',
    summary: "This replica's share of its service's partitions: the partitions it consumes now and the live replicas they were shared among",
    description:
      'An operator view: on admission and publication (the services exposed to callers) it wants a bearer token with ' +
      '`runplane:admin` (unless authentication is disabled); the internal services (runtime, tools, lifecycle, recovery, ' +
      'projector) have no authentication and serve it openly on their cluster-internal port.',
    responses: {
      200: { description: 'The partitions this replica owns', body: json(PartitionsBody) },
      403: problem('The token lacks the `runplane:admin` scope (`forbidden`, `requiredScope`)'),
    },
    token: true,
  },
  {
    services: ['runtime', 'tools', 'lifecycle', 'recovery', 'projector'],
    method: 'get',
    path: '/partitions',
    operationId: 'internalPartitions',
    summary: "This replica's share of its service's partitions (an internal service: no authentication, reachable inside the cluster only)",
    responses: {
      200: { description: 'The partitions this replica owns', body: json(PartitionsBody) },
    },
  },
  {
    services: HttpServices,
    method: 'get',
    path: '/metrics',
    operationId: 'metrics',
    summary:
      "This service's Prometheus metrics (text exposition format): the Runplane series of docs/metrics.md (Run duration and queue time, model requests and tokens, tool durations, appends, consumer deliveries, leases, SSE observers, anomalies, settlements, quotas, cost) and process metrics",
    description: 'Every series carries the label `service`. See docs/operations.md "Metrics".',
    responses: { 200: { description: 'Prometheus text format 0.0.4', body: { contentType: 'text/plain; version=0.0.4', schema: z.string() } } },
  },
  {
    services: HttpServices,
    method: 'get',
    path: '/openapi.json',
    operationId: 'openApi',
    summary: "This service's OpenAPI 3.1 description (generated from the zod schemas): public, no token (it describes routes, holds no data)",
    responses: { 200: { description: 'The OpenAPI description', body: json(OpenApiDocumentBody) } },
  },
];

/**
 * The API routes (`/v1/...`) and admission's and publication's `/partitions` want a bearer JWT
 * (docs/api.md "Authentication and routes"); health, metrics and `openapi.json` (a public description) do not.
 */
const authenticated = (route: HttpRoute) => route.path.startsWith('/v1/') || route.token === true;
const UNAUTHORIZED = problem(
  'No bearer token, or one whose signature, issuer, audience or expiry does not verify (`unauthorized`, with `WWW-Authenticate: Bearer` and the reason)',
  { 'WWW-Authenticate': 'Bearer realm="runplane", error="...", error_description="..."' },
);

function operation(route: HttpRoute, tags: string[]): ZodOpenApiOperationObject {
  const responses: Record<string, ZodOpenApiResponseObject> = {};
  const all = authenticated(route) ? { ...route.responses, 401: UNAUTHORIZED } : route.responses;
  for (const [status, r] of Object.entries(all)) {
    responses[status] = {
      description: r.description,
      ...(r.body ? { content: { [r.body.contentType]: { schema: r.body.schema } } } : {}),
      ...(r.headers
        ? { headers: Object.fromEntries(Object.entries(r.headers).map(([name, description]) => [name, { description, schema: { type: 'string' } }])) }
        : {}),
    };
  }
  const params = route.request;
  return {
    operationId: route.operationId,
    summary: route.summary,
    ...(route.description ? { description: route.description } : {}),
    tags,
    ...(params?.path || params?.query || params?.header
      ? {
          requestParams: {
            ...(params.path ? { path: params.path } : {}),
            ...(params.query ? { query: params.query } : {}),
            ...(params.header ? { header: params.header } : {}),
          },
        }
      : {}),
    ...(params?.body ? { requestBody: { required: true, content: { [params.body.contentType]: { schema: params.body.schema } } } } : {}),
    ...(authenticated(route) ? { security: [{ bearer: [] }] } : {}),
    responses,
  };
}

/**
 * The OpenAPI 3.1 description of one service's routes, or of every route of every service (the
 * whole API, docs/openapi.json) when `service` is omitted. A path served by several services with
 * different shapes (`/healthz`) is described once, by its first registration; the others are
 * noted in its description.
 */
export function openApiDocument(service?: HttpService): ReturnType<typeof createDocument> {
  const paths: ZodOpenApiPathsObject = {};
  for (const route of HttpRoutes) {
    if (service && !route.services.includes(service)) continue;
    const item = (paths[route.path] ??= {});
    if (item[route.method]) continue;
    item[route.method] = operation(route, [...route.services]);
  }
  return createDocument({
    openapi: '3.1.0',
    info: {
      title: service ? `Runplane ${service}` : 'Runplane',
      version: '0.1.0',
      description:
        'HTTP API of the Runplane control plane, generated from the zod schemas in libs/contracts. Every error answer is ' +
        '`application/problem+json` (RFC 9457) with the extension members `code` and, on 400s, `issues`. Every `/v1` route wants a ' +
        "bearer JWT (`Authorization: Bearer`); conversation ids are per principal (the token's `sub`: the same id of two principals " +
        "is two Conversations), a Run is its principal's, and another principal gets the 404 of an unknown id; `runplane:admin` may " +
        'read any Run, reconcile tool calls and read `/partitions`. Health, metrics and this description need no token.',
    },
    components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } } },
    tags: (service ? [service] : [...HttpServices]).map((name) => ({ name })),
    paths,
  });
}

/** The whole description as written to docs/openapi.json (2-space JSON, trailing newline). */
export function renderOpenApi(): string {
  return `${JSON.stringify(openApiDocument(), null, 2)}\n`;
}
