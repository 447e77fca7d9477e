/**
 * Creating and dropping projection databases (for rebuilds and tests), over a plain `pg` client
 * connected to a maintenance database. Names are restricted to safe identifiers.
 */
import pg from 'pg';

const NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/** @throws Error when `name` is not a lowercase identifier of at most 63 characters. */
export function assertDatabaseName(name: string): void {
  if (!NAME.test(name)) throw new Error(`invalid database name "${name}": use [a-z_][a-z0-9_]*, at most 63 characters`);
}

/** The database name in a `postgresql://` URL (its path), e.g. `runplane`. */
export function databaseNameOf(url: string): string {
  const name = decodeURIComponent(new URL(url).pathname.replace(/^\//, ''));
  if (!name) throw new Error(`database URL ${redact(url)} names no database`);
  return name;
}

/** `url` with its database replaced by `name` (host, credentials and query kept). */
export function databaseUrlWith(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${encodeURIComponent(name)}`;
  return u.toString();
}

/** `url` with its password masked, for messages. */
export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}

async function withAdmin<T>(adminUrl: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminUrl });
  try {
    await client.connect();
  } catch (e) {
    throw new Error(`cannot connect to PostgreSQL at ${redact(adminUrl)}: ${String((e as Error)?.message ?? e)}`, { cause: e });
  }
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * True when database `name` exists on the server of `adminUrl` (any URL of that server whose
 * database exists, e.g. `.../postgres`). Creates nothing.
 * @throws Error naming the server when it cannot be reached or refuses the query.
 */
export async function databaseExists(adminUrl: string, name: string): Promise<boolean> {
  return withAdmin(adminUrl, async (client) => Boolean((await client.query('select 1 from pg_database where datname = $1', [name])).rowCount));
}

/**
 * Creates database `name` unless it exists. `adminUrl` is any URL of the same server whose
 * database already exists (e.g. `.../postgres`). Returns true when it was created now.
 * @throws on an invalid name or when the server refuses.
 */
export async function ensureDatabase(adminUrl: string, name: string): Promise<boolean> {
  assertDatabaseName(name);
  return withAdmin(adminUrl, async (client) => {
    const found = await client.query('select 1 from pg_database where datname = $1', [name]);
    if (found.rowCount) return false;
    try {
      await client.query(`create database "${name}"`);
      return true;
    } catch (e) {
      if ((e as { code?: string }).code === '42P04') return false; // created concurrently
      throw e;
    }
  });
}

/**
 * Drops database `name` if it exists, terminating its open connections (`WITH (FORCE)`,
 * PostgreSQL 13+). Returns true when a database was dropped.
 */
export async function dropDatabase(adminUrl: string, name: string): Promise<boolean> {
  assertDatabaseName(name);
  return withAdmin(adminUrl, async (client) => {
    const found = await client.query('select 1 from pg_database where datname = $1', [name]);
    if (!found.rowCount) return false;
    await client.query(`drop database if exists "${name}" with (force)`);
    return true;
  });
}
