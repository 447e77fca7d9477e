/**
 * The event catalogue: every fact Runplane records, as zod schemas. Each event travels in the
 * same envelope ({@link EnvelopeFields}) on its Run's subject `<prefix>.run.<runId>.<owner>.<partition>`,
 * so a Run's events read in order are that Run's stream and the owner of every fact is visible in
 * its subject. Each type's schema has a `schemaVersion` (the contract's event schema version) and
 * changes only additively: an incompatible change is a new event type (docs/contract/README.md,
 * checked against the last released JSON Schema by libs/contracts/test/contract.test.ts).
 */
import { z } from 'zod';
import { ParkingToolNames, TestToolNames, ToolEffect, ToolNames } from './tools.js';
import { UnansweredPart } from './unanswered.js';

/** The service that alone may establish a kind of fact (CONTRACTS.md "Owner"). */
export const Owner = z.enum(['admission', 'runtime', 'tools', 'publication', 'recovery', 'lifecycle']);
export type Owner = z.infer<typeof Owner>;

/** Identifier token: safe inside a NATS subject token and a URL path segment. */
export const Id = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9_-]+$/, 'ids use letters, digits, "_" and "-" only');

export const Usage = z.object({
  promptTokens: z.number().int().nonnegative(),
  completionTokens: z.number().int().nonnegative(),
  totalTokens: z.number().int().nonnegative(),
});
export type Usage = z.infer<typeof Usage>;

export const ToolErrorBody = z.object({ code: z.string(), message: z.string() });

/**
 * An amount of money (K7): integer micro-units (`micros`, 1 USD = 1,000,000) of an ISO-4217-like
 * currency code. Never a float: sums on the ledger are exact.
 */
export const Money = z.object({
  micros: z.number().int().nonnegative(),
  currency: z.string().regex(/^[A-Z]{3}$/, 'currency is a 3-letter code such as USD'),
});
export type Money = z.infer<typeof Money>;

/**
 * The price of a model's tokens as configured (`RUNPLANE_MODEL_PRICES`), integer micro-units of
 * `currency` per million tokens (an input price of 3 USD per million tokens is 3,000,000).
 */
export const TokenPrice = z.object({
  currency: z.string().regex(/^[A-Z]{3}$/),
  inputMicrosPerMTok: z.number().int().nonnegative(),
  outputMicrosPerMTok: z.number().int().nonnegative(),
});
export type TokenPrice = z.infer<typeof TokenPrice>;

/**
 * What one model turn cost (K7), recorded on its outcome (`model.turn.completed`,
 * `model.turn.failed`) when its request carried a price: `measuredMicros` from the usage the
 * model reported (0 when it reported none), and `unknownMaxMicros`, the most the turn may have
 * cost beyond that when its usage is unknown: its reservation (the input part only when the
 * provider generated nothing: an HTTP error or a refused connection; 0 for a request never sent).
 * The turn cost between `measuredMicros` and `measuredMicros + unknownMaxMicros`; the ledger
 * charges the upper bound, never 0 for unknown usage.
 */
export const TurnCost = z.object({
  currency: z.string().regex(/^[A-Z]{3}$/),
  measuredMicros: z.number().int().nonnegative(),
  unknownMaxMicros: z.number().int().nonnegative(),
});
export type TurnCost = z.infer<typeof TurnCost>;

// ---- admission --------------------------------------------------------------------------------
/** Limits a Run executes under (first cut of the K7 budget; the full ledger is `BudgetLedger`, docs/guarantees.md K7). */
export const RunLimits = z.object({
  maxModelRequests: z.number().int().positive(),
  maxToolCalls: z.number().int().nonnegative(),
  /** ISO-8601 instant after which no new model request or tool call is started. */
  deadlineAt: z.string().datetime(),
  /**
   * Prompt tokens all model requests of the Run may consume, measured or (flagged) estimated (K7).
   * Absent: not limited by tokens (a Run admitted before token limits existed).
   */
  maxInputTokens: z.number().int().positive().optional(),
  /** Completion tokens all model requests of the Run may consume (K7). Absent: not limited by tokens. */
  maxOutputTokens: z.number().int().positive().optional(),
  /**
   * Money all model requests of the Run may cost (K7), integer micro-units of `currency`
   * (1 USD = 1,000,000): measured cost plus the upper bound of every turn whose usage is unknown.
   * Priced with `RUNPLANE_MODEL_PRICES`. Absent: not limited by money.
   */
  maxCost: Money.optional(),
  /**
   * The part of the limits ordinary research cannot spend, kept for one finalization request (K7,
   * K9): with 4 model requests and a reserve of 1, research may use 3. Absent: no reserve.
   */
  finalOutputReserve: z.object({ modelRequests: z.number().int().nonnegative(), outputTokens: z.number().int().nonnegative() }).optional(),
  /**
   * The Run ends when nothing counted as progress (streamed answer text, a new receipt, a valid
   * tool call) happened for this long, seconds; heartbeats and keep-alive chunks do not count (K7).
   * Absent: no such limit.
   */
  noProgressSeconds: z.number().int().positive().optional(),
});
export type RunLimits = z.infer<typeof RunLimits>;

/** What the Run may use; a Run never inherits another Run's grant (CONTRACTS.md "Run"). */
export const RunGrant = z.object({
  tools: z.array(z.enum([...ToolNames, ...TestToolNames, ...ParkingToolNames] as [string, ...string[]])),
  model: z.string().min(1),
});
export type RunGrant = z.infer<typeof RunGrant>;

/**
 * How a Run relates to an earlier one: the one link model for related Runs. `child` (a sub-agent
 * Run spawned by its parent, with a grant carved from the parent's: K7), `continuation` (Continue,
 * K3) and `clarification` (K2) name the parent Run; a Run without a link was admitted from a
 * user's message alone.
 */
export const RunLink = z.object({
  parentRunId: Id,
  relation: z.enum(['child', 'continuation', 'clarification']),
});
export type RunLink = z.infer<typeof RunLink>;

export const RunAdmittedV1 = z.object({
  message: z.object({
    messageId: Id,
    clientMessageId: z.string(),
    content: z.string(),
    /** sha256 hex of the content: the K1 comparison key for a repeated clientMessageId. */
    contentSha256: z.string().regex(/^[0-9a-f]{64}$/),
  }),
  grant: RunGrant,
  limits: RunLimits,
  /** The Run this one is related to (a child's parent); absent for a Run admitted from a user's message. */
  link: RunLink.optional(),
  /**
   * Who owns the Run: the verified bearer token's `sub` of the request that posted the message
   * (never a header the caller chooses); a child Run has its parent's. Only that principal (or an
   * admin) may read, cancel, answer or continue it. Absent when authentication was disabled.
   */
  principal: z.string().min(1).max(200).optional(),
  /**
   * The Runs admitted before this one in its Conversation, oldest first, as admission's durable
   * conversation index saw them (K2): the runtime may read their questions and committed passages
   * as labelled history. Absent or empty: no earlier Run (or a Run admitted before the index).
   */
  conversationHistory: z.object({ runIds: z.array(Id) }).optional(),
  /**
   * For `link.relation === 'clarification'` (K2): the clarification this message answers (the
   * parent's `clarification.requested`), its question and the parent's original request. The
   * message content is the user's chosen answer.
   */
  clarification: z.object({ clarificationId: Id, question: z.string(), originalRequest: z.string() }).optional(),
  /**
   * For `link.relation === 'continuation'` (K3): sha256 hex of the parent's original request as
   * admission read it from the parent's log; the runtime refuses to build context from a parent
   * whose request no longer matches it.
   */
  parentRequestSha256: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .optional(),
});

// ---- runtime ----------------------------------------------------------------------------------
export const ModelTurnRequestedV1 = z.object({
  /** 1-based model turn number within the Run. */
  turn: z.number().int().positive(),
  model: z.string(),
  /**
   * The ledger's reservation for this request (K7): `max_tokens` sent with it (what remains of the
   * research output allowance, or the reserve for the finalization request). Absent: the Run has
   * no output token limit.
   */
  maxTokens: z.number().int().positive().optional(),
  /** Estimated prompt tokens of this request (characters / 4 of what it sends), reserved before it is made (K7). */
  inputTokensEstimate: z.number().int().nonnegative().optional(),
  /** `finalization`: the one last request from existing material, without tools (K9). Absent: research. */
  purpose: z.literal('finalization').optional(),
  /** The earlier turn this request retries (an empty, cut or failed reply), charged as a turn of its own (K7). */
  retryOf: z.number().int().positive().optional(),
  /**
   * The model's configured price and the request's money reservation (K7), when the model has a
   * price (`RUNPLANE_MODEL_PRICES`): `reservedMicros` = `inputTokensEstimate` x input price +
   * `maxTokens` x output price (each rounded up to a whole micro-unit). Absent: unpriced.
   */
  price: TokenPrice.extend({ reservedMicros: z.number().int().nonnegative() }).optional(),
});
export const ProposedToolCall = z.object({
  toolCallId: Id,
  name: z.string(),
  /** The arguments exactly as the model produced them (JSON text; may be malformed). */
  argumentsText: z.string(),
});
export type ProposedToolCall = z.infer<typeof ProposedToolCall>;
/**
 * A value of a model turn recorded cut for its size (K9, K11; limits in `./limits.ts`): what it
 * was (its whole size and digest), what was kept (its first `keptCharacters`) and the limit.
 */
export const SizeCut = z.object({
  /** `content`: the turn's text; `arguments` / `name`: one tool call's arguments or name; `finishReason`: the model's finish reason. */
  field: z.enum(['content', 'arguments', 'name', 'finishReason']),
  /** The tool call whose arguments or name were cut. */
  toolCallId: Id.optional(),
  /** Why: the value is over its size limit (`limitBytes`, or the turn's total for its tool calls). */
  reason: z.enum(['size-limit']),
  /** Size of the whole value as the model produced it, bytes of its JSON (UTF-8). */
  bytes: z.number().int().nonnegative(),
  /** sha256 (hex) of the whole value's UTF-8 text. */
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  /** The recorded value is the whole value's first `keptCharacters` (UTF-16 code units, `string.length`). */
  keptCharacters: z.number().int().nonnegative(),
  /** The limit that was applied, bytes of JSON. */
  limitBytes: z.number().int().nonnegative(),
  /** For a text cut for its number of passages (`TURN_PASSAGES_MAX`): that limit. */
  limitPassages: z.number().int().positive().optional(),
});
export type SizeCut = z.infer<typeof SizeCut>;
export const ModelTurnCompletedV1 = z.object({
  turn: z.number().int().positive(),
  content: z.string(),
  toolCalls: z.array(ProposedToolCall),
  /** As the model reported it: `stop`, `tool_calls`, `length`, `content_filter`... */
  finishReason: z.string(),
  usage: Usage.nullable(),
  /**
   * Values recorded cut for their size (`SizeCut`). A cut text makes the turn no answer (retried
   * within the budget, like a length-cut reply, K9); a call with cut arguments or name is never
   * executed: the model reads `arguments_too_large` as its result. Absent: nothing was cut.
   */
  cut: z.array(SizeCut).optional(),
  /** What the turn cost (`TurnCost`, K7), when its request carried a price. */
  cost: TurnCost.optional(),
});
export const ModelTurnFailedV1 = z.object({
  turn: z.number().int().positive(),
  error: z.object({
    /**
     * `timeout`: the request (headers or streamed body) was cut by the model timeout or the Run's
     * deadline; `not-sent`: the request never left the runtime (the shared limiter's rate-limit
     * pause ends after the deadline, or the deadline passed): the provider received nothing and
     * nothing is charged (K7); `unrecordable`: the reply arrived but the log refused its record for
     * a permanent reason (its size, its schema): the failure is recorded instead, never retried (K9, K11).
     */
    kind: z.enum(['http', 'timeout', 'connection', 'invalid-response', 'not-sent', 'unrecordable']),
    status: z.number().int().nullable(),
    message: z.string(),
    /** The provider's `Retry-After` (a 429 or 503), ms: the shared per-model limiter pauses that long (K7). */
    retryAfterMs: z.number().int().nonnegative().optional(),
    /**
     * A `connection` failure whose connection was refused (`ECONNREFUSED`): the request never
     * reached the provider, so nothing was generated. Still a model request of the Run's budget,
     * charged its input estimate, but no output tokens (K7).
     */
    refused: z.literal(true).optional(),
  }),
  /**
   * The backoff before the Run's next model request, decided with the failure (K7): present on a
   * retryable failure of a research turn (connection, timeout, 429, 5xx). No request of the Run is
   * made before `notBefore`; a retry that would start at or after the deadline is not made (the
   * Run stops `model-error`). Absent on failures recorded before backoff existed: no wait.
   */
  retry: z
    .object({
      /** Failed requests in a row, this one included (the backoff's exponent). */
      failuresInARow: z.number().int().positive(),
      /** The wait chosen: exponential with jitter, capped, at least the provider's `Retry-After`, ms. */
      delayMs: z.number().int().nonnegative(),
      /** The failure's decision clock plus `delayMs`. */
      notBefore: z.string().datetime(),
    })
    .optional(),
  /** What the turn may have cost (`TurnCost`, K7: unknown usage is a range, never 0), when its request carried a price. */
  cost: TurnCost.optional(),
});
export const ToolCallProposedV1 = ProposedToolCall.extend({ turn: z.number().int().positive() });
/**
 * runtime: one finished paragraph of a model turn's text, recorded while the turn still streams
 * (a paragraph is finished once a blank line follows it: `ParagraphStream`), so that text the
 * model produced before a crash, a cancel or a failure is a fact, and publication commits it as a
 * passage at once. Recorded under the lease epoch like every runtime event; at most once per turn
 * and index. The turn's `model.turn.completed` still records the whole text.
 */
export const ModelOutputParagraphV1 = z.object({
  turn: z.number().int().positive(),
  /** 0-based position of the paragraph among the turn's passages (`splitPassages`). */
  index: z.number().int().nonnegative(),
  text: z.string().min(1),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});
/**
 * Durable evidence that a model turn is still streaming answer text inside a paragraph that has not
 * finished yet (no blank line so far), so that a long unbroken reply resets the Run's no-progress
 * clock (K7) like finished paragraphs do. Recorded by the runtime under the lease epoch, at a
 * bounded rate (at most once per `min(5 s, noProgressSeconds / 3)` of streaming, and only when new
 * non-whitespace text arrived since the last evidence), so a short reply records none. Keep-alive
 * chunks (empty deltas) never cause one. Strictly increasing `characters` per turn.
 */
export const ModelOutputProgressV1 = z.object({
  turn: z.number().int().positive(),
  /** How many characters of the turn's text had streamed when it was recorded (UTF-16 code units, as `string.length`). */
  characters: z.number().int().positive(),
  /** sha256 (hex) of the turn's text streamed so far: the first `characters` of the turn's eventual content. */
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});
/** Why the runtime stopped executing. It never settles; the lifecycle does (K9). */
export const ExecutionStopReason = z.enum([
  'answered',
  'empty-output',
  'truncated-output',
  'incomplete-output',
  'model-error',
  'model-request-limit',
  'tool-call-limit',
  'deadline',
  /** The Run's input or output token allowance for research is spent (K7). */
  'token-limit',
  /** Several turns in a row produced neither text nor a valid tool call: no answer was produced (K9). */
  'no-progress',
  /** The model asked the user a clarification question (`ask_clarification`, K2): the question is the answer. */
  'clarification-requested',
  /** The context a continuation needs could not be built honestly (the parent's request does not match its hash, K3). */
  'context-refused',
  /** The Run's grant exceeds the deployment's ceiling (`GrantCeilingConfig`): a forged or corrupt admission, never executed (docs/guarantees.md "Who may do what"). */
  'grant-refused',
]);
export type ExecutionStopReason = z.infer<typeof ExecutionStopReason>;
export const ExecutionFinishedV1 = z.object({
  reason: ExecutionStopReason,
  detail: z.string(),
  /**
   * The model turn whose content is the answer (reason `answered`), or that asked the
   * clarification (reason `clarification-requested`), else null.
   */
  answerTurn: z.number().int().positive().nullable(),
  /**
   * For an answer written in finalization-only (K9): what research left unfinished. Publication adds
   * it to the answer's unanswered list, so the Run settles `partial` even when the model omits it.
   */
  unfinished: z.array(UnansweredPart).optional(),
});

/**
 * runtime: ordinary research can no longer continue (a research allowance is spent) but the
 * final-output reserve remains, so the Run moves ONE WAY into finalization-only (K7, K9): exactly
 * one more model request, without tools, answering the original question from existing material
 * and disclosing `unfinished`. Nothing after it returns to research.
 */
export const FinalizationStartedV1 = z.object({
  /** The research limit that was reached (`deadline`: too little time is left for more research, `RUNPLANE_FINALIZATION_LEAD_SECONDS`). */
  reason: z.enum(['model-request-limit', 'token-limit', 'deadline']),
  detail: z.string(),
  /** What research did not finish; listed as unanswered on the finalization answer. */
  unfinished: z.array(UnansweredPart).min(1),
});

/**
 * runtime: the Run parks on a question for a human (an `ask_human` tool call, K10). The wait is
 * durable: its id is derived from the Run and the tool call, and it expires at `expiresAt`
 * (never later than the Run's deadline). Only its answer (`wait.answered`) wakes the Run.
 */
export const WaitOpenedV1 = z.object({
  waitId: Id,
  toolCallId: Id,
  turn: z.number().int().positive(),
  question: z.string().min(1),
  /** ISO-8601 instant after which the wait can no longer be answered (<= the Run's `deadlineAt`). */
  expiresAt: z.string().datetime(),
});
/**
 * runtime: the Run spawns a child Run (a `spawn_subagent` tool call) and parks until the child
 * settles. The child's grant and limits are carved from what the parent had left (at most half
 * of each, docs/recovery.md); the parent's budget is charged with them whatever the child uses (K7).
 * Admission admits the child (`run.admitted` with `link` relation `child`), once, by `childRunId`.
 */
export const ChildRunRequestedV1 = z.object({
  childRunId: Id,
  /** The child's message id within the parent's conversation (from which `childRunId` derives, K1). */
  clientMessageId: z.string().min(1).max(200),
  toolCallId: Id,
  turn: z.number().int().positive(),
  question: z.string().min(1),
  grant: RunGrant,
  limits: RunLimits,
});

/**
 * runtime: the model asked the user a clarification question (an `ask_clarification` tool call,
 * K2). Unlike a human wait it does not park the Run: the Run ends with the question as its
 * published answer (settled `completed`, the clarification pending). A reply naming
 * `clarificationId` is admitted as a new Run linked to this one (relation `clarification`).
 */
export const ClarificationRequestedV1 = z.object({
  /** Derived from the Run and the tool call (`clarificationIdOf`). */
  clarificationId: Id,
  toolCallId: Id,
  turn: z.number().int().positive(),
  question: z.string().min(1),
});

/** One labelled piece of earlier material carried into a Run's model requests (K2, K3). */
export const CarriedItem = z.object({
  kind: z.enum(['history-question', 'history-passage', 'original-request', 'passage', 'tool-result', 'open-questions', 'unknown-call']),
  /** The earlier Run it comes from. */
  runId: Id,
  /** What it is within that Run: the passage id, the tool call id, `request`, `unanswered`. */
  ref: z.string(),
  /** sha256 hex of the source as read (the passage text, the request, the receipt's result): the audit key. */
  sourceSha256: z.string().regex(/^[0-9a-f]{64}$/),
  /** The text sent to the model, labelled historical. */
  text: z.string(),
});
export type CarriedItem = z.infer<typeof CarriedItem>;

/**
 * runtime: what the Run carries from earlier Runs into its model requests, recorded once before
 * its first model request (K2, K3): a follow-up's conversation history (earlier questions and
 * committed passages), a continuation's parent material (its original request, checked against
 * `parentRequestSha256`; its committed passages; its succeeded tool results that carry
 * provenance and whose tool the new Run is granted, narrowed; its open questions; its `unknown`
 * tool calls, as unknown). Every request is built from this record, never from a fresh read of the
 * earlier Runs, so it is the same after a restart and auditable. The parent's completed tool
 * calls are carried as text, never proposed again; a new proposal of a carried unknown effect
 * (same tool, same arguments: `unknownEffects`) is not dispatched by the tools service.
 */
export const ContextCarriedV1 = z.object({
  /** Earlier Runs read for history (oldest first) and the continuation parent, if any. */
  historyRunIds: z.array(Id),
  parentRunId: Id.nullable(),
  items: z.array(CarriedItem),
  /** Material left out, and why (`not_granted`, `no_provenance`, `not_succeeded`, `budget`). */
  dropped: z.array(z.object({ runId: Id, ref: z.string(), reason: z.string() })),
  /** The parent's unreconciled `unknown` calls: a proposal with the same `effectKey` is not dispatched (K5). */
  unknownEffects: z.array(z.object({ runId: Id, toolCallId: Id, name: z.string(), effectKey: z.string().regex(/^[0-9a-f]{64}$/) })),
  /**
   * The parent's succeeded calls (K3: its completed tools are never re-run). A proposal with the
   * same `effectKey` is not dispatched: when `reusable` (the tool is still granted and its result
   * carries provenance) the tools service answers it with the parent's result (`reusedFrom`),
   * else it is denied (`already_done_in_parent`). Absent on records made before it existed.
   */
  completedCalls: z
    .array(
      z.object({
        runId: Id,
        toolCallId: Id,
        name: z.string(),
        effectKey: z.string().regex(/^[0-9a-f]{64}$/),
        reusable: z.boolean(),
        /** The parent receipt's inline result or its reference, when reusable. */
        result: z.unknown().optional(),
        resultRef: z.lazy(() => ResultRef).optional(),
      }),
    )
    .optional(),
});

// ---- tools ------------------------------------------------------------------------------------
export const ToolCallDispatchedV1 = z.object({ toolCallId: Id, name: z.string() });
/** A large result stored by reference in the results object store, content-addressed. */
export const ResultRef = z.object({
  bucket: z.string(),
  key: z.string(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  bytes: z.number().int().nonnegative(),
});
export type ResultRef = z.infer<typeof ResultRef>;
export const ReceiptStatus = z.enum(['succeeded', 'failed', 'denied', 'unknown']);
export type ReceiptStatus = z.infer<typeof ReceiptStatus>;
export const ToolCallReceiptV1 = z.object({
  toolCallId: Id,
  name: z.string(),
  status: ReceiptStatus,
  /** Inline result (small results only); absent when stored by reference or not succeeded. */
  result: z.unknown().optional(),
  resultRef: ResultRef.optional(),
  error: ToolErrorBody.optional(),
  durationMs: z.number().nonnegative(),
  /** What the tool does to the world (for operators); absent on receipts written before it existed. Never a licence to replay. */
  effect: ToolEffect.optional(),
  /** The continuation parent's call whose result this receipt repeats without executing anything (K3). */
  reusedFrom: z.object({ runId: Id, toolCallId: Id }).optional(),
});

// ---- tool effects (K5): late observations and reconciliations ---------------------------------
/**
 * tools: the real outcome of a call that arrived after the call was recorded `unknown` (a late
 * observation). Never rewrites the receipt, never changes the Run's outcome; the one fact that may
 * still be appended after the Run's settlement.
 */
export const ToolCallLateObservedV1 = z.object({
  toolCallId: Id,
  name: z.string(),
  status: z.enum(['succeeded', 'failed']),
  result: z.unknown().optional(),
  resultRef: ResultRef.optional(),
  error: ToolErrorBody.optional(),
  /** Wall time of the execution, ms. */
  durationMs: z.number().nonnegative(),
  /** The process instance that executed the call. */
  executor: z.string(),
});
export const ReconciledOutcome = z.enum(['succeeded', 'failed', 'not_executed']);
export type ReconciledOutcome = z.infer<typeof ReconciledOutcome>;
/**
 * admission: an operator's reconciliation of an `unknown` call (over HTTP): what was found at the
 * destination, the evidence, who and when. Dispatches nothing; never rewrites the receipt.
 */
export const ToolCallReconciledV1 = z.object({
  toolCallId: Id,
  name: z.string(),
  outcome: ReconciledOutcome,
  evidence: z.string().min(1).max(4000),
  /** The operator who reconciled (as the request named them). */
  operator: z.string().min(1).max(200),
  /** Id of the HTTP request. */
  requestId: z.string(),
});

// ---- publication ------------------------------------------------------------------------------
export const PassageCommittedV1 = z.object({
  passageId: Id,
  /** 0-based position of the passage among the passages of its source turn (for the answer turn: in the answer). */
  index: z.number().int().nonnegative(),
  /** 1 for the first commit of a passage; a revision commits version + 1. */
  version: z.number().int().positive(),
  text: z.string().min(1),
  sourceTurn: z.number().int().positive(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});
export const AnswerPublishedV1 = z.object({
  passageIds: z.array(Id),
  /**
   * The sum of the passages' lengths (UTF-16 code units): the answer turn's text less the blank lines
   * between its paragraphs and its `runplane-unanswered` block, so fewer than the turn's own count.
   */
  characters: z.number().int().nonnegative(),
  sourceTurn: z.number().int().positive(),
  /**
   * The parts of the question the answer says it left unanswered (its `runplane-unanswered` block,
   * which is kept out of the passages), [] when it lists none or has no block (K9). Absent on
   * answers published before it existed (read as []).
   */
  unanswered: z.array(UnansweredPart).optional(),
});

// ---- admission: the user's cancel intent (K4) ------------------------------------------------
/**
 * A user asked to cancel the Run (`POST /v1/runs/{runId}/cancel`). Nothing new is started after
 * it is recorded; recovery fences the execution and the lifecycle settles the Run `canceled`,
 * keeping what was published. A dropped observer connection is never a cancel (K4).
 */
export const RunCancelRequestedV1 = z.object({
  /** Who asked: the verified token's `sub`; with authentication disabled, the `X-Runplane-User` header, when given. */
  requestedBy: z.string().max(200).nullable(),
  /** The user's reason, when given. */
  reason: z.string().max(2_000).nullable(),
});

// ---- admission: a human's answer to a wait (K10) ----------------------------------------------
/** A user answered a pending wait (`POST /v1/runs/{runId}/waits/{waitId}`): the Run's one wake for it. */
export const WaitAnsweredV1 = z.object({
  waitId: Id,
  toolCallId: Id,
  answer: z.string().min(1).max(20_000),
  /** Who answered: the verified token's `sub`; with authentication disabled, the `X-Runplane-User` header, when given. */
  answeredBy: z.string().max(200).nullable(),
  /** Id of the HTTP request. */
  requestId: z.string(),
});

// ---- recovery ---------------------------------------------------------------------------------
/** Who held a Run's execution lease: the writer of the runtime's events under it. */
export const LeaseHolder = z.object({ service: z.string(), instance: z.string() });
/**
 * A runtime instance took a Run's execution lease (K6). Recorded by that runtime itself, on the
 * runtime subject, in the same decision as its first event under the lease (so it costs no extra
 * append and no round trip through recovery). Older logs hold it as recovery wrote it, on the
 * recovery subject (owner `recovery`, observed in the lease bucket): those still fold and verify.
 */
export const LeaseGrantedV1 = z.object({
  /** Fencing epoch: grows with every grant of the Run; the runtime's events carry it as `writer.epoch`. */
  epoch: z.number().int().positive(),
  holder: LeaseHolder,
  /** How long the lease lives without a renewal, ms. */
  ttlMs: z.number().int().positive(),
});
/**
 * Why recovery fenced a Run's execution: its lease expired, its runtime stopped with it
 * unfinished, the user canceled it, its deadline passed while nobody stopped it (`deadline`), or
 * it was parked on a question nobody answered before the wait expired (`wait-expired`), nothing
 * counted as progress happened for its `noProgressSeconds` (`no-progress`, K7); or,
 * `settling`, the execution finished on its own and the executors' subjects are closed before the
 * lifecycle settles the Run (a settlement never leaves them open to a stale append).
 */
export const FenceReason = z.enum(['lease-expired', 'runtime-stopped', 'canceled', 'deadline', 'settling', 'wait-expired', 'no-progress']);
export type FenceReason = z.infer<typeof FenceReason>;
/** What was in flight when the execution was fenced: its outcome is unknown (K5, K10). */
export const UncertainStep = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('model-turn'), turn: z.number().int().positive() }),
  z.object({ kind: z.literal('tool-call'), toolCallId: Id, name: z.string() }),
]);
export type UncertainStep = z.infer<typeof UncertainStep>;
/**
 * Recovery fenced the Run's execution: written on each executor's own subject (`runtime`,
 * `tools`: `fencedSubject`), so that every later conditional append of a stale holder there
 * fails at the log, whatever it believes (K6); the lifecycle then settles the Run `interrupted`
 * (K10), `canceled` (reason `canceled`) or `failed` (reason `deadline`: the Run's deadline passed;
 * `wait-expired`; `no-progress`: nothing counted as progress for its `noProgressSeconds`, K7
 * while nobody executed it to its end). A crashed or frozen execution is never resumed in place.
 * With reason `settling` it closes the subjects of an execution that finished on its own: every
 * settlement comes after a fence on both executor subjects, so an executor append decided before
 * it is refused by the log; only a late observation (`tool.call.late_observed`) follows one.
 */
export const RunFencedV1 = z.object({
  /** The subject this marker stands on: the executor it fences. */
  fencedSubject: z.enum(['runtime', 'tools']),
  /** The epoch of the lease that ended (0: no lease was ever held, e.g. a Run canceled before it started). */
  epoch: z.number().int().nonnegative(),
  /** The lease's holder, or null when no lease was held. */
  holder: LeaseHolder.nullable(),
  reason: FenceReason,
  /** Human-readable detail: when the lease expired, which instance stopped, when the deadline passed. */
  detail: z.string(),
  uncertain: z.array(UncertainStep),
});

/**
 * Recovery released a PARKED Run's lease on behalf of its holder, which was lost (its lease expired,
 * or its runtime stopped) after the Run parked and before the holder released the lease `parked`
 * itself (K10). The log showed the Run parked at its last model turn (`wait.opened` or
 * `child.run.requested` of that turn, no later turn): nothing executed since, so nothing is lost and
 * nothing is fenced; the Run stays parked, and its wake, recorded already (`woken`) or to come,
 * takes the lease at `epoch + 1`. Written on the runtime's subject before the lease is marked
 * parked, so that every later conditional append of the lost holder (epoch `epoch`) that was
 * decided before it is refused by the log, and a holder that reads it stops writing (K6).
 */
export const LeaseParkedV1 = z.object({
  /** The epoch of the lost holder's lease: closed by this marker. */
  epoch: z.number().int().positive(),
  holder: LeaseHolder,
  /** How the holder was lost. */
  reason: z.enum(['lease-expired', 'runtime-stopped']),
  /** Human-readable detail: when the lease expired, which instance stopped. */
  detail: z.string(),
  /** What the Run is parked on. */
  on: z.enum(['awaiting_human', 'awaiting_child']),
  /** True when the wake (`wait.answered`, `child.run.settled`) was already recorded: the next runtime woken takes the lease at once. */
  woken: z.boolean(),
});

/**
 * The runtime replica holding the Run's lease hands the Run over at a safe point while it drains
 * (SIGTERM, a rollout): no model request of its own in flight (a request in flight was finished and
 * its turn recorded first). Appended by the holder itself, conditionally, under its own lease epoch
 * (K6), like a park: it closes that epoch in the log (the holder writes nothing more under it) and
 * it is the wake another runtime replica takes the Run with, at `epoch + 1` (K10: an accepted wake,
 * never a resume guessed from a stored Run). The lease is then released `handover`, which recovery
 * does not fence. A handed-over Run that nobody takes is caught by its no-progress and deadline rules.
 */
export const RunHandedOverV1 = z.object({
  /** The epoch of the holder's lease: closed by this record; the next holder takes `epoch + 1`. */
  epoch: z.number().int().positive(),
  /** The replica that held the lease and hands the Run over. */
  holder: LeaseHolder,
  /** Why: `drain` (the replica is stopping and finished what it had in flight). */
  reason: z.enum(['drain']),
  /** Tool calls proposed and still without a receipt at the handover (they go on: the tools service owns them). */
  pendingToolCalls: z.number().int().nonnegative(),
});

// ---- lifecycle --------------------------------------------------------------------------------
export const Outcome = z.enum(['completed', 'partial', 'failed', 'canceled', 'interrupted']);
export type Outcome = z.infer<typeof Outcome>;
export const RunSettledV1 = z.object({
  outcome: Outcome,
  reason: z.string(),
  passageIds: z.array(Id),
  receipts: z.array(z.object({ toolCallId: Id, name: z.string(), status: ReceiptStatus })),
  usage: z.object({
    modelRequests: z.number().int().nonnegative(),
    toolCalls: z.number().int().nonnegative(),
    /** Tokens MEASURED: the sum over the turns whose usage the model reported (a lower bound when `unknownUsageTurns` > 0). */
    promptTokens: z.number().int().nonnegative(),
    completionTokens: z.number().int().nonnegative(),
    /**
     * Model requests whose token usage is unknown (no usage chunk, a failed or cut request, a
     * dead process): they are not counted as 0 tokens measured. Absent on settlements written
     * before it existed (their token sums counted such turns as 0).
     */
    unknownUsageTurns: z.number().int().nonnegative().optional(),
  }),
  /**
   * What the Run did not answer (K9): the answer's own unanswered list, or for a Run that failed
   * after committing text, the rest of the answer and why. Not empty exactly when the outcome is
   * `partial`; absent on settlements written before it existed.
   */
  unanswered: z.array(UnansweredPart).optional(),
  /**
   * The child Runs (K10) still running when this Run settled, from the lifecycle's fold of the
   * whole Run: admission cancels each of them, since nothing would read their result, without
   * reading the parent's log. Absent on settlements written before it existed (a reader then
   * reads the Run to find them).
   */
  pendingChildRunIds: z.array(Id).optional(),
});

/**
 * lifecycle: a child Run settled; recorded on its PARENT's stream (the lifecycle subject), once
 * per child, with the child's outcome and its published answer text. This is the parent's wake
 * (K10): the runtime continues the parent with it as the result of the `spawn_subagent` call.
 */
export const ChildRunSettledV1 = z.object({
  childRunId: Id,
  toolCallId: Id,
  outcome: Outcome,
  reason: z.string(),
  /** The child's committed passages joined by blank lines ('' when it published none); cut at `CHILD_ANSWER_MAX_BYTES` (see `answerCut`). */
  answer: z.string(),
  /** Present when `answer` is the first part of a longer answer, cut for its size: the whole answer's size and digest. */
  answerCut: z.lazy(() => SizeCut.omit({ field: true, toolCallId: true })).optional(),
});

/** Registry: event type -> owner, schema version, data schema. The single source of the catalogue. */
export const EventCatalog = {
  'run.admitted': { owner: 'admission', version: 1, data: RunAdmittedV1 },
  'model.turn.requested': { owner: 'runtime', version: 1, data: ModelTurnRequestedV1 },
  'model.turn.completed': { owner: 'runtime', version: 1, data: ModelTurnCompletedV1 },
  'model.turn.failed': { owner: 'runtime', version: 1, data: ModelTurnFailedV1 },
  'tool.call.proposed': { owner: 'runtime', version: 1, data: ToolCallProposedV1 },
  'model.output.paragraph': { owner: 'runtime', version: 1, data: ModelOutputParagraphV1 },
  'model.output.progress': { owner: 'runtime', version: 1, data: ModelOutputProgressV1 },
  'run.execution.finished': { owner: 'runtime', version: 1, data: ExecutionFinishedV1 },
  'run.finalization.started': { owner: 'runtime', version: 1, data: FinalizationStartedV1 },
  'tool.call.dispatched': { owner: 'tools', version: 1, data: ToolCallDispatchedV1 },
  'tool.call.receipt': { owner: 'tools', version: 1, data: ToolCallReceiptV1 },
  'passage.committed': { owner: 'publication', version: 1, data: PassageCommittedV1 },
  'answer.published': { owner: 'publication', version: 1, data: AnswerPublishedV1 },
  'run.settled': { owner: 'lifecycle', version: 1, data: RunSettledV1 },
  'run.cancel.requested': { owner: 'admission', version: 1, data: RunCancelRequestedV1 },
  // the runtime records its own grant with its first event under the lease; logs written before hold recovery's (formerOwners)
  'lease.granted': { owner: 'runtime', formerOwners: ['recovery'], version: 1, data: LeaseGrantedV1 },
  'run.fenced': { owner: 'recovery', version: 1, data: RunFencedV1 },
  'lease.parked': { owner: 'recovery', version: 1, data: LeaseParkedV1 },
  // drain (a rollout keeps Runs running)
  'run.handed_over': { owner: 'runtime', version: 1, data: RunHandedOverV1 },
  // tool effects (K5)
  'tool.call.late_observed': { owner: 'tools', version: 1, data: ToolCallLateObservedV1 },
  'tool.call.reconciled': { owner: 'admission', version: 1, data: ToolCallReconciledV1 },
  // waits and child Runs (K10)
  'wait.opened': { owner: 'runtime', version: 1, data: WaitOpenedV1 },
  'wait.answered': { owner: 'admission', version: 1, data: WaitAnsweredV1 },
  'child.run.requested': { owner: 'runtime', version: 1, data: ChildRunRequestedV1 },
  'child.run.settled': { owner: 'lifecycle', version: 1, data: ChildRunSettledV1 },
  // conversations (K2)
  'clarification.requested': { owner: 'runtime', version: 1, data: ClarificationRequestedV1 },
  'context.carried': { owner: 'runtime', version: 1, data: ContextCarriedV1 },
} as const satisfies Record<string, CatalogEntry>;

/**
 * One type of the catalogue: the one service that may record it now (`owner`: broker permissions
 * and deciders follow it), its schema version and data schema, and `formerOwners`: owners that
 * recorded it in logs written before ownership moved. Such old events are still read (decoded,
 * folded, verified on their former owner's subject: an auditor replays old streams, K11); nobody
 * may append them any more.
 */
export interface CatalogEntry {
  owner: Owner;
  formerOwners?: readonly Owner[];
  version: number;
  data: z.ZodType;
}

/** Owners an event of type `T` may carry when read back: its owner, and any former owner (older logs). */
export type OwnersOf<T extends EventType> =
  (typeof EventCatalog)[T]['owner'] | ((typeof EventCatalog)[T] extends { formerOwners: readonly (infer O)[] } ? O : never);

/** {@link OwnersOf} at run time. */
export function ownersOfType(type: EventType): readonly Owner[] {
  const entry: CatalogEntry = EventCatalog[type];
  return [entry.owner, ...(entry.formerOwners ?? [])];
}

export type EventType = keyof typeof EventCatalog;
export const EventTypes = Object.keys(EventCatalog) as EventType[];
export type EventData<T extends EventType> = z.infer<(typeof EventCatalog)[T]['data']>;

/** The writer of an event: which service, which process instance (random per process start). */
export const Writer = z.object({
  service: z.string().min(1).max(64),
  instance: z.string().min(1).max(64),
  /** Fencing epoch of the lease the event was written under (K6); absent while leases do not exist. */
  epoch: z.number().int().nonnegative().optional(),
});
export type Writer = z.infer<typeof Writer>;

/** Envelope fields shared by every event. */
export const EnvelopeFields = z.object({
  /** Deterministic UUID (see `eventId()`); also the `Nats-Msg-Id` used for de-duplication. */
  eventId: z.string().uuid(),
  runId: Id,
  conversationId: Id,
  schemaVersion: z.number().int().positive(),
  owner: Owner,
  /** ISO-8601 UTC instant the owner recorded the fact. */
  occurredAt: z.string().datetime(),
  /** The event (or HTTP request) that caused this one; null for none. */
  causationId: z.string().nullable(),
  /** Correlates every event of one admitted Message: the Run's admitting messageId. */
  correlationId: z.string(),
  /**
   * Stream sequence of the previous event on this event's subject, as the conditional append
   * expected it (0 = the first on its subject). The server refuses an append whose expectation is
   * wrong, so every subject is a verified back-linked chain: a Run is read by following these
   * links from each subject's last event (docs/event-log.md). Stamped by `EventLog.append`;
   * absent only in events written before it existed.
   */
  prevSeq: z.number().int().nonnegative().optional(),
  /**
   * Sequences of earlier events on the same subject, before `prevSeq`, newest first (at most
   * 31): read-ahead hints that let a reader fetch a subject's events in parallel. Hints only:
   * a reader accepts them when the fetched events' own `prevSeq` links agree.
   */
  earlierSeqs: z.array(z.number().int().positive()).max(31).optional(),
  /**
   * For an event stored by an atomic batch (`EventLog.appendBatch`, one decision's events) after
   * an earlier event of the same batch on the same subject: the batch position
   * (`Nats-Batch-Sequence`, 1-based) of that predecessor. The server refuses a subject expectation
   * on a later message of a batch's subject and stores a batch contiguously, so the back-link is
   * relative: a reader resolves `prevSeq` = own sequence - (own batch position - `prevInBatch`)
   * (libs/eventlog `verifyStored`, docs/event-log.md "One decision, one atomic append"). Such an
   * event carries no `prevSeq` in its body; every reader sees the resolved one.
   */
  prevInBatch: z.number().int().positive().optional(),
  /** Who appended the event: service, process instance and (with leases, K6) fencing epoch. Stamped by `EventLog.append`. */
  writer: Writer.optional(),
});

function envelopeOf<T extends EventType>(type: T) {
  const entry = EventCatalog[type];
  const owners = ownersOfType(type);
  return EnvelopeFields.extend({
    type: z.literal(type),
    // an event of a former owner is read (older logs); makeEvent stamps the current owner
    owner: owners.length > 1 ? z.enum(owners as [Owner, ...Owner[]]) : z.literal(entry.owner),
    schemaVersion: z.literal(entry.version),
    data: entry.data,
  });
}

const envelopes = EventTypes.map((t) => envelopeOf(t));
/**
 * The schema of one event type: the envelope with its `type`, `owner`, `schemaVersion` and `data`
 * (one member of {@link RunEvent}); the JSON Schema contract is generated from these (event-schema.ts).
 */
export const EventSchemas = Object.fromEntries(EventTypes.map((t, i) => [t, envelopes[i]!])) as Record<EventType, ReturnType<typeof envelopeOf>>;
/** Any Runplane event, discriminated by `type`. Parsing rejects an owner that is not the type's owner (or one of its former owners, for older logs). */
export const RunEvent = z.discriminatedUnion('type', envelopes as unknown as [ReturnType<typeof envelopeOf>, ...ReturnType<typeof envelopeOf>[]]);
export type RunEventOf<T extends EventType> = z.infer<typeof EnvelopeFields> & {
  type: T;
  owner: OwnersOf<T>;
  schemaVersion: (typeof EventCatalog)[T]['version'];
  data: EventData<T>;
};
export type RunEvent = { [T in EventType]: RunEventOf<T> }[EventType];

/**
 * The subject token an event is stored under: its owner's (the owner it carries: an event of a
 * former owner, read from an older log, stands on that owner's subject), except for recovery's fence, which
 * stands on the subject of the executor it fences (`<prefix>.run.<runId>.<fencedSubject>`), and
 * recovery's `lease.parked`, which closes a lost runtime holder's epoch on the runtime subject (K6).
 */
export function subjectTokenOf(event: RunEvent): Owner {
  if (event.type === 'lease.parked') return 'runtime';
  return event.type === 'run.fenced' ? event.data.fencedSubject : event.owner;
}

/**
 * Every subject token an event of `type` may stand on: its owner's, except `run.fenced`, which
 * stands on each executor's subject it fences, and `lease.parked`, on the runtime's (K6). The broker's publish permissions are derived
 * from this (libs/eventlog bus.ts): a new event type gets its owner's permission automatically.
 */
export function subjectTokensOfType(type: EventType): readonly Owner[] {
  if (type === 'lease.parked') return ['runtime'];
  return type === 'run.fenced' ? RunFencedV1.shape.fencedSubject.options : [EventCatalog[type].owner];
}

/**
 * The envelope of any event, of a type in this catalogue or newer: the envelope fields, a `type`
 * and a `data` object. What a consumer validates an event type it does not know against
 * (`$defs.Envelope` of the contract document, docs/contract/README.md).
 */
export const AnyEventEnvelope = EnvelopeFields.extend({ type: z.string().min(1), data: z.record(z.string(), z.unknown()) });

/** An event as read back from the log, with its stream position. */
export interface StoredEvent<E extends RunEvent = RunEvent> {
  /** JetStream stream sequence: a total order over all Runs, increasing within a Run. */
  seq: number;
  subject: string;
  event: E;
  /**
   * Set only for a reader that takes events newer than its catalogue (a downstream consumer,
   * docs/contract/README.md): `type`, an event type this catalogue does not have (its envelope
   * valid; `event` is then not one of {@link RunEvent}'s types); `value`, a known type with enum
   * values this catalogue does not have, at `paths` (`data.outcome`), passed as stored.
   */
  newer?: { kind: 'type' } | { kind: 'value'; paths: string[] };
}
