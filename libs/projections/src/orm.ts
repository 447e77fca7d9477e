/**
 * The projection ORM: MikroORM with the PostgreSQL driver, the projection entities and the
 * migrations of `@runplane/migrations` passed as an explicit `migrationsList` (no globbing).
 */
import { Migrator } from '@mikro-orm/migrations';
import { MikroORM } from '@mikro-orm/postgresql';
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

/**
 * Applies every pending projection migration; idempotent (already applied ones are recorded in
 * `mikro_orm_migrations`). Returns the names applied by this call.
 */
export async function migrateUp(orm: MikroORM): Promise<string[]> {
  const applied = await orm.migrator.up();
  return applied.map((m) => m.name);
}
