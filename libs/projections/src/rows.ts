/**
 * Row shapes of the projection tables, as plain values (times are ISO-8601 UTC strings taken
 * from event `occurredAt`, never from a clock). The pure view rules in `evolve.ts` map
 * `(row, storedEvent) -> row` over these shapes; `entities.ts` maps them to MikroORM entities.
 * Every column derives from events only, so a rebuild from the log reproduces them exactly (K11).
 */
import type { Outcome, ReceiptStatus, ReconciledOutcome } from '@runplane/contracts';

/**
 * A Run's coarse status; it only ever moves forward (see `RUN_STATUS_ORDER`), except that a
 * parked Run (`awaiting_human`, `awaiting_child`, K10) returns to `running` on its wake.
 */
export type RunStatus = 'admitted' | 'running' | 'awaiting_human' | 'awaiting_child' | 'finishing' | 'settled';
export const RUN_STATUS_ORDER: readonly RunStatus[] = ['admitted', 'running', 'awaiting_human', 'awaiting_child', 'finishing', 'settled'];

/** Table `runs`, one row per admitted Run. `lastSeq` is the Run's projection checkpoint (K11). */
export interface RunRow {
  runId: string;
  conversationId: string;
  messageId: string;
  clientMessageId: string;
  /** The admitted message content, verbatim. */
  question: string;
  status: RunStatus;
  outcome: Outcome | null;
  reason: string | null;
  /** Model requests made (the first `model.turn.requested` of each turn; a request never sent, `not-sent`, is none): the ledger's count (K7). */
  modelRequests: number;
  /** Tokens measured: summed over the model turns that reported usage. */
  promptTokens: number;
  completionTokens: number;
  /** Model requests whose usage is unknown (not reported, failed, cut, in flight): not counted as 0 tokens (K9). */
  unknownUsageTurns: number;
  /** Number of distinct proposed tool calls dispatched (`tool.call.dispatched`), as on the ledger and in settlement usage. */
  toolCalls: number;
  /** Number of distinct passages committed (revisions do not count again). */
  passages: number;
  admittedAt: string;
  settledAt: string | null;
  // ---- budget limits of the grant (K7), from `run.admitted`; null on rows projected before they existed ----
  /** Model requests the Run may make, the final reserve included. */
  maxModelRequests: number | null;
  /** Tool calls the Run may dispatch. */
  maxToolCalls: number | null;
  /** Prompt / completion tokens the Run may consume; null: not limited by tokens. */
  maxInputTokens: number | null;
  maxOutputTokens: number | null;
  /** The money limit, micro-units of `costCurrency` (K7); null: not limited by money. */
  maxCostMicros: number | null;
  /** The currency of the money limit, else of the first priced turn; null while nothing is priced. */
  costCurrency: string | null;
  /** Cost measured from reported usage, micro-units: summed `cost.measuredMicros` of the turns' outcomes (K7). */
  costMicros: number;
  /** Upper bound of the cost of turns whose usage is unknown, in flight included, micro-units (K7: never 0). */
  costUnknownMaxMicros: number;
  /**
   * The reservation of the latest turn requested while it is in flight (its `price.reservedMicros`), counted in
   * `costUnknownMaxMicros` until its outcome replaces it (libs/run-facts `chargeUsage`); 0 when none. An earlier turn
   * that never ended keeps its whole reservation there, as on the ledger.
   */
  costInFlightMicros: number;
  /** The final-output reserve ordinary research cannot spend (K7, K9); null: no reserve. */
  reserveModelRequests: number | null;
  reserveOutputTokens: number | null;
  /** The no-progress limit, seconds (K7); null: none. */
  noProgressSeconds: number | null;
  /** The Run's overall deadline (ISO-8601). */
  deadlineAt: string | null;
  // ---- clocks (K7), every one from event times ----
  /** When execution started: the first model request or lease grant, whichever was recorded first; null while queued. */
  startedAt: string | null;
  /** Queue time: admission to `startedAt`, ms; null while queued. */
  queuedMs: number | null;
  /** When execution ended: `run.execution.finished` or the first fence, whichever came first; null while executing. */
  executionEndedAt: string | null;
  /** Execution time: `startedAt` to `executionEndedAt`, ms (parked time included); null until both are known. */
  executingMs: number | null;
  /** The last fact counted as progress (admission, answer text, a turn with text, a valid tool call, a receipt, a wake: run-facts `countsAsProgress`). */
  lastProgressAt: string | null;
  /** The clarification the Run asked the user (`clarification.requested`, K2): pending until a reply Run names it; null when none. */
  clarificationId: string | null;
  /** Who submitted the Run's message: the verified token's `sub` on `run.admitted` (a child Run: its parent's); null with authentication disabled. */
  principal: string | null;
  /** Stream sequence of the last event of this Run applied to the projections. */
  lastSeq: number;
}

/** Table `messages`, one row per admitted message. */
export interface MessageRow {
  messageId: string;
  conversationId: string;
  clientMessageId: string;
  content: string;
  contentSha256: string;
  runId: string;
  admittedAt: string;
  lastSeq: number;
}

/** Table `passages`, the latest committed version of each answer passage; key (runId, passageId). */
export interface PassageRow {
  runId: string;
  passageId: string;
  /** 0-based position in the answer. */
  index: number;
  version: number;
  text: string;
  sha256: string;
  committedAt: string;
  lastSeq: number;
}

export type ToolCallStatus = 'proposed' | 'dispatched' | ReceiptStatus;

/** Table `tool_calls`, one row per tool call of a Run; key (runId, toolCallId). */
export interface ToolCallRow {
  runId: string;
  toolCallId: string;
  /** Model turn that proposed the call; null only if a dispatch/receipt arrived without a proposal. */
  turn: number | null;
  name: string;
  /** Arguments exactly as the model produced them; null as for `turn`. */
  argumentsText: string | null;
  status: ToolCallStatus;
  errorCode: string | null;
  errorMessage: string | null;
  /** sha256 of the stored result (`resultRef.sha256`), or of the inline result's JSON text. */
  resultSha256: string | null;
  proposedAt: string | null;
  /** When the tools service dispatched it (`tool.call.dispatched`); with `proposedAt` and `receiptAt`, the step's clocks. */
  dispatchedAt: string | null;
  receiptAt: string | null;
  /** The real outcome of an `unknown` call that arrived late (`tool.call.late_observed`); never rewrites `status` (K5). */
  lateStatus: 'succeeded' | 'failed' | null;
  lateObservedAt: string | null;
  /** An operator's reconciliation of an `unknown` call (`tool.call.reconciled`): what was found, by whom, when; never rewrites `status`. */
  reconciledOutcome: ReconciledOutcome | null;
  reconciledBy: string | null;
  reconciledAt: string | null;
  lastSeq: number;
}

/**
 * Table `model_turns`, one row per model turn of a Run; key (runId, turn). The step's clocks (K7):
 * requested -> first streamed text -> completed or failed, and its usage, null when unknown (no
 * usage reported, failed, in flight: never 0 tokens, K9).
 */
export interface ModelTurnRow {
  runId: string;
  turn: number;
  status: 'requested' | 'completed' | 'failed';
  requestedAt: string | null;
  /** When its first streamed text was recorded (`model.output.paragraph`, or `model.output.progress` inside an unfinished paragraph), or null. */
  firstTextAt: string | null;
  /** When it completed or failed, or null while in flight (or never recorded). */
  endedAt: string | null;
  /** `requestedAt` to `endedAt`, ms. */
  durationMs: number | null;
  finishReason: string | null;
  contentChars: number | null;
  toolCalls: number | null;
  promptTokens: number | null;
  completionTokens: number | null;
  /** For a failed turn: `http`, `timeout`, `connection`, `invalid-response`, `not-sent`, `unrecordable`. */
  errorKind: string | null;
  lastSeq: number;
}
