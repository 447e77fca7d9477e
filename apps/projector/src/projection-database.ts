/**
 * The projection database as a Nest provider: connects MikroORM (PostgreSQL), runs the
 * projection migrations on start-up (idempotent) and closes the pool when the application has
 * shut down (after the event consumer stopped).
 */
import { Logger, Module, type OnApplicationShutdown } from '@nestjs/common';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createProjectionOrm, databaseNameOf, databaseUrlWith, ensureDatabase, migrateUp, redact } from '@runplane/projections';
import { configToken } from '@runplane/service-kit';
import { ProjectorConfig } from './config.js';

/** Holds the connected, migrated projection ORM. */
export class ProjectionDatabase {
  constructor(readonly orm: MikroORM) {}

  /** Resolves when PostgreSQL answers `select 1`; rejects otherwise. */
  async ping(): Promise<void> {
    await this.orm.em.fork().execute('select 1');
  }
}

/**
 * Connects to `DATABASE_URL` (creating the database first when `PROJECTOR_ENSURE_DATABASE` is
 * true and it is missing), applies pending migrations and returns the provider value.
 * @throws Error naming the database (password redacted) when PostgreSQL is unreachable or a
 *   migration fails: the process does not start.
 */
export async function connectProjectionDatabase(
  cfg: Pick<ProjectorConfig, 'DATABASE_URL' | 'PROJECTOR_ENSURE_DATABASE'>,
  logger = new Logger('ProjectionDatabase'),
): Promise<ProjectionDatabase> {
  if (cfg.PROJECTOR_ENSURE_DATABASE === 'true') {
    const database = databaseNameOf(cfg.DATABASE_URL);
    try {
      if (await ensureDatabase(databaseUrlWith(cfg.DATABASE_URL, 'postgres'), database)) logger.log({ database }, 'created the projection database');
    } catch (e) {
      logger.warn({ database, reason: (e as Error).message }, 'could not ensure the projection database exists');
    }
  }
  const where = redact(cfg.DATABASE_URL);
  const orm = await createProjectionOrm({ databaseUrl: cfg.DATABASE_URL }).catch((e: unknown) => {
    throw new Error(`cannot connect to PostgreSQL at ${where}: ${(e as Error)?.message ?? String(e)}`, { cause: e });
  });
  try {
    const applied = await migrateUp(orm);
    if (applied.length) logger.log({ migrations: applied, database: where }, 'applied projection migrations');
  } catch (e) {
    await orm.close();
    throw new Error(`cannot connect to or migrate the projection database at ${where}: ${(e as Error)?.message ?? String(e)}`, { cause: e });
  }
  return new ProjectionDatabase(orm);
}

/** Provides the connected {@link ProjectionDatabase} (needs `ProjectorConfig` from the bootstrap) and closes it on shutdown. */
@Module({
  providers: [
    { provide: ProjectionDatabase, useFactory: (cfg: ProjectorConfig) => connectProjectionDatabase(cfg), inject: [configToken(ProjectorConfig)] },
  ],
  exports: [ProjectionDatabase],
})
export class ProjectionDatabaseModule implements OnApplicationShutdown {
  constructor(private readonly db: ProjectionDatabase) {}

  async onApplicationShutdown(): Promise<void> {
    await this.db.orm.close();
  }
}
