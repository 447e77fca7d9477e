/**
 * Reads over the projections: the Run view of the HTTP contract, and a full dump of the
 * tables for rebuild comparisons. Reads never append (K11).
 */
import type { FilterQuery } from '@mikro-orm/core';
import type { MikroORM } from '@mikro-orm/postgresql';
import { RunView } from '@runplane/contracts';
import { RunEntity, runRowOf } from './entities.js';

/**
 * The Run projection as the contracts' `RunView` (validated with its zod schema), or null when
 * the Run has no row (unknown, or its admission not yet projected).
 * @throws ZodError if a stored row does not satisfy `RunView` (a schema drift, not a user error).
 */
export async function getRunView(orm: MikroORM, runId: string): Promise<RunView | null> {
  const entity = await orm.em.fork().findOne(RunEntity, { runId });
  return entity ? RunView.parse(runRowOf(entity)) : null;
}

/** Which Runs {@link listRunViews} reads: one principal's (or every Run's), after a position, at most `limit`. */
export interface RunListQuery {
  /** Only Runs whose `run.admitted` carried this principal; null: every Run (an admin's list). */
  principal: string | null;
  /** 1..100 (the caller validates). */
  limit: number;
  /** Start after this Run (the last of the previous page); null: from the newest. */
  after: { admittedAt: string; runId: string } | null;
}

/**
 * One page of Run projections, newest admission first (ties by run id, descending), as the
 * contracts' `RunView`; `more` is true when Runs follow the page. Keyset pagination: a Run
 * admitted while a client pages is never listed twice nor shifts the pages after it.
 * @throws ZodError if a stored row does not satisfy `RunView` (a schema drift, not a user error).
 */
export async function listRunViews(orm: MikroORM, q: RunListQuery): Promise<{ runs: RunView[]; more: boolean }> {
  const conditions: FilterQuery<RunEntity>[] = [];
  if (q.principal !== null) conditions.push({ principal: q.principal });
  if (q.after) {
    const at = new Date(q.after.admittedAt);
    conditions.push({ $or: [{ admittedAt: { $lt: at } }, { admittedAt: at, runId: { $lt: q.after.runId } }] });
  }
  const where: FilterQuery<RunEntity> = conditions.length > 0 ? { $and: conditions } : {};
  const rows = await orm.em.fork().find(RunEntity, where, { orderBy: [{ admittedAt: 'desc' }, { runId: 'desc' }], limit: q.limit + 1 });
  return { runs: rows.slice(0, q.limit).map((e) => RunView.parse(runRowOf(e))), more: rows.length > q.limit };
}

/** What {@link quotaUsageOf} counts for one principal. */
export interface PrincipalRunUsage {
  /** Its Runs admitted and not settled. */
  activeRuns: number;
  /** When its Runs admitted after `since` were admitted (ISO-8601), oldest first. */
  admittedSince: string[];
  /** The ids of those Runs, in the same order (admission's quota reservations leave once shown here). */
  admittedSinceRunIds: string[];
  /** Its unsettled Runs parked waiting for a human's answer (`awaiting_human`), each with its deadline (ISO-8601, null: none). */
  awaitingHuman: { deadlineAt: string | null }[];
}

/**
 * The Runs admission's quotas count for one principal (null: the Runs admitted without one, with
 * authentication disabled): how many are not settled, and when those admitted after `since` were
 * admitted, and which of the unsettled ones wait for a human (with their deadlines: admission's
 * `concurrent-runs` Retry-After). Child Runs (their `clientMessageId` starts with the reserved `child.`) are not counted:
 * they are charged to their parent's grant. Every column read derives from events, so a rebuild
 * from the log gives the same counts (K11); the counts follow the log by the projector's lag.
 */
export async function quotaUsageOf(orm: MikroORM, principal: string | null, since: Date): Promise<PrincipalRunUsage> {
  // One statement, so one snapshot: counted apart, the projector could commit a Run between the
  // count of unsettled Runs and the list of recent ones, and admission would then take that Run as
  // shown (dropping its reservation) while it was not counted as running: a burst admitted two
  // Runs under a concurrent-runs quota of one.
  const own: FilterQuery<RunEntity> = { principal, $not: { clientMessageId: { $like: 'child.%' } } };
  const rows = await orm.em
    .fork()
    .find(
      RunEntity,
      { $and: [own, { $or: [{ status: { $ne: 'settled' } }, { admittedAt: { $gt: since } }] }] },
      { fields: ['runId', 'admittedAt', 'status', 'deadlineAt'], orderBy: { admittedAt: 'asc', runId: 'asc' } },
    );
  const recent = rows.filter((r) => new Date(r.admittedAt).getTime() > since.getTime());
  return {
    activeRuns: rows.filter((r) => r.status !== 'settled').length,
    admittedSince: recent.map((r) => new Date(r.admittedAt).toISOString()),
    admittedSinceRunIds: recent.map((r) => r.runId),
    awaitingHuman: rows
      .filter((r) => r.status === 'awaiting_human')
      .map((r) => ({ deadlineAt: r.deadlineAt ? new Date(r.deadlineAt).toISOString() : null })),
  };
}

/** One priced Run in {@link costChargesOf}: when it was admitted, its currency, and the most it costs (micro-units). */
export interface RunCostCharge {
  admittedAt: string;
  currency: string;
  /** `cost_micros + cost_unknown_max_micros`: measured plus the upper bound of what is not (in flight, or unknown), K7. */
  upperMicros: number;
}

/**
 * The priced Runs of one principal (null: those admitted without one) admitted after `since`,
 * oldest first, with the most each costs: what admission's `cost-per-day` quota counts. Child Runs
 * are included (their model turns are paid like any, under the parent's principal). The columns
 * derive from events (the reservation of a turn in flight counts until its outcome records the
 * cost), so a rebuild gives the same charges (K11); they follow the log by the projector's lag.
 */
export async function costChargesOf(orm: MikroORM, principal: string | null, since: Date): Promise<RunCostCharge[]> {
  const rows = await orm.em
    .fork()
    .find(
      RunEntity,
      { principal, admittedAt: { $gt: since }, costCurrency: { $ne: null } },
      { fields: ['admittedAt', 'costCurrency', 'costMicros', 'costUnknownMaxMicros'], orderBy: { admittedAt: 'asc', runId: 'asc' } },
    );
  return rows.map((r) => ({
    admittedAt: new Date(r.admittedAt).toISOString(),
    currency: r.costCurrency!,
    upperMicros: Number(r.costMicros ?? 0) + Number(r.costUnknownMaxMicros ?? 0),
  }));
}

/** The projection tables and their primary key columns, in dump order. */
export const PROJECTION_TABLES = {
  runs: ['run_id'],
  messages: ['message_id'],
  passages: ['run_id', 'passage_id'],
  tool_calls: ['run_id', 'tool_call_id'],
  model_turns: ['run_id', 'turn'],
} as const;
export type ProjectionTable = keyof typeof PROJECTION_TABLES;

/** Column name -> value as PostgreSQL renders the row with `to_jsonb` (timestamps as text, bigints as numbers). */
export type DumpedRow = Record<string, unknown>;
export type ProjectionDump = Record<ProjectionTable, DumpedRow[]>;

/**
 * Every row of the projection tables, each table ordered by its primary key (byte order,
 * `COLLATE "C"`, so the order does not depend on the database's locale). Rows are taken with
 * `to_jsonb(row)`, so every column of the table is included, even one no entity maps.
 */
export async function dumpProjectionRows(orm: MikroORM): Promise<ProjectionDump> {
  const em = orm.em.fork();
  const dump = {} as ProjectionDump;
  for (const [table, keys] of Object.entries(PROJECTION_TABLES) as [ProjectionTable, readonly string[]][]) {
    const order = keys.map((k) => `t."${k}"::text collate "C"`).join(', ');
    const rows = await em.execute<{ row: DumpedRow }[]>(`select to_jsonb(t) as "row" from "${table}" t order by ${order}`);
    dump[table] = rows.map((r) => r.row);
  }
  return dump;
}

const show = (v: unknown): string => (v === undefined ? '(absent)' : JSON.stringify(v));

/**
 * Compares two dumps row by row (matched by primary key) and column by column. Each difference
 * is one line: `runs[run_id=r1].status: live "settled" vs rebuilt "running"`, or
 * `tool_calls[run_id=r1,tool_call_id=c1]: only in live`. Empty when identical.
 */
export function diffProjectionDumps(live: ProjectionDump, rebuilt: ProjectionDump): string[] {
  const out: string[] = [];
  for (const [table, keys] of Object.entries(PROJECTION_TABLES) as [ProjectionTable, readonly string[]][]) {
    const keyOf = (row: DumpedRow) => keys.map((k) => `${k}=${String(row[k])}`).join(',');
    const liveRows = new Map((live[table] ?? []).map((r) => [keyOf(r), r]));
    const rebuiltRows = new Map((rebuilt[table] ?? []).map((r) => [keyOf(r), r]));
    const allKeys = [...new Set([...liveRows.keys(), ...rebuiltRows.keys()])].sort();
    for (const key of allKeys) {
      const a = liveRows.get(key);
      const b = rebuiltRows.get(key);
      if (!a) {
        out.push(`${table}[${key}]: only in rebuilt`);
        continue;
      }
      if (!b) {
        out.push(`${table}[${key}]: only in live`);
        continue;
      }
      const columns = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
      for (const column of columns) {
        if (JSON.stringify(a[column]) !== JSON.stringify(b[column])) {
          out.push(`${table}[${key}].${column}: live ${show(a[column])} vs rebuilt ${show(b[column])}`);
        }
      }
    }
  }
  return out;
}
