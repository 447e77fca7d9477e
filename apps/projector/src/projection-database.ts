/**
 * The projection database as a Nest provider: connects MikroORM (PostgreSQL), runs the
 * projection migrations on start-up (idempotent) and closes the pool when the application has
 * shut down (after the event consumer stopped).
 */
import { Logger, Module, type OnApplicationShutdown } from '@nestjs/common';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createProjectionOrm, databaseNameOf, databaseUrlWith, ensureDatabase, migrateUp, redact } from '@runplane/projections';
import { loadProjectorConfig } from './config.js';

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
 * @throws when PostgreSQL is unreachable or a migration fails: the process does not start.
 */
export async function connectProjectionDatabase(logger = new Logger('ProjectionDatabase')): Promise<ProjectionDatabase> {
  const cfg = loadProjectorConfig();
  if (cfg.PROJECTOR_ENSURE_DATABASE === 'true') {
    const name = databaseNameOf(cfg.DATABASE_URL);
    try {
      if (await ensureDatabase(databaseUrlWith(cfg.DATABASE_URL, 'postgres'), name)) logger.log(`created database ${name}`);
    } catch (e) {
      logger.warn(`could not ensure database ${name} exists: ${(e as Error).message}`);
    }
  }
  const orm = await createProjectionOrm({ databaseUrl: cfg.DATABASE_URL });
  try {
    const applied = await migrateUp(orm);
    if (applied.length) logger.log(`applied migrations ${applied.join(', ')} to ${redact(cfg.DATABASE_URL)}`);
  } catch (e) {
    await orm.close();
    throw e;
  }
  return new ProjectionDatabase(orm);
}

@Module({
  providers: [{ provide: ProjectionDatabase, useFactory: () => connectProjectionDatabase() }],
  exports: [ProjectionDatabase],
})
export class ProjectionDatabaseModule implements OnApplicationShutdown {
  constructor(private readonly db: ProjectionDatabase) {}

  async onApplicationShutdown(): Promise<void> {
    await this.db.orm.close();
  }
}
