/**
 * Rebuilding the projections from the log alone, and checking that the rebuild equals the live
 * projections (K11: "Projections are rebuilt from the log alone and come out identical").
 */
import type { MikroORM } from '@mikro-orm/postgresql';
import type { StoredEvent } from '@runplane/contracts';
import { applyStoredEvents, OrphanEventError } from './apply.js';
import { assertDatabaseName, databaseExists, databaseNameOf, databaseUrlWith, dropDatabase, ensureDatabase, redact } from './database.js';
import { createProjectionOrm, migrateUp } from './orm.js';
import { diffProjectionDumps, dumpProjectionRows, type ProjectionDump } from './queries.js';

/** The rows of `dump` that belong to one of `runIds` (every projection table has `run_id`). */
function onlyRunsOf(dump: ProjectionDump, runIds: ReadonlySet<string>): ProjectionDump {
  return Object.fromEntries(
    Object.entries(dump).map(([table, rows]) => [table, rows.filter((row) => runIds.has(String(row.run_id)))]),
  ) as ProjectionDump;
}

/** Anything that can replay every stored event in stream order (an `EventLog`). */
export interface ReplayableLog {
  readAll(): AsyncIterable<StoredEvent>;
}

export interface RebuildOptions {
  log: ReplayableLog;
  /** URL of the LIVE projection database; the rebuild goes to another database on the same server. */
  databaseUrl: string;
  /** Name of the fresh database (default `<live db name>_rebuild_<UTC yyyymmddhhmmssSSS>`); must not exist. */
  targetDatabase?: string;
  /** URL of an existing maintenance database for CREATE/DROP (default: the live URL with database `postgres`). */
  adminUrl?: string;
  /** Clock for the default name only (never for row contents). */
  now?: () => Date;
  /** Events per transaction of the replay (default 500). */
  batchSize?: number;
  /**
   * Only these Runs: events of other Runs are not applied, and only rows of these Runs (`run_id`)
   * are compared, in both databases (`runplane audit --run <id> --projections`). Default: every Run,
   * every row.
   */
  runIds?: ReadonlySet<string>;
  /**
   * Stops the rebuild (the CLI aborts it on SIGINT or SIGTERM): the replay ends at its next event,
   * the fresh database is dropped and the rebuild throws. An upgrade trial's rebuild killed while
   * it crawled left its `_rebuild_` database behind.
   */
  signal?: AbortSignal;
}

export interface RebuildResult {
  /** Name of the rebuilt database (left in place; drop it with `dropDatabase`). */
  database: string;
  /** Events applied to the rebuilt projections (the events read, less the skipped ones). */
  eventsApplied: number;
  /**
   * Events that could not apply and were skipped, one line each (an event of a Run that was never
   * admitted: a forgery, K11); the live projector skips the same ones.
   */
  skipped: string[];
  /** Highest stream sequence replayed (0 for an empty log). */
  lastSeq: number;
  /** True when every row of the projection tables is equal in the live and rebuilt databases. */
  identicalToLive: boolean;
  /** One line per difference (table, key, column, live vs rebuilt); see `diffProjectionDumps`. */
  differences: string[];
}

const stamp = (d: Date): string =>
  d
    .toISOString()
    .replace(/[^0-9]/g, '')
    .slice(0, 17);

/**
 * Creates a FRESH database, migrates it, replays `log.readAll()` (with `runIds`, only those Runs' events) into it in stream order through
 * the same {@link applyStoredEvents} as the live projector, `batchSize` events per transaction,
 * then compares every row of the projection tables (with `runIds`, every row of those Runs) with the live database (K11). Batching changes only
 * the number of transactions: a batch yields the rows of applying its events one by one.
 * The comparison is meaningful when the live projector has caught up with the log and no event is
 * appended meanwhile; otherwise the lag shows up as differences.
 * Reads never create what they read (K11): when the live database does not exist, nothing is
 * created, and a rebuild that fails leaves no copy behind.
 * A stop through `signal` drops the fresh database too.
 * @throws Error naming the database when the live database does not exist, naming the server when
 *   PostgreSQL cannot be used, when the target database already exists (a rebuild never reuses
 *   one), on an invalid name, or when an event cannot be applied or the comparison fails (the
 *   rebuilt database is then dropped).
 */
export async function rebuildProjections(opts: RebuildOptions): Promise<RebuildResult> {
  const liveName = databaseNameOf(opts.databaseUrl);
  const database = opts.targetDatabase ?? `${liveName}_rebuild_${stamp((opts.now ?? (() => new Date()))())}`;
  assertDatabaseName(database);
  if (database === liveName) throw new Error(`rebuild target "${database}" is the live database`);
  const adminUrl = opts.adminUrl ?? databaseUrlWith(opts.databaseUrl, 'postgres');
  if (!(await databaseExists(adminUrl, liveName))) {
    throw new Error(
      `the live projection database "${liveName}" does not exist on ${redact(databaseUrlWith(opts.databaseUrl, ''))} (DATABASE_URL): nothing to compare a rebuild with; nothing was created`,
    );
  }
  if (!(await ensureDatabase(adminUrl, database))) {
    throw new Error(`rebuild target database "${database}" already exists; a rebuild needs a fresh database`);
  }

  let eventsApplied = 0;
  const skipped: string[] = [];
  let lastSeq = 0;
  const rebuiltOrm = await createProjectionOrm({ databaseUrl: databaseUrlWith(opts.databaseUrl, database) });
  try {
    await migrateUp(rebuiltOrm);
    const batchSize = Math.max(1, opts.batchSize ?? 500);
    let batch: StoredEvent[] = [];
    const orphans = new Set<string>();
    const applyBatch = async () => {
      for (;;) {
        batch = batch.filter((s) => !orphans.has(s.event.runId));
        try {
          for (const result of await applyStoredEvents(rebuiltOrm.em, batch, { checkContinuity: false }))
            if (result.status === 'applied') eventsApplied++;
          break;
        } catch (e) {
          if (!(e instanceof OrphanEventError)) throw e;
          // the batch rolled back: leave the Run out (now and later) and apply the others again
          orphans.add(e.stored.event.runId);
          skipped.push(`${e.message}: skipped`);
        }
      }
      batch = [];
    };
    const stopped = () => {
      if (opts.signal?.aborted) throw new Error(`the rebuild was stopped after ${eventsApplied} event(s); its database ${database} was dropped`);
    };
    stopped();
    for await (const stored of opts.log.readAll()) {
      stopped();
      if (opts.runIds && !opts.runIds.has(stored.event.runId)) continue;
      batch.push(stored);
      lastSeq = Math.max(lastSeq, stored.seq);
      if (batch.length >= batchSize) await applyBatch();
    }
    await applyBatch();
  } catch (e) {
    await rebuiltOrm.close().catch(() => undefined);
    await dropDatabase(adminUrl, database).catch(() => undefined);
    throw e;
  }

  let liveOrm: MikroORM | null = null;
  try {
    liveOrm = await createProjectionOrm({ databaseUrl: opts.databaseUrl });
    const only = (dump: ProjectionDump): ProjectionDump => (opts.runIds ? onlyRunsOf(dump, opts.runIds) : dump);
    const [live, rebuilt] = [only(await dumpProjectionRows(liveOrm)), only(await dumpProjectionRows(rebuiltOrm))];
    const differences = diffProjectionDumps(live, rebuilt);
    await liveOrm.close();
    await rebuiltOrm.close();
    return { database, eventsApplied, skipped, lastSeq, identicalToLive: differences.length === 0, differences };
  } catch (e) {
    // nothing to inspect without a comparison: no copy is left behind
    await liveOrm?.close().catch(() => undefined);
    await rebuiltOrm.close().catch(() => undefined);
    await dropDatabase(adminUrl, database).catch(() => undefined);
    throw new Error(`comparing the rebuild with the live database "${liveName}": ${String((e as Error)?.message ?? e)}`, { cause: e });
  }
}
