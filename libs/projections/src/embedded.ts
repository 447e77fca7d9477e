/**
 * The demo's fallback when PostgreSQL is not reachable: an embedded PostgreSQL (PGlite, in WASM,
 * in this process). Migrations run through MikroORM's PGlite driver; the same instance is then
 * served over the PostgreSQL wire protocol on a loopback port, so the service processes connect
 * with their ordinary PostgreSQL driver. For demos only: one process holds the data, and PGlite
 * serialises queries from all connections.
 */
import { Migrator } from '@mikro-orm/migrations';
import { migrationsList } from '#migrations';
import { projectionEntities } from './entities.js';

export interface EmbeddedDatabase {
  /** PostgreSQL URL of the served instance, e.g. `postgresql://postgres@127.0.0.1:54321/postgres`. */
  url: string;
  /** Migration names applied at start. */
  migrated: string[];
  close(): Promise<void>;
}

/**
 * Starts PGlite with its data in `dataDir` (a folder, kept between runs; `memory://` for none),
 * applies the projection migrations through MikroORM's PGlite driver, and serves it on
 * `127.0.0.1:port` (0 = any free port).
 * @throws when PGlite cannot open the folder or the port is taken.
 */
export async function startEmbeddedDatabase(opts: { dataDir: string; port?: number }): Promise<EmbeddedDatabase> {
  // Loaded on first use: PGlite (WASM) and its drivers are only for the demo's fallback, and would
  // otherwise sit in the memory of every service that imports the projections (the projector).
  const [{ PGlite }, { PGLiteSocketServer }, { MikroORM: PgliteMikroORM }] = await Promise.all([
    import('@electric-sql/pglite'),
    import('@electric-sql/pglite-socket'),
    import('@mikro-orm/pglite'),
  ]);
  const db = await PGlite.create(opts.dataDir);
  const orm = await PgliteMikroORM.init({
    dbName: 'postgres',
    entities: projectionEntities,
    extensions: [Migrator],
    driverOptions: { pglite: db },
    migrations: { migrationsList, tableName: 'mikro_orm_migrations', snapshot: false, snapshotOnMigrate: false, silent: true },
    allowGlobalContext: false,
  });
  let migrated: string[];
  try {
    migrated = (await orm.migrator.up()).map((m) => m.name);
  } finally {
    await orm.close(); // does not close a user-supplied PGlite instance
  }
  const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: opts.port ?? 0, maxConnections: 64 });
  await server.start();
  const address = server.getServerConn();
  const port = Number(address.split(':').pop());
  return {
    url: `postgresql://postgres@127.0.0.1:${port}/postgres`,
    migrated,
    async close() {
      await server.stop();
      await db.close();
    },
  };
}
