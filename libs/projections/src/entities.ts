/**
 * MikroORM entities of the projection tables, defined with `defineEntity` (no decorator
 * metadata). The tables themselves are created by `@runplane/migrations`; these definitions must
 * match them column for column. Conversions to and from the plain rows of `rows.ts` live here.
 */
import { defineEntity, type InferEntity } from '@mikro-orm/core';
import type { Outcome, ReconciledOutcome } from '@runplane/contracts';
import type { MessageRow, ModelTurnRow, PassageRow, RunRow, RunStatus, ToolCallRow, ToolCallStatus } from './rows.js';

const p = defineEntity.properties;

/** Table `runs`. */
export const RunEntity = defineEntity({
  name: 'RunProjection',
  tableName: 'runs',
  properties: {
    runId: p.text().primary(),
    conversationId: p.text(),
    messageId: p.text(),
    clientMessageId: p.text(),
    question: p.text(),
    status: p.text().$type<RunStatus>(),
    outcome: p.text().$type<Outcome>().nullable(),
    reason: p.text().nullable(),
    modelRequests: p.integer(),
    promptTokens: p.integer().default(0),
    completionTokens: p.integer().default(0),
    unknownUsageTurns: p.integer().default(0),
    toolCalls: p.integer(),
    passages: p.integer(),
    admittedAt: p.datetime(),
    settledAt: p.datetime().nullable(),
    maxModelRequests: p.integer().nullable(),
    maxToolCalls: p.integer().nullable(),
    maxInputTokens: p.integer().nullable(),
    maxOutputTokens: p.integer().nullable(),
    reserveModelRequests: p.integer().nullable(),
    reserveOutputTokens: p.integer().nullable(),
    maxCostMicros: p.bigint('number').nullable(),
    costCurrency: p.text().nullable(),
    costMicros: p.bigint('number').nullable(),
    costUnknownMaxMicros: p.bigint('number').nullable(),
    costInFlightMicros: p.bigint('number').nullable(),
    noProgressSeconds: p.integer().nullable(),
    deadlineAt: p.datetime().nullable(),
    startedAt: p.datetime().nullable(),
    queuedMs: p.bigint('number').nullable(),
    executionEndedAt: p.datetime().nullable(),
    executingMs: p.bigint('number').nullable(),
    lastProgressAt: p.datetime().nullable(),
    clarificationId: p.text().nullable(),
    principal: p.text().nullable(),
    lastSeq: p.bigint('number'),
    /** Last sequence applied per subject of the Run (`{"admission": 1, "runtime": 7, ...}`): the continuity check's checkpoint (K11). */
    subjectSeqs: p.json<Record<string, number>>(),
  },
});
export type RunEntity = InferEntity<typeof RunEntity>;

/** Table `messages`. */
export const MessageEntity = defineEntity({
  name: 'MessageProjection',
  tableName: 'messages',
  properties: {
    messageId: p.text().primary(),
    conversationId: p.text(),
    clientMessageId: p.text(),
    content: p.text(),
    contentSha256: p.text(),
    runId: p.text(),
    admittedAt: p.datetime(),
    lastSeq: p.bigint('number'),
  },
});
export type MessageEntity = InferEntity<typeof MessageEntity>;

/** Table `passages`, primary key (run_id, passage_id). */
export const PassageEntity = defineEntity({
  name: 'PassageProjection',
  tableName: 'passages',
  properties: {
    runId: p.text().primary(),
    passageId: p.text().primary(),
    index: p.integer(),
    version: p.integer(),
    text: p.text(),
    sha256: p.text(),
    committedAt: p.datetime(),
    lastSeq: p.bigint('number'),
  },
});
export type PassageEntity = InferEntity<typeof PassageEntity>;

/** Table `tool_calls`, primary key (run_id, tool_call_id): tool call ids come from the model. */
export const ToolCallEntity = defineEntity({
  name: 'ToolCallProjection',
  tableName: 'tool_calls',
  properties: {
    runId: p.text().primary(),
    toolCallId: p.text().primary(),
    turn: p.integer().nullable(),
    name: p.text(),
    argumentsText: p.text().nullable(),
    status: p.text().$type<ToolCallStatus>(),
    errorCode: p.text().nullable(),
    errorMessage: p.text().nullable(),
    resultSha256: p.text().nullable(),
    proposedAt: p.datetime().nullable(),
    dispatchedAt: p.datetime().nullable(),
    receiptAt: p.datetime().nullable(),
    lateStatus: p.text().$type<'succeeded' | 'failed'>().nullable(),
    lateObservedAt: p.datetime().nullable(),
    reconciledOutcome: p.text().$type<ReconciledOutcome>().nullable(),
    reconciledBy: p.text().nullable(),
    reconciledAt: p.datetime().nullable(),
    lastSeq: p.bigint('number'),
  },
});
export type ToolCallEntity = InferEntity<typeof ToolCallEntity>;

/** Table `model_turns`, primary key (run_id, turn). */
export const ModelTurnEntity = defineEntity({
  name: 'ModelTurnProjection',
  tableName: 'model_turns',
  properties: {
    runId: p.text().primary(),
    turn: p.integer().primary(),
    status: p.text().$type<ModelTurnRow['status']>(),
    requestedAt: p.datetime().nullable(),
    firstTextAt: p.datetime().nullable(),
    endedAt: p.datetime().nullable(),
    durationMs: p.bigint('number').nullable(),
    finishReason: p.text().nullable(),
    contentChars: p.integer().nullable(),
    toolCalls: p.integer().nullable(),
    promptTokens: p.integer().nullable(),
    completionTokens: p.integer().nullable(),
    errorKind: p.text().nullable(),
    lastSeq: p.bigint('number'),
  },
});
export type ModelTurnEntity = InferEntity<typeof ModelTurnEntity>;

/** Every projection entity, for the ORM configuration. */
export const projectionEntities = [RunEntity, MessageEntity, PassageEntity, ToolCallEntity, ModelTurnEntity];

const iso = (d: Date): string => d.toISOString();
const isoOrNull = (d: Date | null | undefined): string | null => (d ? d.toISOString() : null);
const date = (s: string): Date => new Date(s);
const dateOrNull = (s: string | null): Date | null => (s === null ? null : new Date(s));

/** Entity -> plain row (times as ISO-8601 UTC strings, `lastSeq` as a number). */
export const runRowOf = (e: RunEntity): RunRow => ({
  runId: e.runId,
  conversationId: e.conversationId,
  messageId: e.messageId,
  clientMessageId: e.clientMessageId,
  question: e.question,
  status: e.status,
  outcome: e.outcome ?? null,
  reason: e.reason ?? null,
  modelRequests: e.modelRequests,
  promptTokens: e.promptTokens,
  completionTokens: e.completionTokens,
  unknownUsageTurns: e.unknownUsageTurns,
  toolCalls: e.toolCalls,
  passages: e.passages,
  admittedAt: iso(e.admittedAt),
  settledAt: isoOrNull(e.settledAt),
  maxModelRequests: e.maxModelRequests ?? null,
  maxToolCalls: e.maxToolCalls ?? null,
  maxInputTokens: e.maxInputTokens ?? null,
  maxOutputTokens: e.maxOutputTokens ?? null,
  reserveModelRequests: e.reserveModelRequests ?? null,
  reserveOutputTokens: e.reserveOutputTokens ?? null,
  maxCostMicros: e.maxCostMicros === null || e.maxCostMicros === undefined ? null : Number(e.maxCostMicros),
  costCurrency: e.costCurrency ?? null,
  costMicros: Number(e.costMicros ?? 0),
  costUnknownMaxMicros: Number(e.costUnknownMaxMicros ?? 0),
  costInFlightMicros: Number(e.costInFlightMicros ?? 0),
  noProgressSeconds: e.noProgressSeconds ?? null,
  deadlineAt: isoOrNull(e.deadlineAt),
  startedAt: isoOrNull(e.startedAt),
  queuedMs: e.queuedMs === null || e.queuedMs === undefined ? null : Number(e.queuedMs),
  executionEndedAt: isoOrNull(e.executionEndedAt),
  executingMs: e.executingMs === null || e.executingMs === undefined ? null : Number(e.executingMs),
  lastProgressAt: isoOrNull(e.lastProgressAt),
  clarificationId: e.clarificationId ?? null,
  principal: e.principal ?? null,
  lastSeq: Number(e.lastSeq),
});
/** Plain row -> entity data (ISO strings -> Date) for `em.create` / `em.assign`. */
export const runDataOf = (r: RunRow) => ({
  ...r,
  admittedAt: date(r.admittedAt),
  settledAt: dateOrNull(r.settledAt),
  deadlineAt: dateOrNull(r.deadlineAt),
  startedAt: dateOrNull(r.startedAt),
  executionEndedAt: dateOrNull(r.executionEndedAt),
  lastProgressAt: dateOrNull(r.lastProgressAt),
});

/** Entity -> plain row. */
export const messageRowOf = (e: MessageEntity): MessageRow => ({
  messageId: e.messageId,
  conversationId: e.conversationId,
  clientMessageId: e.clientMessageId,
  content: e.content,
  contentSha256: e.contentSha256,
  runId: e.runId,
  admittedAt: iso(e.admittedAt),
  lastSeq: Number(e.lastSeq),
});
/** Plain row -> entity data. */
export const messageDataOf = (r: MessageRow) => ({ ...r, admittedAt: date(r.admittedAt) });

/** Entity -> plain row. */
export const passageRowOf = (e: PassageEntity): PassageRow => ({
  runId: e.runId,
  passageId: e.passageId,
  index: e.index,
  version: e.version,
  text: e.text,
  sha256: e.sha256,
  committedAt: iso(e.committedAt),
  lastSeq: Number(e.lastSeq),
});
/** Plain row -> entity data. */
export const passageDataOf = (r: PassageRow) => ({ ...r, committedAt: date(r.committedAt) });

/** Entity -> plain row. */
export const toolCallRowOf = (e: ToolCallEntity): ToolCallRow => ({
  runId: e.runId,
  toolCallId: e.toolCallId,
  turn: e.turn ?? null,
  name: e.name,
  argumentsText: e.argumentsText ?? null,
  status: e.status,
  errorCode: e.errorCode ?? null,
  errorMessage: e.errorMessage ?? null,
  resultSha256: e.resultSha256 ?? null,
  proposedAt: isoOrNull(e.proposedAt),
  dispatchedAt: isoOrNull(e.dispatchedAt),
  receiptAt: isoOrNull(e.receiptAt),
  lateStatus: e.lateStatus ?? null,
  lateObservedAt: isoOrNull(e.lateObservedAt),
  reconciledOutcome: e.reconciledOutcome ?? null,
  reconciledBy: e.reconciledBy ?? null,
  reconciledAt: isoOrNull(e.reconciledAt),
  lastSeq: Number(e.lastSeq),
});
/** Plain row -> entity data. */
export const toolCallDataOf = (r: ToolCallRow) => ({
  ...r,
  proposedAt: dateOrNull(r.proposedAt),
  dispatchedAt: dateOrNull(r.dispatchedAt),
  receiptAt: dateOrNull(r.receiptAt),
  lateObservedAt: dateOrNull(r.lateObservedAt),
  reconciledAt: dateOrNull(r.reconciledAt),
});

/** Entity -> plain row. */
export const modelTurnRowOf = (e: ModelTurnEntity): ModelTurnRow => ({
  runId: e.runId,
  turn: e.turn,
  status: e.status,
  requestedAt: isoOrNull(e.requestedAt),
  firstTextAt: isoOrNull(e.firstTextAt),
  endedAt: isoOrNull(e.endedAt),
  durationMs: e.durationMs === null || e.durationMs === undefined ? null : Number(e.durationMs),
  finishReason: e.finishReason ?? null,
  contentChars: e.contentChars ?? null,
  toolCalls: e.toolCalls ?? null,
  promptTokens: e.promptTokens ?? null,
  completionTokens: e.completionTokens ?? null,
  errorKind: e.errorKind ?? null,
  lastSeq: Number(e.lastSeq),
});
/** Plain row -> entity data. */
export const modelTurnDataOf = (r: ModelTurnRow) => ({
  ...r,
  requestedAt: dateOrNull(r.requestedAt),
  firstTextAt: dateOrNull(r.firstTextAt),
  endedAt: dateOrNull(r.endedAt),
});
