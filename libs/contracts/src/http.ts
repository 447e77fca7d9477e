/** HTTP bodies of the admission and publication APIs (zod is their single source). */
import { z } from 'zod';
import { Id, Outcome, ReceiptStatus } from './events.js';
import { UnansweredPart } from './unanswered.js';
import { showsSomething } from './principal.js';

/**
 * Content made only of invisible characters (principal.ts `showsSomething`) is refused like blank
 * content: it would start a Run that spends model requests on nothing (K1 admission checks).
 */
export { showsSomething };
/** Bidirectional embedding, override and isolate controls (U+202A-U+202E, U+2066-U+2069): they can make text read other than it is stored. */
export const BIDI_CONTROLS = /[\u202A-\u202E\u2066-\u2069]/u;

/**
 * The largest request body any service reads, bytes (over it: 413 `payload_too_large`). Sized so
 * that every body within its schema's limits fits however a client escapes it: a 20,000-character
 * message (or wait answer) whose characters are all escaped as `\\uXXXX` surrogate pairs (12
 * bytes each, Python's `json.dumps` default does this for emoji) is 240,000 bytes plus its ids.
 * Express's default (100 KiB) refused such a valid message.
 */
export const MAX_REQUEST_BODY_BYTES = 256 * 1024;

/**
 * A user's message text (a question, a Continue instruction or a clarification answer): at most
 * 20,000 characters, showing something (not blank, not only invisible characters), without
 * control characters other than tab and newlines, without bidirectional overrides or isolates,
 * and well-formed Unicode. Bytes that are not UTF-8 are refused before this (400 `bad_request`).
 */
export const MessageContent = z
  .string()
  .max(20_000, 'content is at most 20000 characters')
  .refine((s) => s.trim().length > 0, 'content must not be blank')
  .refine(
    (s) => s.trim().length === 0 || showsSomething(s),
    'content must show something: it has only invisible characters (zero-width, combining marks, fillers, whitespace)',
  )
  .refine(
    // eslint-disable-next-line no-control-regex -- matching control characters is the point
    (s) => !/[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F]/.test(s),
    'content must not contain control characters (other than tab and newlines)',
  )
  .refine((s) => !BIDI_CONTROLS.test(s), 'content must not contain bidirectional override or isolate characters (U+202A-U+202E, U+2066-U+2069)')
  .refine((s) => s.isWellFormed(), 'content must be well-formed Unicode (no lone surrogates)');

/** The clarification a message answers (K2): the Run that asked and the id of its `clarification.requested`. */
export const ReplyTo = z
  .object({
    runId: Id.meta({ description: 'The Run that asked the clarification question' }),
    clarificationId: Id.meta({ description: 'The clarification id (from its `clarification.requested` event)' }),
  })
  .strict()
  .meta({ id: 'ReplyTo' });
export type ReplyTo = z.infer<typeof ReplyTo>;

/**
 * What a client asks of a new Run's grant (K7): `maxCost`, the most its model requests may cost,
 * integer micro-units (1 USD = 1,000,000) of `currency`, which must be the currency of the model's
 * configured price (`RUNPLANE_MODEL_PRICES`); at most `RUNPLANE_GRANT_CEILING_COST_MICROS`. A repeat
 * of an admitted message (K1) returns the Run as first admitted, whatever budget it carries.
 */
export const RunBudget = z
  .object({
    maxCost: z
      .object({
        micros: z.number().int().positive().meta({ description: 'Micro-units of the currency (1 USD = 1000000)', example: 50000 }),
        currency: z.string().regex(/^[A-Z]{3}$/, 'currency is a 3-letter code such as USD'),
      })
      .strict()
      .optional(),
  })
  .strict()
  .meta({ id: 'RunBudget' });
export type RunBudget = z.infer<typeof RunBudget>;

/**
 * `POST /v1/conversations/{conversationId}/messages` body. `continuationOfRunId` asks for an
 * explicit Continue of that Run (K3); `replyTo` answers a registered clarification (K2); at most
 * one of them. Without either the message is an ordinary new Run, whatever its text says.
 */
export const PostMessageBody = z
  .object({
    clientMessageId: z
      .string()
      .min(1)
      .max(200)
      .regex(/^[A-Za-z0-9._:-]+$/, 'clientMessageId uses letters, digits, ".", "_", ":" and "-" only')
      // child Runs are admitted under `child.<parentRunId>.<toolCallId>` (K1 by that id): a user's message may not take one
      .refine((s) => !s.startsWith('child.'), 'clientMessageId must not start with "child." (reserved for child Runs)'),
    content: MessageContent,
    continuationOfRunId: Id.optional().meta({ description: 'Continue this settled Run of the same conversation as a new, linked Run (K3)' }),
    replyTo: ReplyTo.optional().meta({ description: 'The clarification this message answers (K2)' }),
    budget: RunBudget.optional().meta({ description: "Limits of the new Run's grant asked by the client, within the deployment's ceiling (K7)" }),
  })
  .strict()
  .refine((b) => !(b.continuationOfRunId && b.replyTo), { message: 'give continuationOfRunId or replyTo, not both', path: ['replyTo'] })
  .meta({ id: 'PostMessageBody' });
export type PostMessageBody = z.infer<typeof PostMessageBody>;

/** How an admitted Run relates to an earlier one (`run.admitted.link`), or null for an ordinary message. */
export const RunLinkView = z
  .object({ parentRunId: Id, relation: z.enum(['child', 'continuation', 'clarification']) })
  .nullable()
  .meta({ id: 'RunLinkView' });

/** The ids of an admitted message and its Run, and when it was admitted: the head of every answer about a message. */
const AdmittedMessage = {
  conversationId: Id,
  clientMessageId: z.string(),
  messageId: Id,
  runId: Id,
  admittedAt: z.string().datetime(),
};

/** 201 (admitted now) or 200 (the same message was already admitted: K1). */
export const PostMessageResponse = z
  .object({
    ...AdmittedMessage,
    /** `admitted` for a new admission, `existing` for an idempotent repeat. */
    admission: z.enum(['admitted', 'existing']),
    /** The parent of a Continue (`continuation`) or of a clarification answer (`clarification`); null for an ordinary message. */
    link: RunLinkView.optional(),
  })
  .meta({ id: 'PostMessageResponse' });
export type PostMessageResponse = z.infer<typeof PostMessageResponse>;

/**
 * `GET /v1/conversations/{conversationId}/messages/{clientMessageId}`: what became of a message,
 * read by its id (K1: a client that lost the answer reconciles by id, never by text), from the
 * Run's log: the ids, the link and the Run's status.
 */
export const MessageOutcome = z
  .object({
    ...AdmittedMessage,
    link: RunLinkView,
    /** `admitted` (no model turn yet), `running`, or `settled` (see `outcome`). */
    status: z.enum(['admitted', 'running', 'settled']),
    outcome: Outcome.nullable(),
  })
  .meta({ id: 'MessageOutcome' });
export type MessageOutcome = z.infer<typeof MessageOutcome>;

/** Path parameters of `GET /v1/conversations/{conversationId}/messages/{clientMessageId}`. */
export const MessageParams = z.object({
  conversationId: Id.meta({ description: 'Conversation id chosen by the client' }),
  clientMessageId: z.string().min(1).max(200).meta({ description: 'The client message id the message was posted with' }),
});

/** One reason a request was refused: where (`path`, dotted; `(body)` for the whole body) and why. */
export const ProblemIssue = z.object({ path: z.string(), message: z.string() }).meta({ id: 'ProblemIssue' });
export type ProblemIssue = z.infer<typeof ProblemIssue>;

/** Media type of every error answer (RFC 9457). */
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/** Prefix of the `type` URI of Runplane's problem types: `urn:runplane:problem:<code>`. */
export const PROBLEM_TYPE_PREFIX = 'urn:runplane:problem:';

/**
 * The body of every HTTP error answer of every service: RFC 9457 problem details
 * (`application/problem+json`). `type` is `urn:runplane:problem:<code>`, `title` the fixed
 * summary of that type, `detail` this occurrence's reason, `instance` the request path.
 * Extension members: `code` (the stable machine-readable reason, also the end of `type`) and
 * `issues` (every validation reason, for 400s). Other extension members may appear (the
 * projector's health adds `nats` and `postgres`); clients must ignore unknown ones.
 */
export const ProblemDetails = z
  .object({
    type: z.string().meta({ description: 'URI of the problem type: urn:runplane:problem:<code>' }),
    title: z.string().meta({ description: 'Short, fixed summary of the problem type' }),
    status: z.number().int().min(400).max(599).meta({ description: 'The HTTP status code of this answer' }),
    detail: z.string().meta({ description: 'Why this request failed, for a human' }),
    instance: z.string().optional().meta({ description: 'The request path this problem occurred on' }),
    code: z.string().meta({ description: 'Stable machine-readable reason (extension member)' }),
    issues: z.array(ProblemIssue).optional().meta({ description: 'Every validation reason (extension member, on 400s)' }),
  })
  .meta({ id: 'ProblemDetails' });
export type ProblemDetails = z.infer<typeof ProblemDetails>;

/**
 * 429 `quota_exceeded`: a new Run would exceed a per-principal quota of admission (nothing was
 * appended). The `Retry-After` header carries `retryAfterSeconds`.
 */
/** The per-principal quotas of admission, as a 429 names them (`quota`) and the metric labels them. */
export const QuotaNames = ['concurrent-runs', 'runs-per-hour', 'cost-per-day'] as const;
export type QuotaName = (typeof QuotaNames)[number];

export const QuotaProblem = ProblemDetails.extend({
  quota: z.enum(QuotaNames).meta({ description: 'Which quota refused the Run' }),
  limit: z.number().int().min(1).meta({ description: 'The quota (RUNPLANE_QUOTA_*)' }),
  used: z.number().int().min(0).meta({ description: "What the principal's Runs use of it, as the projections counted" }),
  retryAfterSeconds: z.number().int().min(1).meta({
    description:
      'Seconds until a retry may be admitted (runs-per-hour: when enough Runs have left the sliding hour; cost-per-day: when enough of the cost has left the sliding 24 h, the earliest, since Runs still running may charge more); for concurrent-runs a hint to poll at, since when a Run settles is not known (5 s, up to 300 s when every counted Run waits for a human)',
  }),
  currency: z
    .string()
    .regex(/^[A-Z]{3}$/)
    .optional()
    .meta({ description: 'cost-per-day only: the currency of limit and used, which are then integer micro-units (1 USD = 1,000,000)' }),
}).meta({ id: 'QuotaProblem' });
export type QuotaProblem = z.infer<typeof QuotaProblem>;

/**
 * 429 `observer_limit` / 503 `observer_capacity`: an event stream refused before anything was
 * written, because its principal (429) or the publication process (503) holds as many open
 * streams as its cap allows. The `Retry-After` header carries `retryAfterSeconds`.
 */
export const ObserverLimitProblem = ProblemDetails.extend({
  setting: z
    .enum(['RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL', 'RUNPLANE_OBSERVER_STREAMS_MAX'])
    .meta({ description: 'The setting whose cap refused the stream' }),
  limit: z.number().int().min(1).meta({ description: 'The cap (that setting), streams' }),
  open: z.number().int().min(0).meta({ description: 'Streams open under that cap on this publication process when the request came' }),
  retryAfterSeconds: z.number().int().min(1).meta({
    description:
      'Seconds to wait before opening the stream again: a hint, since when an open stream ends (its Run settles, its client leaves) is not known',
  }),
}).meta({ id: 'ObserverLimitProblem' });
export type ObserverLimitProblem = z.infer<typeof ObserverLimitProblem>;

/**
 * The problem types the services answer with, and their fixed titles. Errors Nest raises itself
 * (an HTTP status without a Runplane code) use the lower-cased status name as code.
 */
export const ProblemTitles: Record<string, string> = {
  bad_request: 'Bad request',
  unauthorized: 'Authentication is required',
  forbidden: 'The token lacks a scope this needs',
  headers_too_large: 'Request headers too large',
  request_timeout: 'The request did not arrive in time',
  invalid_body: 'The request body is invalid',
  unsupported_media_type: 'Unsupported media type',
  payload_too_large: 'Request body too large',
  invalid_cursor: "The cursor is not a position in this Run's log",
  not_found: 'Not found',
  route_not_found: 'No such route',
  not_projected_yet: 'Not projected yet',
  message_conflict: 'Message conflicts with an earlier one',
  continuation_not_eligible: 'The Run cannot be continued',
  clarification_answered: 'The clarification was already answered',
  reconcile_conflict: 'The tool call cannot be reconciled so',
  run_settled: 'The Run is already settled',
  wait_not_pending: 'The wait is not pending',
  wait_conflict: 'The wait was answered differently',
  admission_contended: 'Admission contended',
  quota_exceeded: 'A quota of the principal is exceeded',
  observer_limit: 'The principal holds as many event streams as it may',
  observer_capacity: 'The publication process holds as many event streams as it may',
  dependency_unavailable: 'A dependency is unavailable',
  internal_error: 'Internal error',
};

/** `GET /v1/runs/{runId}`: the Run projection. */
export const RunView = z
  .object({
    runId: Id,
    /**
     * Whose Run it is (the token's `sub` its `run.admitted` recorded; null when admitted with
     * authentication off): in an admin's view only, so that an operator's list tells tenants apart.
     */
    principal: z.string().nullable().optional(),
    conversationId: Id,
    messageId: Id,
    clientMessageId: z.string(),
    question: z.string(),
    /** `awaiting_human` / `awaiting_child`: parked on a question or a child Run (K10); nothing executes it meanwhile. */
    status: z.enum(['admitted', 'running', 'awaiting_human', 'awaiting_child', 'finishing', 'settled']),
    outcome: Outcome.nullable(),
    reason: z.string().nullable(),
    modelRequests: z.number().int(),
    /** Tokens measured, summed over the model requests that reported usage (a lower bound when `unknownUsageTurns` > 0). */
    promptTokens: z.number().int(),
    completionTokens: z.number().int(),
    /** Model requests whose token usage is unknown (no usage reported, failed, cut, in flight): never counted as 0 tokens (K9). */
    unknownUsageTurns: z.number().int(),
    toolCalls: z.number().int(),
    passages: z.number().int(),
    admittedAt: z.string().datetime(),
    settledAt: z.string().datetime().nullable(),
    // budget limits of the grant (K7): compare with the counts above; null on Runs projected before they existed
    maxModelRequests: z.number().int().nullable(),
    maxToolCalls: z.number().int().nullable(),
    /** Null: not limited by tokens. */
    maxInputTokens: z.number().int().nullable(),
    maxOutputTokens: z.number().int().nullable(),
    /** The money limit of the grant, micro-units of `costCurrency` (K7); null: not limited by money. */
    maxCostMicros: z.number().int().nullable(),
    /** The currency of the Run's cost (its model's price, or its money limit); null: its turns were not priced. */
    costCurrency: z.string().nullable(),
    /** Cost measured from the usage the model reported, micro-units (K7). */
    costMicros: z.number().int(),
    /**
     * The most the turns whose usage is unknown (or still in flight) may have cost beyond
     * `costMicros`: the Run cost between `costMicros` and `costMicros + costUnknownMaxMicros` (K7,
     * K9: never counted as 0).
     */
    costUnknownMaxMicros: z.number().int(),
    /** The final-output reserve ordinary research cannot spend (K7, K9); null: none. */
    reserveModelRequests: z.number().int().nullable(),
    reserveOutputTokens: z.number().int().nullable(),
    /** The no-progress limit, seconds (K7); null: none. */
    noProgressSeconds: z.number().int().nullable(),
    deadlineAt: z.string().datetime().nullable(),
    // clocks (K7): time since progress and to the deadline are the reader's `now` minus `lastProgressAt` / `deadlineAt` minus `now`
    /** First model request or lease grant; null while queued. */
    startedAt: z.string().datetime().nullable(),
    /** Queue time, admission to `startedAt`, ms. */
    queuedMs: z.number().int().nullable(),
    /** `run.execution.finished` or the first fence; null while executing. */
    executionEndedAt: z.string().datetime().nullable(),
    /** Execution time, `startedAt` to `executionEndedAt`, ms (parked time included). */
    executingMs: z.number().int().nullable(),
    /** The last fact counted as progress: answer text, a turn with text, a valid tool call, a receipt, a wake (K7). */
    lastProgressAt: z.string().datetime().nullable(),
    /**
     * The clarification the Run asked the user (`ask_clarification`, K2): its question is the Run's
     * published answer, and a reply naming this id starts a new Run. Null when it asked none.
     */
    clarificationId: Id.nullable(),
    /** Stream sequence of the last event applied to this projection. */
    lastSeq: z.number().int(),
  })
  .meta({ id: 'RunView' });
export type RunView = z.infer<typeof RunView>;

/**
 * Query of `GET /v1/runs`: `limit` Runs per page (1..100, default 50) and the `cursor` of the
 * next page (opaque: the `nextCursor` of the previous page). Unknown parameters are ignored; a
 * repeated one, or one in a bracketed form (`limit[]=2`), is refused (400; service-kit `parseQuery`).
 */
export const RunsQuery = z.object({
  limit: z
    .string()
    .regex(/^\d{1,3}$/, 'limit must be a whole number from 1 to 100')
    .transform(Number)
    .pipe(z.number().int().min(1, 'limit must be at least 1').max(100, 'limit must be at most 100'))
    .optional()
    .meta({ description: 'Runs per page, 1 to 100 (default 50)', example: '20' }),
  cursor: z.string().min(1).max(400).optional().meta({ description: 'The `nextCursor` of the previous page' }),
});
export type RunsQuery = z.infer<typeof RunsQuery>;

/** Default page size of `GET /v1/runs`. */
export const RUNS_PAGE_DEFAULT = 50;

/**
 * The position after which the next page of `GET /v1/runs` starts: the last Run of a page, by
 * admission time then id (the list's order, newest first). Sent as base64url JSON, opaque to clients.
 */
export const RunsCursor = z.object({ admittedAt: z.string().datetime(), runId: Id }).strict();
export type RunsCursor = z.infer<typeof RunsCursor>;

/** `GET /v1/runs`: one page of Runs, newest admission first, and the cursor of the next page (null on the last). */
export const RunsPage = z
  .object({
    runs: z.array(RunView),
    /** Pass as `?cursor=` for the next page; null when this page is the last. */
    nextCursor: z.string().nullable(),
  })
  .meta({ id: 'RunsPage' });
export type RunsPage = z.infer<typeof RunsPage>;

export const ToolCallView = z.object({
  toolCallId: Id,
  name: z.string(),
  status: z.enum(['proposed', 'dispatched']).or(ReceiptStatus),
});

/**
 * `GET /v1/runs/{runId}/answer`: the latest version of each passage. Once the answer is published,
 * exactly its passages in order; before that (still streaming, or settled without
 * an answer), every committed passage in the order of its source turn, then index.
 */
export const AnswerView = z
  .object({
    runId: Id,
    passages: z.array(
      z.object({
        passageId: Id,
        /** Position among the passages of its source turn. */
        index: z.number().int(),
        version: z.number().int(),
        text: z.string(),
        /** The model turn whose text the passage is. */
        sourceTurn: z.number().int(),
      }),
    ),
    text: z.string(),
    /**
     * True only once the Run settled `completed` (K9): false while it runs, and for a `partial`,
     * `failed`, `canceled` or `interrupted` settlement even when an answer was published.
     */
    complete: z.boolean(),
    /**
     * What the answer does not answer: the settlement's list once settled, else the published
     * answer's own list, else [] (K9).
     */
    unanswered: z.array(UnansweredPart),
    outcome: Outcome.nullable(),
  })
  .meta({ id: 'AnswerView' });
export type AnswerView = z.infer<typeof AnswerView>;

/** `POST /v1/runs/{runId}/tool-calls/{toolCallId}/reconcile` body (K5). */
export const ReconcileToolCallBody = z
  .object({
    /** What the operator found at the destination. */
    outcome: z.enum(['succeeded', 'failed', 'not_executed']),
    evidence: z.string().trim().min(1, 'evidence must not be blank').max(4000),
    /** The operator; may instead be given in the `X-Runplane-Operator` header. */
    operator: z.string().trim().min(1).max(200).optional(),
  })
  .strict()
  .meta({ id: 'ReconcileToolCallBody' });
export type ReconcileToolCallBody = z.infer<typeof ReconcileToolCallBody>;

/** 201 (recorded now) or 200 (the same reconciliation was recorded before). */
export const ReconcileToolCallResponse = z
  .object({
    runId: Id,
    toolCallId: Id,
    name: z.string(),
    outcome: z.enum(['succeeded', 'failed', 'not_executed']),
    evidence: z.string(),
    operator: z.string(),
    reconciledAt: z.string().datetime(),
    /** `recorded` now, or `existing` for an idempotent repeat. */
    reconciliation: z.enum(['recorded', 'existing']),
  })
  .meta({ id: 'ReconcileToolCallResponse' });
export type ReconcileToolCallResponse = z.infer<typeof ReconcileToolCallResponse>;

/** `POST /v1/runs/{runId}/cancel` body: optional (an empty body or `{}` is fine). */
export const CancelRunBody = z
  .object({
    /** Why the user cancels, kept with the cancel intent. */
    reason: z.string().trim().max(2000).optional(),
  })
  .strict()
  .meta({ id: 'CancelRunBody' });
export type CancelRunBody = z.infer<typeof CancelRunBody>;

/** 202: the cancel intent is recorded (now, or by an earlier request: the same answer, nothing appended). */
export const CancelRunResponse = z
  .object({
    runId: Id,
    status: z.literal('cancel-requested'),
    requestedAt: z.string().datetime(),
  })
  .meta({ id: 'CancelRunResponse' });
export type CancelRunResponse = z.infer<typeof CancelRunResponse>;
export const CancelHeaders = z.object({
  'x-runplane-user': z.string().optional().meta({
    description: "Who cancels (kept with the cancel intent), only when authentication is disabled; ignored otherwise (the token's `sub` is recorded)",
  }),
});

/** `POST /v1/runs/{runId}/waits/{waitId}` body: the human's answer (K10). */
export const AnswerWaitBody = z
  .object({
    answer: z
      .string()
      .max(20_000, 'answer is at most 20000 characters')
      .refine((s) => s.trim().length > 0, 'answer must not be blank')
      .refine((s) => s.isWellFormed(), 'answer must be well-formed Unicode (no lone surrogates)'),
  })
  .strict()
  .meta({ id: 'AnswerWaitBody' });
export type AnswerWaitBody = z.infer<typeof AnswerWaitBody>;

/** One wait of a Run, as its log says (`GET /v1/runs/{runId}/waits`, and the answer's response). */
export const WaitView = z
  .object({
    runId: Id,
    waitId: Id,
    toolCallId: Id,
    question: z.string(),
    /** `pending` (answerable), `answered`, `expired` (past `expiresAt` unanswered) or `closed` (the Run settled unanswered). */
    status: z.enum(['pending', 'answered', 'expired', 'closed']),
    openedAt: z.string().datetime(),
    expiresAt: z.string().datetime(),
    answer: z.string().nullable(),
    answeredBy: z.string().nullable(),
    answeredAt: z.string().datetime().nullable(),
  })
  .meta({ id: 'WaitView' });
export type WaitView = z.infer<typeof WaitView>;

/** 202 (accepted now) or 200 (the same answer was recorded before: nothing appended). */
export const AnswerWaitResponse = WaitView.extend({
  /** `recorded` now, or `existing` for an idempotent repeat. */
  recording: z.enum(['recorded', 'existing']),
}).meta({ id: 'AnswerWaitResponse' });
export type AnswerWaitResponse = z.infer<typeof AnswerWaitResponse>;

/** `GET /v1/runs/{runId}/waits`: every wait the Run opened, in order. */
export const WaitsView = z.object({ runId: Id, waits: z.array(WaitView) }).meta({ id: 'WaitsView' });
export type WaitsView = z.infer<typeof WaitsView>;

/** Path parameters of the wait routes. */
export const WaitParams = z.object({
  runId: Id.meta({ description: 'The Run id' }),
  waitId: Id.meta({ description: 'The wait id (from `wait.opened` or `GET /v1/runs/{runId}/waits`)' }),
});
export const AnswerHeaders = z.object({
  'x-runplane-user': z.string().optional().meta({
    description: "Who answers (kept with the answer), only when authentication is disabled; ignored otherwise (the token's `sub` is recorded)",
  }),
});

/** Path parameters of the tool-call routes. */
export const ToolCallParams = z.object({
  runId: Id.meta({ description: 'The Run id' }),
  toolCallId: Id.meta({ description: 'The tool call id (from the Run events)' }),
});
export const ReconcileHeaders = z.object({
  'x-runplane-operator': z.string().optional().meta({ description: 'The operator reconciling (when the body does not name one)' }),
});

/** Turns a zod error into the 400 body's issue list. */
export function zodIssues(error: z.ZodError): { path: string; message: string }[] {
  return error.issues.map((i) => ({ path: i.path.join('.') || '(body)', message: i.message }));
}

/** A stream sequence as text (`Last-Event-ID` header or `?lastEventId=`): 0 to 15 digits' worth. */
export const LastEventIdText = z
  .string()
  .regex(/^\s*\d{1,15}\s*$/, 'must be a stream sequence number (a non-negative integer of at most 15 digits)')
  .meta({ description: 'Stream sequence of the last event the observer saw (the SSE id)', example: '42' });

/** Path parameters of the Run routes. */
export const RunIdParams = z.object({ runId: Id.meta({ description: 'The Run id (from the admission answer)' }) });
/** Path parameters of the conversation routes. */
export const ConversationIdParams = z.object({ conversationId: Id.meta({ description: 'Conversation id chosen by the client' }) });

/**
 * Query of `GET /v1/runs/{runId}/events`. Each parameter at most once: a repeated one (an array
 * here) or a bracketed one (`deltas[]=true`) is refused with 400, as is an unknown value; unknown
 * parameters are ignored (service-kit `parseQuery`).
 */
export const RunEventsQuery = z.object({
  lastEventId: LastEventIdText.optional(),
  deltas: z.enum(['true', 'false']).optional().meta({ description: '`true` interleaves live token deltas (not stored) as `event: delta`' }),
});
export type RunEventsQuery = z.infer<typeof RunEventsQuery>;

/** Headers of `GET /v1/runs/{runId}/events` (the header wins over `?lastEventId=`). */
export const RunEventsHeaders = z.object({ 'last-event-id': LastEventIdText.optional() });

/** One check's result in a health body: `up` or `down`, with what the check says (`reason`, `name`, `durables`, `required`...). */
export const HealthCheckResultBody = z.looseObject({ status: z.enum(['up', 'down']) }).meta({ id: 'HealthCheckResult' });

/**
 * `GET /livez`, `/readyz` and `/healthz` of every service (`@nestjs/terminus`): `status` and, for
 * readiness, each check by name (`nats`, `stream`, `consumers`, and `postgres` on the projector and
 * admission) in `details`, the ones up in `info` and the ones down in `error` (a reported-only
 * check that is down is in `details` only). A 503 is problem details with the same map in `checks`.
 */
export const HealthBody = z
  .object({
    status: z.literal('ok'),
    info: z.record(z.string(), HealthCheckResultBody).optional(),
    error: z.record(z.string(), HealthCheckResultBody).optional(),
    details: z.record(z.string(), HealthCheckResultBody).optional(),
  })
  .meta({ id: 'Health' });

/** `GET /partitions` of every service: this replica's share of its service's partitions (docs/operations.md). */
export const PartitionsBody = z
  .object({
    service: z.string(),
    /** This process's member id (its writer instance). */
    instance: z.string(),
    /** P, the stream's partition count. */
    partitionCount: z.number().int(),
    /** The partitions this replica owns and consumes now, ascending. */
    partitions: z.array(z.number().int()),
    /** The live replicas of the service (instance ids), as of the last membership change. */
    members: z.array(z.string()),
  })
  .meta({ id: 'Partitions' });
export type PartitionsBody = z.infer<typeof PartitionsBody>;
