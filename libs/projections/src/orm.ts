/**
 * The projection ORM: MikroORM with the PostgreSQL driver, the projection entities and the
 * migrations of `@runplane/migrations` passed as an explicit `migrationsList` (no globbing).
 */
import { Migrator } from '@mikro-orm/migrations';
import { MikroORM } from '@mikro-orm/postgresql';
import pg from 'pg';
import { migrationsList } from '#migrations';
import { projectionEntities } from './entities.js';

export interface ProjectionOrmOptions {
  /** e.g. `postgresql://postgres@127.0.0.1:5432/runplane`; the database must exist. */
  databaseUrl: string;
  /** Connection pool size (default 5). */
  poolMax?: number;
  /** Log SQL (default false). */
  debug?: boolean;
}

/**
 * Creates a connected MikroORM (PostgreSQL driver) over the projection tables. Call
 * {@link migrateUp} before use; close with `orm.close()`.
 * @throws when the database is unreachable or does not exist.
 */
export async function createProjectionOrm(opts: ProjectionOrmOptions): Promise<MikroORM> {
  const orm = await MikroORM.init({
    clientUrl: opts.databaseUrl,
    entities: projectionEntities,
    extensions: [Migrator],
    migrations: {
      migrationsList,
      tableName: 'mikro_orm_migrations',
      transactional: true,
      allOrNothing: true,
      // the migrations are code; no snapshot file is read or written next to them
      snapshot: false,
      snapshotOnMigrate: false,
      silent: true,
    },
    pool: { min: 0, max: opts.poolMax ?? 5 },
    debug: opts.debug ?? false,
    allowGlobalContext: false,
  });
  return orm;
}

/** Key of the advisory lock that serialises {@link migrateUp} across processes on one database. */
export const MIGRATION_LOCK_KEY = 0x52504d49; // 'RPMI'

/**
 * Applies every pending projection migration; idempotent (already applied ones are recorded in
 * `mikro_orm_migrations`). Returns the names applied by this call.
 *
 * Several processes may call it at once on one database (projector replicas starting together):
 * each first takes a session advisory lock on a connection of its own, so one process creates the
 * migrations table and applies the migrations while the others wait, then find nothing left to do,
 * instead of failing on two CREATE TABLE of one table. The lock is not held in a transaction: the
 * migrator checks and creates its table on other connections of the pool before its own
 * transaction, and the embedded database (PGlite) runs one transaction at a time for all
 * connections. A process that dies holding it ends its session, which releases it.
 * @throws when PostgreSQL is unreachable or a migration fails (nothing of the run is kept).
 */
export async function migrateUp(orm: MikroORM): Promise<string[]> {
  const lock = new pg.Client({ connectionString: orm.config.get('clientUrl') });
  // a connection lost while migrating surfaces through the migrator's own queries
  lock.on('error', () => undefined);
  await lock.connect();
  try {
    await lock.query('select pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    const applied = await orm.migrator.up();
    return applied.map((m) => m.name);
  } finally {
    await lock.end(); // ends the session, which releases the lock
  }
}
