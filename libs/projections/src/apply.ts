/**
 * The adapter between the pure view rules and PostgreSQL: the idempotent projection step (K11).
 */
import { LockMode } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { StoredEvent } from '@runplane/contracts';
import {
  MessageEntity,
  PassageEntity,
  RunEntity,
  ToolCallEntity,
  messageDataOf,
  messageRowOf,
  passageDataOf,
  passageRowOf,
  runDataOf,
  runRowOf,
  toolCallDataOf,
  toolCallRowOf,
} from './entities.js';
import { evolveMessage, evolvePassage, evolveRun, evolveToolCall, touchedKeys } from './evolve.js';

/** An event of a Run whose `run.admitted` has not been applied: the log or the delivery order is broken. */
export class OrphanEventError extends Error {
  constructor(readonly stored: StoredEvent) {
    super(`${stored.event.type} #${stored.seq} of run ${stored.event.runId}: the run has no projection row (run.admitted not applied)`);
    this.name = 'OrphanEventError';
  }
}

/** Outcome of one projection step: `skipped` when the event was already applied (redelivery). */
export interface ApplyResult {
  status: 'applied' | 'skipped';
  runId: string;
  seq: number;
  /** The Run's checkpoint before this step (0 when the Run had no row). */
  previousLastSeq: number;
}

/**
 * Applies one stored event to the projections, exactly once under at-least-once delivery (K11).
 * In one transaction (on a fork of `em`):
 * 1. takes a transaction-scoped advisory lock on the Run id (so two deliveries of a Run's first
 *    event cannot both insert) and locks the Run's row with `SELECT ... FOR UPDATE`;
 * 2. skips when `seq <= runs.last_seq`: that row's `last_seq` is the Run's checkpoint;
 * 3. otherwise evolves the Run row and the message / passage / tool call row the event touches
 *    with the pure rules of `evolve.ts` and upserts them, the checkpoint included;
 * 4. commits. The caller acknowledges the message only after this resolves.
 * Events of one Run must be applied in stream order: an event older than the checkpoint is
 * taken for a redelivery and skipped.
 * @throws OrphanEventError when the Run has no row and the event is not `run.admitted`;
 *   database errors propagate (nothing is written).
 */
/**
 * PostgreSQL text cannot hold U+0000; a fact that carries one (model output, tool results) is
 * projected with U+FFFD in its place, the same way live and in a rebuild. The log keeps the
 * original.
 */
export function withoutNul<T>(value: T): T {
  if (typeof value === 'string') return (value.includes('\u0000') ? value.replaceAll('\u0000', '\uFFFD') : value) as T;
  if (Array.isArray(value)) return value.map(withoutNul) as T;
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withoutNul(v)])) as T;
  }
  return value;
}

export async function applyStoredEvent(em: EntityManager, original: StoredEvent): Promise<ApplyResult> {
  const stored = withoutNul(original);
  const runId = stored.event.runId;
  return em.fork().transactional(async (tx) => {
    await tx.execute('select pg_advisory_xact_lock(hashtextextended(?, 0))', [`runplane.projection.run/${runId}`]);
    const runEntity = await tx.findOne(RunEntity, { runId }, { lockMode: LockMode.PESSIMISTIC_WRITE });
    const before = runEntity ? runRowOf(runEntity) : null;
    const previousLastSeq = before?.lastSeq ?? 0;
    if (before !== null && stored.seq <= before.lastSeq) return { status: 'skipped', runId, seq: stored.seq, previousLastSeq };

    const keys = touchedKeys(stored);
    const toolCallEntity = keys.toolCallId ? await tx.findOne(ToolCallEntity, { runId, toolCallId: keys.toolCallId }) : null;
    const passageEntity = keys.passageId ? await tx.findOne(PassageEntity, { runId, passageId: keys.passageId }) : null;
    const toolCallBefore = toolCallEntity ? toolCallRowOf(toolCallEntity) : null;
    const passageBefore = passageEntity ? passageRowOf(passageEntity) : null;

    const run = evolveRun(before, stored, { toolCallBefore, passageBefore });
    if (run === null) throw new OrphanEventError(stored);
    if (runEntity) tx.assign(runEntity, runDataOf(run));
    else tx.create(RunEntity, runDataOf(run));

    if (keys.messageId) {
      const messageEntity = await tx.findOne(MessageEntity, { messageId: keys.messageId });
      const message = evolveMessage(messageEntity ? messageRowOf(messageEntity) : null, stored);
      if (message && messageEntity) tx.assign(messageEntity, messageDataOf(message));
      else if (message) tx.create(MessageEntity, messageDataOf(message));
    }
    if (keys.toolCallId) {
      const toolCall = evolveToolCall(toolCallBefore, stored);
      if (toolCall && toolCallEntity) tx.assign(toolCallEntity, toolCallDataOf(toolCall));
      else if (toolCall) tx.create(ToolCallEntity, toolCallDataOf(toolCall));
    }
    if (keys.passageId) {
      const passage = evolvePassage(passageBefore, stored);
      if (passage && passageEntity) tx.assign(passageEntity, passageDataOf(passage));
      else if (passage) tx.create(PassageEntity, passageDataOf(passage));
    }
    return { status: 'applied', runId, seq: stored.seq, previousLastSeq };
  });
}
