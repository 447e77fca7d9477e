/**
 * Building events: deterministic ids so that a handler that repeats a decision after redelivery
 * produces byte-identical ids, which JetStream de-duplicates by `Nats-Msg-Id` (K11).
 */
import { createHash } from 'node:crypto';
import { v5 as uuidv5 } from 'uuid';
import { EventCatalog, RunEvent, type EventData, type EventType, type RunEventOf } from './events.js';

/** Namespace for Runplane's name-based (v5) UUIDs. */
export const RUNPLANE_UUID_NAMESPACE = '6f1d0d3e-8a52-4c1e-9a0b-2b7e3c9d5a11';

/** A v5 UUID of the given parts joined by "/": same parts, same id, on every machine. */
export function deterministicId(...parts: (string | number)[]): string {
  return uuidv5(parts.join('/'), RUNPLANE_UUID_NAMESPACE);
}

/**
 * The key a Conversation's ids derive from and its conversation-index entry is kept under (K1,
 * K2). With authentication on, conversation ids are scoped per principal: the key derives from
 * the principal (its sha256, so any `sub` is safe) and the client's conversation id, so two
 * principals that pick the same conversation id have two Conversations, with different Run ids,
 * and neither can claim, block or probe the other's (nothing to squat). Without a principal
 * (authentication disabled) the key is the conversation id itself, as before. A Run's events still
 * carry the client's `conversationId`; its `run.admitted` `principal` says whose it is.
 * @returns a UUID (with a principal) or `conversationId` unchanged; either is a valid KV key.
 */
export function conversationKey(conversationId: string, principal?: string | null): string {
  return principal ? deterministicId('conversation', sha256Hex(principal), conversationId) : conversationId;
}

/**
 * `{messageId, runId}` for a client message id within a conversation (stable UUIDs): the same
 * `clientMessageId` always names the same Run (K1). Child Runs use the same derivation with
 * {@link childClientMessageId}, so a child has one id however often its spawn is decided.
 * Admission passes the Conversation's {@link conversationKey} as `conversationId` (with
 * authentication on, the ids are per principal).
 */
export function admissionIds(conversationId: string, clientMessageId: string): { messageId: string; runId: string } {
  return {
    messageId: deterministicId('message', conversationId, clientMessageId),
    runId: deterministicId('run', conversationId, clientMessageId),
  };
}

/** The client message id of the child Run a parent spawns from its tool call (`child.<parentRunId>.<toolCallId>`). */
export function childClientMessageId(parentRunId: string, toolCallId: string): string {
  return `child.${parentRunId}.${toolCallId}`.slice(0, 200);
}

/** The id of the wait a Run opens for its `ask_human` tool call. */
export function waitIdOf(runId: string, toolCallId: string): string {
  return deterministicId('wait', runId, toolCallId);
}

/** The id of the clarification a Run registers for its `ask_clarification` tool call (K2). */
export function clarificationIdOf(runId: string, toolCallId: string): string {
  return deterministicId('clarification', runId, toolCallId);
}

/** sha256 of a UTF-8 string, lowercase hex. */
export function sha256Hex(text: string | Buffer): string {
  return createHash('sha256').update(text).digest('hex');
}

export interface EventContext {
  runId: string;
  conversationId: string;
  correlationId: string;
  causationId: string | null;
}

/**
 * Creates a validated event. `key` names the decision within the Run (e.g. the turn number or
 * tool call id) so that `eventId = v5(runId/type/key)` is stable across retries. `now` is the
 * decision's clock (deciders receive it; nothing here reads the time). `prevSeq` and `writer` are
 * stamped later, by the append.
 * @throws ZodError when `data` does not match the type's schema.
 */
export function makeEvent<T extends EventType>(type: T, ctx: EventContext, key: string | number, data: EventData<T>, now: Date): RunEventOf<T> {
  const entry = EventCatalog[type];
  const event = {
    eventId: deterministicId(ctx.runId, type, key),
    type,
    schemaVersion: entry.version,
    owner: entry.owner,
    runId: ctx.runId,
    conversationId: ctx.conversationId,
    occurredAt: now.toISOString(),
    causationId: ctx.causationId,
    correlationId: ctx.correlationId,
    data,
  };
  return RunEvent.parse(event) as RunEventOf<T>;
}

/** The envelope context for events that follow `cause` in the same Run. */
export function contextFrom(cause: RunEvent): EventContext {
  return {
    runId: cause.runId,
    conversationId: cause.conversationId,
    correlationId: cause.correlationId,
    causationId: cause.eventId,
  };
}
