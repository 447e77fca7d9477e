/**
 * The adapter between the pure view rules and PostgreSQL: the idempotent projection step (K11).
 */
import type { EntityManager } from '@mikro-orm/postgresql';
import type { StoredEvent } from '@runplane/contracts';
import type { MessageRow, ModelTurnRow, PassageRow, RunRow, ToolCallRow } from './rows.js';
import { evolveMessage, evolveModelTurn, evolvePassage, evolveRun, evolveToolCall, touchedKeys } from './evolve.js';
import { advanceSubjectSeqs, continuityOf, type ProjectionGap, type SubjectSeqs } from './continuity.js';
import { selectRows, upsertRows } from './row-sql.js';

/** An event of a Run whose `run.admitted` has not been applied: the log or the delivery order is broken. */
export class OrphanEventError extends Error {
  constructor(readonly stored: StoredEvent) {
    super(`${stored.event.type} #${stored.seq} of run ${stored.event.runId}: the run has no projection row (run.admitted not applied)`);
    this.name = 'OrphanEventError';
  }
}

/**
 * Outcome of one projection step: `skipped` when the event was already applied (redelivery);
 * `gap` when it was not applied because an earlier event of its Run is missing from the
 * projection (see `continuityOf`): the Run must be re-projected from its log ({@link reprojectRun}).
 */
export interface ApplyResult {
  status: 'applied' | 'skipped' | 'gap';
  runId: string;
  seq: number;
  /** The Run's checkpoint before this step (0 when the Run had no row). */
  previousLastSeq: number;
  /** For `gap`: the first hole seen in the Run's projection in this batch. */
  gap?: ProjectionGap;
}

/** Options of {@link applyStoredEvents}. */
export interface ApplyOptions {
  /**
   * Check each event against its subject's back-link (default true, the live projector). False
   * for a replay of a whole log or Run in stream order (a rebuild, a repair), where every event is
   * present by construction: an event at or below the Run's checkpoint is then skipped, anything
   * else applied, and a hole in the log itself (a message that is not a fact) is passed over as
   * the readers pass it over.
   */
  checkContinuity?: boolean;
}

/**
 * PostgreSQL text cannot hold U+0000; a fact that carries one (model output, tool results) is
 * projected with U+FFFD in its place, the same way live and in a rebuild. A lone UTF-16 surrogate
 * (not a character) is projected as U+FFFD too, as writing the text as UTF-8 always did. The log
 * keeps the original. Returns `value` itself (no copy) when it holds neither.
 */
export function withoutNul<T>(value: T): T {
  if (typeof value === 'string') {
    const fixed = value.includes('\u0000') ? value.replaceAll('\u0000', '\uFFFD') : value;
    return (fixed.isWellFormed() ? fixed : fixed.toWellFormed()) as T;
  }
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) {
    let copy: unknown[] | null = null;
    for (let i = 0; i < value.length; i++) {
      const v = withoutNul(value[i] as unknown);
      if (v !== value[i]) (copy ??= value.slice())[i] = v;
    }
    return (copy ?? value) as T;
  }
  let copy: Record<string, unknown> | null = null;
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    const w = withoutNul(v);
    if (w !== v) (copy ??= { ...(value as Record<string, unknown>) })[k] = w;
  }
  return (copy ?? value) as T;
}

/** The advisory lock key of a Run's projection (transaction-scoped, see {@link applyStoredEvents}). */
const runLockKey = (runId: string): string => `runplane.projection.run/${runId}`;
/** Map key of a row with a (runId, id) primary key. */
const pairKey = (runId: string, id: string): string => JSON.stringify([runId, id]);

/**
 * Applies one stored event to the projections, exactly once under at-least-once delivery (K11):
 * `applyStoredEvents(em, [stored])`, see there.
 * @throws OrphanEventError when the Run has no row and the event is not `run.admitted`;
 *   database errors propagate (nothing is written).
 */
export async function applyStoredEvent(em: EntityManager, stored: StoredEvent): Promise<ApplyResult> {
  const [result] = await applyStoredEvents(em, [stored]);
  return result!;
}

/**
 * Applies a batch of stored events, of any number of Runs, to the projections in ONE transaction
 * (on a fork of `em`), exactly once under at-least-once delivery (K11). The rows and results are
 * the same as applying the events one by one with {@link applyStoredEvent}, in the order given:
 * 1. takes a transaction-scoped advisory lock per Run of the batch, in the order of the lock keys
 *    (so two batches with overlapping Runs cannot deadlock, and two deliveries of a Run's first
 *    event cannot both insert), and loads the batch's Run rows with `SELECT ... FOR UPDATE`;
 * 2. loads the message, passage, tool call and model turn rows the batch touches, one query per
 *    table (by exact primary key);
 * 3. evolves the rows in memory with the pure rules of `evolve.ts`, event by event in the order
 *    given, after the continuity check of `continuity.ts` against the Run's checkpoint
 *    (`runs.last_seq` and `runs.subject_seqs`, as advanced by the earlier events of the batch):
 *    an event its subject already applied is `skipped` (redelivery); an event whose back-link
 *    names a sequence the projection never applied, or that comes after a later event of its Run
 *    was applied, is a `gap` and is not applied, and neither is any later event of that Run in
 *    the batch; later events of a Run see the rows its earlier events produced;
 * 4. writes every changed row once, and only those, in one statement (an `INSERT ... ON CONFLICT
 *    DO UPDATE` per table, the checkpoints with the Run rows), and commits.
 * Rows are read and written as the plain rows of `rows.ts` with plain SQL on the transaction's
 * connection (`row-sql.ts`), not through entities and the unit of work: the same rows for a
 * fraction of the CPU (docs/performance.md).
 * The caller acknowledges the messages only after this resolves, and re-projects a Run with a
 * `gap` from its log ({@link reprojectRun}). Events of one Run must be given in stream order
 * (events of different Runs may interleave freely).
 * @returns one result per event, in the order given (`[]` for an empty batch, with no transaction).
 * @throws OrphanEventError for the first event (in the order given) whose Run has no row and that
 *   is not `run.admitted`; the WHOLE batch is then rolled back (nothing is written, other Runs'
 *   events included): the caller decides whether to re-apply the other Runs without it (the
 *   projector does). Database errors propagate likewise, with nothing written.
 */
export async function applyStoredEvents(em: EntityManager, originals: readonly StoredEvent[], opts: ApplyOptions = {}): Promise<ApplyResult[]> {
  if (originals.length === 0) return [];
  return em.fork().transactional(async (tx) => {
    await lockRuns(tx, [...new Set(originals.map((s) => s.event.runId))]);
    return applyLocked(tx, originals, opts.checkContinuity ?? true);
  });
}

/**
 * Re-projects one Run from its log (the repair of a {@link ApplyResult} `gap`, K11): in ONE
 * transaction, under the Run's advisory lock, deletes the Run's rows (`runs`, `tool_calls`,
 * `passages`, `model_turns`; its message row is written by `run.admitted` alone and stays) and
 * applies `events` in stream order as a rebuild does (`checkContinuity: false`). Idempotent: the
 * rows come out as a rebuild from the same events makes them.
 * @param events the Run's events in stream order from its first (`run.admitted`), as read from the log.
 * @returns one `applied` result per event.
 * @throws OrphanEventError when `events` does not start with `run.admitted` (nothing is written);
 *   database errors propagate likewise.
 */
export async function reprojectRun(em: EntityManager, runId: string, events: readonly StoredEvent[]): Promise<ApplyResult[]> {
  const own = events.filter((s) => s.event.runId === runId);
  return em.fork().transactional(async (tx) => {
    await lockRuns(tx, [runId]);
    for (const table of ['model_turns', 'passages', 'tool_calls', 'runs']) await tx.execute(`delete from "${table}" where "run_id" = ?`, [runId]);
    return applyLocked(tx, own, false);
  });
}

/** Takes the transaction-scoped advisory lock of each Run (see {@link applyStoredEvents}). */
async function lockRuns(tx: EntityManager, runIds: readonly string[]): Promise<void> {
  // one advisory lock per distinct lock value, taken in the order of the values themselves
  // (sorting the ids would not do: two ids may hash alike)
  await tx.execute(
    'select count(pg_advisory_xact_lock(h)) from (select distinct hashtextextended(k, 0) as h from jsonb_array_elements_text(?::jsonb) as k order by h) as locks',
    [JSON.stringify(runIds.map(runLockKey))],
  );
}

/** Steps 1 (the rows) to 4 of {@link applyStoredEvents}, inside a transaction that holds the Runs' locks. */
async function applyLocked(tx: EntityManager, originals: readonly StoredEvent[], checkContinuity: boolean): Promise<ApplyResult[]> {
  const batch = originals.map((s) => withoutNul(s));
  const runIds = [...new Set(batch.map((s) => s.event.runId))];
  const runs = new Map<string, RunRow | null>(runIds.map((id) => [id, null]));
  const subjectSeqs = new Map<string, SubjectSeqs>();
  for (const { subjectSeqs: seqs, ...row } of await selectRows(
    tx,
    'runs',
    runIds.map((id) => [id]),
    true,
  )) {
    runs.set(row.runId, row);
    subjectSeqs.set(row.runId, seqs ?? {});
  }
  /** The verdict on an event against its Run's checkpoint as it stands. */
  const verdict = (s: StoredEvent): 'applied' | 'next' | ProjectionGap => {
    const row = runs.get(s.event.runId) ?? null;
    if (row === null) return 'next'; // run.admitted, or an orphan (refused below)
    if (!checkContinuity) return s.seq <= row.lastSeq ? 'applied' : 'next';
    const c = continuityOf({ lastSeq: row.lastSeq, subjectSeqs: subjectSeqs.get(s.event.runId) ?? {} }, s);
    return c.kind === 'gap' ? c.gap : c.kind;
  };

  // the other rows the batch may touch: those of events not already applied by the stored checkpoint
  const wanted = {
    messages: new Map<string, string[]>(),
    toolCalls: new Map<string, string[]>(),
    passages: new Map<string, string[]>(),
    turns: new Map<string, string[]>(),
  };
  for (const s of batch) {
    const runId = s.event.runId;
    // a gap against the stored checkpoint may be the next event once the batch's earlier events
    // of its subject are applied: only events already applied are left out
    if (verdict(s) === 'applied') continue;
    const keys = touchedKeys(s);
    if (keys.messageId) wanted.messages.set(keys.messageId, [keys.messageId]);
    if (keys.toolCallId) wanted.toolCalls.set(pairKey(runId, keys.toolCallId), [runId, keys.toolCallId]);
    if (keys.passageId) wanted.passages.set(pairKey(runId, keys.passageId), [runId, keys.passageId]);
    if (keys.turn !== undefined) wanted.turns.set(pairKey(runId, String(keys.turn)), [runId, String(keys.turn)]);
  }
  // (one connection: the queries go one after another)
  const messages = new Map<string, MessageRow | null>();
  for (const row of await selectRows(tx, 'messages', [...wanted.messages.values()])) messages.set(row.messageId, row);
  const toolCalls = new Map<string, ToolCallRow | null>();
  for (const row of await selectRows(tx, 'toolCalls', [...wanted.toolCalls.values()])) toolCalls.set(pairKey(row.runId, row.toolCallId), row);
  const passages = new Map<string, PassageRow | null>();
  for (const row of await selectRows(tx, 'passages', [...wanted.passages.values()])) passages.set(pairKey(row.runId, row.passageId), row);
  const turns = new Map<string, ModelTurnRow | null>();
  for (const row of await selectRows(tx, 'modelTurns', [...wanted.turns.values()])) turns.set(pairKey(row.runId, String(row.turn)), row);
  const changed = {
    runs: new Set<string>(),
    messages: new Set<string>(),
    toolCalls: new Set<string>(),
    passages: new Set<string>(),
    turns: new Set<string>(),
  };

  const results: ApplyResult[] = [];
  /** Runs of the batch with a hole: none of their later events is applied. */
  const gaps = new Map<string, ProjectionGap>();
  for (const stored of batch) {
    const runId = stored.event.runId;
    const before = runs.get(runId) ?? null;
    const previousLastSeq = before?.lastSeq ?? 0;
    const gapBefore = gaps.get(runId);
    if (gapBefore) {
      results.push({ status: 'gap', runId, seq: stored.seq, previousLastSeq, gap: gapBefore });
      continue;
    }
    const seen = verdict(stored);
    if (seen === 'applied') {
      results.push({ status: 'skipped', runId, seq: stored.seq, previousLastSeq });
      continue;
    }
    if (seen !== 'next') {
      gaps.set(runId, seen);
      results.push({ status: 'gap', runId, seq: stored.seq, previousLastSeq, gap: seen });
      continue;
    }
    const keys = touchedKeys(stored);
    const toolCallKey = keys.toolCallId ? pairKey(runId, keys.toolCallId) : null;
    const passageKey = keys.passageId ? pairKey(runId, keys.passageId) : null;
    const toolCallBefore = toolCallKey ? (toolCalls.get(toolCallKey) ?? null) : null;
    const passageBefore = passageKey ? (passages.get(passageKey) ?? null) : null;
    const turnKey = keys.turn !== undefined ? pairKey(runId, String(keys.turn)) : null;
    const turnBefore = turnKey ? (turns.get(turnKey) ?? null) : null;

    const run = evolveRun(before, stored, { toolCallBefore, passageBefore, ...(turnKey ? { turnBefore } : {}) });
    if (run === null) throw new OrphanEventError(stored);
    runs.set(runId, run);
    subjectSeqs.set(runId, advanceSubjectSeqs(subjectSeqs.get(runId) ?? {}, stored));
    changed.runs.add(runId);
    if (keys.messageId) {
      const row = messages.get(keys.messageId) ?? null;
      const message = evolveMessage(row, stored);
      if (message !== row) {
        messages.set(keys.messageId, message);
        changed.messages.add(keys.messageId);
      }
    }
    if (toolCallKey) {
      const toolCall = evolveToolCall(toolCallBefore, stored);
      if (toolCall !== toolCallBefore) {
        toolCalls.set(toolCallKey, toolCall);
        changed.toolCalls.add(toolCallKey);
      }
    }
    if (passageKey) {
      const passage = evolvePassage(passageBefore, stored);
      if (passage !== passageBefore) {
        passages.set(passageKey, passage);
        changed.passages.add(passageKey);
      }
    }
    if (turnKey) {
      const turn = evolveModelTurn(turnBefore, stored);
      if (turn !== turnBefore) {
        turns.set(turnKey, turn);
        changed.turns.add(turnKey);
      }
    }
    results.push({ status: 'applied', runId, seq: stored.seq, previousLastSeq });
  }

  // every changed row once, in one statement (the checkpoints with the Runs' rows)
  await upsertRows(tx, {
    runs: [...changed.runs].map((runId) => ({ ...runs.get(runId)!, subjectSeqs: { ...subjectSeqs.get(runId) } })),
    messages: [...changed.messages].map((key) => messages.get(key)!),
    toolCalls: [...changed.toolCalls].map((key) => toolCalls.get(key)!),
    passages: [...changed.passages].map((key) => passages.get(key)!),
    modelTurns: [...changed.turns].map((key) => turns.get(key)!),
  });
  return results;
}
