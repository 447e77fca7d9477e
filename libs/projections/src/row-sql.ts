/**
 * The projection write path's SQL: loading and writing the plain rows of `rows.ts` with plain
 * statements on the transaction's connection, without entity hydration or a unit of work (the
 * projector's CPU per event, see docs/performance.md). The entities of `entities.ts` stay the
 * schema's description for the reads; {@link PROJECTION_COLUMNS} must name the same columns
 * (checked by the tests against the ORM's metadata).
 */
import type { EntityManager } from '@mikro-orm/postgresql';
import type { RunCheckpoint, SubjectSeqs } from './continuity.js';
import type { MessageRow, ModelTurnRow, PassageRow, RunRow, ToolCallRow } from './rows.js';

/**
 * How a column is read into a plain row: `text` and `int` as they come, `bigint` as a JS number,
 * `time` (timestamptz) as an ISO-8601 UTC string with milliseconds (`Date#toISOString`), `json`
 * (jsonb) as the parsed value; `bigint0` as `bigint` with a null read as 0 (a nullable column added
 * after rows existed, whose row property is a number: the Run's cost, K7).
 */
export type ColumnKind = 'text' | 'int' | 'bigint' | 'bigint0' | 'time' | 'json';

/** One column: the row property, the table column, its kind. */
export type ColumnSpec = readonly [property: string, column: string, kind: ColumnKind];

/** A projection table as the write path sees it: its name, its primary key columns, its columns. */
export interface TableSpec {
  table: string;
  key: readonly string[];
  columns: readonly ColumnSpec[];
}

const spec = (table: string, key: readonly string[], columns: Record<string, ColumnKind>): TableSpec => ({
  table,
  key,
  columns: Object.entries(columns).map(([property, kind]) => [property, property.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), kind] as const),
});

/** Every column of the projection tables the write path reads and writes (the row shapes of `rows.ts`, plus `runs.subject_seqs`). */
export const PROJECTION_COLUMNS = {
  runs: spec('runs', ['run_id'], {
    runId: 'text',
    conversationId: 'text',
    messageId: 'text',
    clientMessageId: 'text',
    question: 'text',
    status: 'text',
    outcome: 'text',
    reason: 'text',
    modelRequests: 'int',
    promptTokens: 'int',
    completionTokens: 'int',
    unknownUsageTurns: 'int',
    toolCalls: 'int',
    passages: 'int',
    admittedAt: 'time',
    settledAt: 'time',
    maxModelRequests: 'int',
    maxToolCalls: 'int',
    maxInputTokens: 'int',
    maxOutputTokens: 'int',
    reserveModelRequests: 'int',
    reserveOutputTokens: 'int',
    noProgressSeconds: 'int',
    deadlineAt: 'time',
    startedAt: 'time',
    queuedMs: 'bigint',
    executionEndedAt: 'time',
    executingMs: 'bigint',
    lastProgressAt: 'time',
    clarificationId: 'text',
    principal: 'text',
    maxCostMicros: 'bigint',
    costCurrency: 'text',
    costMicros: 'bigint0',
    costUnknownMaxMicros: 'bigint0',
    costInFlightMicros: 'bigint0',
    lastSeq: 'bigint',
    subjectSeqs: 'json',
  }),
  messages: spec('messages', ['message_id'], {
    messageId: 'text',
    conversationId: 'text',
    clientMessageId: 'text',
    content: 'text',
    contentSha256: 'text',
    runId: 'text',
    admittedAt: 'time',
    lastSeq: 'bigint',
  }),
  passages: spec('passages', ['run_id', 'passage_id'], {
    runId: 'text',
    passageId: 'text',
    index: 'int',
    version: 'int',
    text: 'text',
    sha256: 'text',
    committedAt: 'time',
    lastSeq: 'bigint',
  }),
  toolCalls: spec('tool_calls', ['run_id', 'tool_call_id'], {
    runId: 'text',
    toolCallId: 'text',
    turn: 'int',
    name: 'text',
    argumentsText: 'text',
    status: 'text',
    errorCode: 'text',
    errorMessage: 'text',
    resultSha256: 'text',
    proposedAt: 'time',
    dispatchedAt: 'time',
    receiptAt: 'time',
    lateStatus: 'text',
    lateObservedAt: 'time',
    reconciledOutcome: 'text',
    reconciledBy: 'text',
    reconciledAt: 'time',
    lastSeq: 'bigint',
  }),
  modelTurns: spec('model_turns', ['run_id', 'turn'], {
    runId: 'text',
    turn: 'int',
    status: 'text',
    requestedAt: 'time',
    firstTextAt: 'time',
    endedAt: 'time',
    durationMs: 'bigint',
    finishReason: 'text',
    contentChars: 'int',
    toolCalls: 'int',
    promptTokens: 'int',
    completionTokens: 'int',
    errorKind: 'text',
    lastSeq: 'bigint',
  }),
} as const satisfies Record<string, TableSpec>;

/** A `runs` row with its per-subject checkpoint (K11). */
export type RunRowWithSeqs = RunRow & { subjectSeqs: Record<string, number> };

/** The row type of each table of {@link PROJECTION_COLUMNS}. */
export interface RowOf {
  runs: RunRowWithSeqs;
  messages: MessageRow;
  passages: PassageRow;
  toolCalls: ToolCallRow;
  modelTurns: ModelTurnRow;
}

const q = (name: string): string => `"${name}"`;

/** The select list of a table, every column aliased to its row property and read as its kind says. */
function selectList(t: TableSpec): string {
  return t.columns
    .map(([property, column, kind]) => {
      const c = `t.${q(column)}`;
      // (an ISO-8601 UTC string as Date#toISOString writes it, whatever the session's time zone)
      if (kind === 'time') return `to_char(${c} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as ${q(property)}`;
      if (kind === 'bigint') return `${c}::float8 as ${q(property)}`;
      if (kind === 'bigint0') return `coalesce(${c}, 0)::float8 as ${q(property)}`;
      return `${c} as ${q(property)}`;
    })
    .join(', ');
}

const selects = new Map<TableSpec, string>();

/**
 * Loads the rows of `table` whose primary key is one of `keys` (each key a tuple of the primary
 * key's values, as text), as plain rows: one statement, the keys passed as one JSON parameter.
 * `forUpdate` locks the rows (`SELECT ... FOR UPDATE`). Rows are returned in no particular order.
 */
export async function selectRows<K extends keyof RowOf>(
  tx: EntityManager,
  table: K,
  keys: readonly (readonly string[])[],
  forUpdate = false,
): Promise<RowOf[K][]> {
  if (keys.length === 0) return [];
  const t: TableSpec = PROJECTION_COLUMNS[table];
  let sql = selects.get(t);
  if (sql === undefined) {
    const keyList = t.key.map((k) => `t.${q(k)}`).join(', ');
    // each key value as its column's type, so the primary key's index serves the lookup
    const kindOf = (column: string) => t.columns.find(([, c]) => c === column)![2];
    const wanted = t.key.map((k, i) => (kindOf(k) === 'int' ? `(k ->> ${i})::integer` : `k ->> ${i}`)).join(', ');
    sql = `select ${selectList(t)} from ${q(t.table)} t where (${keyList}) in (select ${wanted} from jsonb_array_elements(?::jsonb) as k)`;
    selects.set(t, sql);
  }
  return tx.execute<RowOf[K][]>(forUpdate ? `${sql} for update of t` : sql, [JSON.stringify(keys)]);
}

const upserts = new Map<TableSpec, string>();

/** The `INSERT ... ON CONFLICT ... DO UPDATE` of a table, its rows as one JSON parameter. */
function upsertOf(t: TableSpec): string {
  let sql = upserts.get(t);
  if (sql === undefined) {
    const columns = t.columns.map(([, column]) => q(column));
    const updated = t.columns.filter(([, column]) => !t.key.includes(column)).map(([, column]) => `${q(column)} = excluded.${q(column)}`);
    sql =
      `insert into ${q(t.table)} (${columns.join(', ')}) select ${columns.join(', ')} from jsonb_populate_recordset(null::${q(t.table)}, ?::jsonb) ` +
      `on conflict (${t.key.map(q).join(', ')}) do update set ${updated.join(', ')}`;
    upserts.set(t, sql);
  }
  return sql;
}

/** The changed rows of each table, for {@link upsertRows}. */
export type RowsByTable = { [K in keyof RowOf]?: readonly RowOf[K][] };

/**
 * Writes the rows of every table in ONE statement (one round trip): per table, the rows are
 * inserted, or every column updated where the primary key exists (`INSERT ... ON CONFLICT ... DO
 * UPDATE`), each in a data-modifying `WITH` query. The rows of a table travel as one JSON
 * parameter and PostgreSQL converts each value to its column's type (`jsonb_populate_recordset`).
 * Each primary key at most once per table; a table without rows is not written.
 */
export async function upsertRows(tx: EntityManager, rows: RowsByTable): Promise<void> {
  const parts: string[] = [];
  const params: string[] = [];
  for (const table of Object.keys(PROJECTION_COLUMNS) as (keyof RowOf)[]) {
    const list = rows[table] ?? [];
    if (list.length === 0) continue;
    const t: TableSpec = PROJECTION_COLUMNS[table];
    parts.push(`w${parts.length} as (${upsertOf(t)})`);
    params.push(
      JSON.stringify(
        list.map((row) => {
          const record: Record<string, unknown> = {};
          const values = row as unknown as Record<string, unknown>;
          for (const [property, column] of t.columns) record[column] = values[property] ?? null;
          return record;
        }),
      ),
    );
  }
  if (parts.length === 0) return;
  await tx.execute(`with ${parts.join(', ')} select 1`, params, 'run');
}

/**
 * The stored checkpoints (`runs.last_seq`, `runs.subject_seqs`, K11) of those of `runIds` that
 * have a row, in one plain query (no entities): a Run without a row is absent from the map.
 */
export async function selectCheckpoints(em: EntityManager, runIds: readonly string[]): Promise<Map<string, RunCheckpoint>> {
  const out = new Map<string, RunCheckpoint>();
  if (runIds.length === 0) return out;
  const rows = await em.execute<{ runId: string; lastSeq: number; subjectSeqs: SubjectSeqs | null }[]>(
    'select "run_id" as "runId", "last_seq"::float8 as "lastSeq", "subject_seqs" as "subjectSeqs" from "runs" where "run_id" in (select jsonb_array_elements_text(?::jsonb))',
    [JSON.stringify(runIds)],
  );
  for (const row of rows) out.set(row.runId, { lastSeq: row.lastSeq, subjectSeqs: row.subjectSeqs ?? {} });
  return out;
}
