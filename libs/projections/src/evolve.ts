/**
 * The view rules: small pure functions `evolve(row, storedEvent) -> row`, one per table. They
 * read nothing but their arguments (times come from `occurredAt`, counters from the rows), so
 * applying a Run's events in stream order always yields the same rows: the basis of the
 * rebuild-equals-live guarantee (K11). Redelivery is not handled here but by the adapter's
 * checkpoint (`apply.ts`): these rules assume each event is applied once, in order.
 */
import { sha256Hex, type StoredEvent } from '@runplane/contracts';
import { chargeUsage, countsAsProgress, inFlightCharge, NO_USAGE, outcomeChargeOf, turnChargeOf, type TurnCharge } from '@runplane/run-facts';
import { RUN_STATUS_ORDER, type MessageRow, type ModelTurnRow, type PassageRow, type RunRow, type RunStatus, type ToolCallRow } from './rows.js';

/** The rows (other than the Run's) that one event touches, by key. */
export interface TouchedKeys {
  messageId?: string;
  passageId?: string;
  toolCallId?: string;
  /** The model turn (table `model_turns`). */
  turn?: number;
}

/** Which message, passage, tool call or model turn row an event affects (the Run row is affected by every event). */
export function touchedKeys(stored: StoredEvent): TouchedKeys {
  const e = stored.event;
  switch (e.type) {
    case 'run.admitted':
      return { messageId: e.data.message.messageId };
    case 'tool.call.proposed':
    case 'tool.call.dispatched':
    case 'tool.call.receipt':
    case 'tool.call.late_observed':
    case 'tool.call.reconciled':
      return { toolCallId: e.data.toolCallId };
    case 'passage.committed':
      return { passageId: e.data.passageId };
    case 'model.turn.requested':
    case 'model.turn.completed':
    case 'model.turn.failed':
    case 'model.output.paragraph':
    case 'model.output.progress':
      return { turn: e.data.turn };
    default:
      return {};
  }
}

/** `a` or `b`, whichever is later in the Run's lifecycle: status never moves backwards. */
export function laterStatus(a: RunStatus, b: RunStatus): RunStatus {
  return RUN_STATUS_ORDER.indexOf(b) > RUN_STATUS_ORDER.indexOf(a) ? b : a;
}

/**
 * What the other tables looked like before the event, for the Run's distinct counters:
 * `toolCalls` counts a tool call the first time it is dispatched, `passages` a passage the
 * first time it is committed.
 */
export interface RunContext {
  toolCallBefore?: ToolCallRow | null;
  passageBefore?: PassageRow | null;
  /**
   * The model turn's row before a `model.turn.*` event (null: none yet): a turn's first request and
   * first outcome are charged, a repeated one is not (K7). Undefined: not read (every event is the first).
   */
  turnBefore?: ModelTurnRow | null;
}

/**
 * The Run row's usage columns with one turn's ledger charge replaced (K7): `before` (null for a turn
 * new on the ledger) by `after`, with libs/run-facts `chargeUsage`, the step the ledger of the log
 * (`usageTotalsOf`, `budgetOf`) sums. `costInFlightMicros` is the reservation of the turn in flight,
 * the cost part of its charge until its outcome replaces it.
 */
function usageAfter(row: RunRow, before: TurnCharge | null, after: TurnCharge): Partial<RunRow> {
  const totals = chargeUsage({ ...NO_USAGE, ...usageColumns(row) }, before, after);
  return {
    modelRequests: totals.modelRequests,
    promptTokens: totals.promptTokens,
    completionTokens: totals.completionTokens,
    unknownUsageTurns: totals.unknownUsageTurns,
    costMicros: totals.costMicros,
    costUnknownMaxMicros: totals.costUnknownMaxMicros,
    costCurrency: row.costCurrency ?? totals.costCurrency,
  };
}

/** The usage columns of a Run row, as ledger totals (the projections keep no token estimates). */
function usageColumns(
  row: RunRow,
): Pick<
  RunRow,
  'modelRequests' | 'promptTokens' | 'completionTokens' | 'unknownUsageTurns' | 'costMicros' | 'costUnknownMaxMicros' | 'costCurrency'
> {
  const { modelRequests, promptTokens, completionTokens, unknownUsageTurns, costMicros, costUnknownMaxMicros, costCurrency } = row;
  return { modelRequests, promptTokens, completionTokens, unknownUsageTurns, costMicros, costUnknownMaxMicros, costCurrency };
}

/**
 * Run rule. Returns null when there is no Run row yet and the event is not `run.admitted` (an
 * event of a Run whose admission has not been applied: the adapter refuses it). Every applied
 * event advances `lastSeq`.
 */
export function evolveRun(row: RunRow | null, stored: StoredEvent, ctx: RunContext = {}): RunRow | null {
  const e = stored.event;
  if (row === null) {
    if (e.type !== 'run.admitted') return null;
    const m = e.data.message;
    const limits = e.data.limits;
    return {
      runId: e.runId,
      conversationId: e.conversationId,
      messageId: m.messageId,
      clientMessageId: m.clientMessageId,
      question: m.content,
      status: 'admitted',
      outcome: null,
      reason: null,
      modelRequests: 0,
      promptTokens: 0,
      completionTokens: 0,
      unknownUsageTurns: 0,
      toolCalls: 0,
      passages: 0,
      admittedAt: e.occurredAt,
      settledAt: null,
      maxModelRequests: limits.maxModelRequests,
      maxToolCalls: limits.maxToolCalls,
      maxInputTokens: limits.maxInputTokens ?? null,
      maxOutputTokens: limits.maxOutputTokens ?? null,
      reserveModelRequests: limits.finalOutputReserve?.modelRequests ?? null,
      reserveOutputTokens: limits.finalOutputReserve?.outputTokens ?? null,
      maxCostMicros: limits.maxCost?.micros ?? null,
      costCurrency: limits.maxCost?.currency ?? null,
      costMicros: 0,
      costUnknownMaxMicros: 0,
      costInFlightMicros: 0,
      noProgressSeconds: limits.noProgressSeconds ?? null,
      deadlineAt: limits.deadlineAt,
      startedAt: null,
      queuedMs: null,
      executionEndedAt: null,
      executingMs: null,
      lastProgressAt: e.occurredAt,
      clarificationId: null,
      principal: e.data.principal ?? null,
      lastSeq: stored.seq,
    };
  }
  const next: RunRow = { ...row, lastSeq: stored.seq, ...clocksAfter(row, stored) };
  switch (e.type) {
    case 'run.admitted':
      break; // the first admission defines the Run
    case 'model.turn.requested':
      // a turn new on the ledger (K7): a request with unknown usage (K9), its reservation the bound of its cost
      if (!ctx.turnBefore) {
        Object.assign(next, usageAfter(row, null, turnChargeOf(e.data, null, null)));
        next.costInFlightMicros = e.data.price?.reservedMicros ?? 0;
      }
      next.status = laterStatus(row.status, 'running');
      break;
    case 'model.turn.completed':
    case 'model.turn.failed':
      // the first outcome of a requested turn replaces its in-flight charge by the charge its outcome records (K7)
      if (ctx.turnBefore === undefined || ctx.turnBefore?.status === 'requested') {
        Object.assign(next, usageAfter(row, inFlightCharge(row.costInFlightMicros), outcomeChargeOf(e)));
        next.costInFlightMicros = 0;
      }
      next.status = laterStatus(row.status, 'running');
      break;
    case 'tool.call.proposed':
    case 'tool.call.receipt':
      next.status = laterStatus(row.status, 'running');
      break;
    case 'tool.call.dispatched': {
      // the ledger's tool calls (K7): a proposed call's first dispatch (a dispatch of no proposal is none, as in run-facts)
      const before = ctx.toolCallBefore;
      if (before === undefined || before?.status === 'proposed') next.toolCalls = row.toolCalls + 1;
      next.status = laterStatus(row.status, 'running');
      break;
    }
    case 'run.execution.finished':
      next.status = laterStatus(row.status, 'finishing');
      break;
    case 'passage.committed':
      if ((ctx.passageBefore ?? null) === null) next.passages = row.passages + 1;
      break;
    case 'answer.published':
      break;
    // parking and wakes (K10): parked until the wake, then running again
    case 'wait.opened':
      next.status = laterStatus(row.status, 'awaiting_human');
      break;
    case 'child.run.requested':
      next.status = laterStatus(row.status, 'awaiting_child');
      break;
    case 'wait.answered':
    case 'child.run.settled':
      if (row.status === 'awaiting_human' || row.status === 'awaiting_child') next.status = 'running';
      break;
    case 'clarification.requested':
      next.clarificationId ??= e.data.clarificationId;
      break;
    case 'run.settled':
      if (row.status !== 'settled') {
        next.status = 'settled';
        next.outcome = e.data.outcome;
        next.reason = e.data.reason;
        next.settledAt = e.occurredAt;
      } // exactly one settlement per Run (K9): a second one changes nothing but the checkpoint
      break;
  }
  return next;
}

/** Milliseconds from one ISO-8601 instant to another (never negative). */
const msBetween = (from: string, to: string): number => Math.max(0, Date.parse(to) - Date.parse(from));

/**
 * The Run's clocks after an event (K7), from event times only: execution starts at the first
 * model request or lease grant (queue time before it), ends at `run.execution.finished` or the
 * first fence (execution time up to it), and `lastProgressAt` moves with each fact that counts
 * as progress. Time since progress and to the deadline depend on the reader's clock: readers
 * compute them from `lastProgressAt` and `deadlineAt`.
 */
function clocksAfter(row: RunRow, stored: StoredEvent): Partial<RunRow> {
  const e = stored.event;
  const out: Partial<RunRow> = {};
  // the earlier of the two by time, whatever their order in the log (two owners' clocks)
  if (
    (e.type === 'model.turn.requested' || e.type === 'lease.granted') &&
    (row.startedAt === null || Date.parse(e.occurredAt) < Date.parse(row.startedAt))
  ) {
    out.startedAt = e.occurredAt;
    out.queuedMs = msBetween(row.admittedAt, e.occurredAt);
  }
  if (row.executionEndedAt === null && (e.type === 'run.execution.finished' || e.type === 'run.fenced')) {
    out.executionEndedAt = e.occurredAt;
    const started = out.startedAt ?? row.startedAt;
    out.executingMs = started === null ? null : msBetween(started, e.occurredAt);
  }
  if (countsAsProgress(e) && (row.lastProgressAt === null || Date.parse(e.occurredAt) > Date.parse(row.lastProgressAt))) {
    out.lastProgressAt = e.occurredAt;
  }
  return out;
}

/** Message rule: `run.admitted` creates the message row; the first admission wins. */
export function evolveMessage(row: MessageRow | null, stored: StoredEvent): MessageRow | null {
  const e = stored.event;
  if (e.type !== 'run.admitted' || row !== null) return row;
  const m = e.data.message;
  return {
    messageId: m.messageId,
    conversationId: e.conversationId,
    clientMessageId: m.clientMessageId,
    content: m.content,
    contentSha256: m.contentSha256,
    runId: e.runId,
    admittedAt: e.occurredAt,
    lastSeq: stored.seq,
  };
}

/** Passage rule: keeps the highest committed version of each passage (a revision replaces it). */
export function evolvePassage(row: PassageRow | null, stored: StoredEvent): PassageRow | null {
  const e = stored.event;
  if (e.type !== 'passage.committed') return row;
  if (row !== null && e.data.version <= row.version) return row;
  return {
    runId: e.runId,
    passageId: e.data.passageId,
    index: e.data.index,
    version: e.data.version,
    text: e.data.text,
    sha256: e.data.sha256,
    committedAt: e.occurredAt,
    lastSeq: stored.seq,
  };
}

/**
 * Tool call rule: proposed -> dispatched -> receipt status (K5); a dispatch never moves a call
 * backwards. A late observation and an operator's reconciliation of an `unknown` call are kept
 * beside the receipt (`lateStatus`, `reconciledOutcome`, by whom, when), never written over it.
 */
export function evolveToolCall(row: ToolCallRow | null, stored: StoredEvent): ToolCallRow | null {
  const e = stored.event;
  const base = (toolCallId: string, name: string): ToolCallRow =>
    row ?? {
      runId: e.runId,
      toolCallId,
      turn: null,
      name,
      argumentsText: null,
      status: 'proposed',
      errorCode: null,
      errorMessage: null,
      resultSha256: null,
      proposedAt: null,
      dispatchedAt: null,
      receiptAt: null,
      lateStatus: null,
      lateObservedAt: null,
      reconciledOutcome: null,
      reconciledBy: null,
      reconciledAt: null,
      lastSeq: stored.seq,
    };
  switch (e.type) {
    case 'tool.call.proposed': {
      const current = base(e.data.toolCallId, e.data.name);
      return {
        ...current,
        turn: current.turn ?? e.data.turn,
        argumentsText: current.argumentsText ?? e.data.argumentsText,
        proposedAt: current.proposedAt ?? e.occurredAt,
        lastSeq: stored.seq,
      };
    }
    case 'tool.call.dispatched': {
      const current = base(e.data.toolCallId, e.data.name);
      return {
        ...current,
        status: current.status === 'proposed' ? 'dispatched' : current.status,
        dispatchedAt: current.dispatchedAt ?? e.occurredAt,
        lastSeq: stored.seq,
      };
    }
    case 'tool.call.receipt': {
      const current = base(e.data.toolCallId, e.data.name);
      const d = e.data;
      const resultSha256 = d.resultRef?.sha256 ?? (d.result !== undefined ? sha256Hex(JSON.stringify(d.result) ?? 'null') : null);
      return {
        ...current,
        status: d.status,
        errorCode: d.error?.code ?? null,
        errorMessage: d.error?.message ?? null,
        resultSha256,
        receiptAt: e.occurredAt,
        lastSeq: stored.seq,
      };
    }
    case 'tool.call.late_observed': {
      // the first late observation is the one kept; the receipt (`status`) stays as recorded (K5)
      const current = base(e.data.toolCallId, e.data.name);
      if (current.lateStatus !== null) return { ...current, lastSeq: stored.seq };
      return { ...current, lateStatus: e.data.status, lateObservedAt: e.occurredAt, lastSeq: stored.seq };
    }
    case 'tool.call.reconciled': {
      // admission records one reconciliation per call; the receipt (`status`) stays as recorded (K5)
      const current = base(e.data.toolCallId, e.data.name);
      if (current.reconciledOutcome !== null) return { ...current, lastSeq: stored.seq };
      return { ...current, reconciledOutcome: e.data.outcome, reconciledBy: e.data.operator, reconciledAt: e.occurredAt, lastSeq: stored.seq };
    }
    default:
      return row;
  }
}

/**
 * Model turn rule (K7, K9): requested -> first text -> completed or failed, with the step's
 * duration from event times; usage is copied as reported, null when unknown (never 0). The first
 * outcome recorded is kept.
 */
export function evolveModelTurn(row: ModelTurnRow | null, stored: StoredEvent): ModelTurnRow | null {
  const e = stored.event;
  if (
    e.type !== 'model.turn.requested' &&
    e.type !== 'model.turn.completed' &&
    e.type !== 'model.turn.failed' &&
    e.type !== 'model.output.paragraph' &&
    e.type !== 'model.output.progress'
  ) {
    return row;
  }
  const current: ModelTurnRow = row ?? {
    runId: e.runId,
    turn: e.data.turn,
    status: 'requested',
    requestedAt: null,
    firstTextAt: null,
    endedAt: null,
    durationMs: null,
    finishReason: null,
    contentChars: null,
    toolCalls: null,
    promptTokens: null,
    completionTokens: null,
    errorKind: null,
    lastSeq: stored.seq,
  };
  const ended = (at: string): Pick<ModelTurnRow, 'endedAt' | 'durationMs'> => ({
    endedAt: at,
    durationMs: current.requestedAt === null ? null : msBetween(current.requestedAt, at),
  });
  switch (e.type) {
    case 'model.turn.requested':
      return { ...current, requestedAt: current.requestedAt ?? e.occurredAt, lastSeq: stored.seq };
    case 'model.output.paragraph':
    case 'model.output.progress':
      return { ...current, firstTextAt: current.firstTextAt ?? e.occurredAt, lastSeq: stored.seq };
    case 'model.turn.completed':
      if (current.status !== 'requested') return { ...current, lastSeq: stored.seq };
      return {
        ...current,
        status: 'completed',
        ...ended(e.occurredAt),
        firstTextAt: current.firstTextAt ?? (e.data.content.trim() ? e.occurredAt : null),
        finishReason: e.data.finishReason,
        contentChars: e.data.content.length,
        toolCalls: e.data.toolCalls.length,
        promptTokens: e.data.usage?.promptTokens ?? null,
        completionTokens: e.data.usage?.completionTokens ?? null,
        lastSeq: stored.seq,
      };
    case 'model.turn.failed':
      if (current.status !== 'requested') return { ...current, lastSeq: stored.seq };
      return { ...current, status: 'failed', ...ended(e.occurredAt), errorKind: e.data.error.kind, lastSeq: stored.seq };
  }
}
