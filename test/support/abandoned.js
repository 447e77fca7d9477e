// What a test run killed at once leaves behind, and its removal by a later run's global set-up
// (test/support/global-setup.js). A file's stack drops its database (`rp_<tag>`) and removes its
// folders (`rp-*` under the system's temporary folder) when it stops; a Ctrl-C or a kill of the whole
// run stops the workers before that, and what they made stays, for every later session on the
// machine to see. No test run lasts 12 hours, so what is older than that and unused is abandoned.
// Plain JavaScript: the global set-up loads it before any transform applies.
import { readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';

/** Hours after which a test database or folder nobody uses counts as abandoned. */
export const ABANDONED_AFTER_H = 12;

/** The test databases: `rp_` and the lower-case letters, digits and underscores of a file's tag. */
export const TEST_DATABASE = /^rp_[a-z0-9_]+$/;

/**
 * The test folders under the temporary folder: `mkdtemp` of `rp-<name>-` (six characters after it),
 * the test nats-servers' `rp-nats-` and `rp-nats-shared-` among them.
 */
export const TEST_FOLDER = /^rp-[a-z0-9-]*[A-Za-z0-9]{6}$/;

/**
 * Drops the databases whose name matches `pattern`, that no session is connected to, and that were
 * created more than `olderThanH` hours ago (the modification time of the database's `PG_VERSION`,
 * written once when it is created; reading it takes a superuser, as the tests' `postgres` is).
 * @param url a connection to the server's maintenance database, e.g. `postgresql://postgres@127.0.0.1:5432/postgres`.
 * @returns the names dropped; none when the server cannot be reached (the tests that need it fail
 *   with their own message).
 */
export async function dropAbandonedDatabases(url, { olderThanH = ABANDONED_AFTER_H, pattern = TEST_DATABASE } = {}) {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  try {
    await client.connect();
  } catch {
    return [];
  }
  const dropped = [];
  try {
    const { rows } = await client.query(
      `select d.datname from pg_database d
        where not d.datistemplate
          and not exists (select 1 from pg_stat_activity a where a.datname = d.datname)
          and (pg_stat_file('base/' || d.oid || '/PG_VERSION')).modification < now() - make_interval(secs => $1)`,
      [olderThanH * 3600],
    );
    for (const { datname } of rows) {
      if (!pattern.test(datname) || !TEST_DATABASE.test(datname)) continue;
      try {
        // a session that connected since the query above is refused the drop: the database stays
        await client.query(`drop database if exists "${datname}"`);
        dropped.push(datname);
      } catch {
        // in use again, or gone meanwhile
      }
    }
  } catch {
    // a server that refuses pg_stat_file (not a superuser): nothing is swept
  } finally {
    await client.end().catch(() => undefined);
  }
  return dropped;
}

/**
 * Removes the folders of `dir` whose name matches `pattern` and that were last changed more than
 * `olderThanH` hours ago.
 * @returns the names removed.
 */
export function removeAbandonedFolders(dir, { olderThanH = ABANDONED_AFTER_H, pattern = TEST_FOLDER } = {}) {
  const cutoff = Date.now() - olderThanH * 3600_000;
  const removed = [];
  let names;
  try {
    names = readdirSync(dir);
  } catch {
    return removed;
  }
  for (const name of names) {
    if (!pattern.test(name)) continue;
    const path = join(dir, name);
    try {
      const s = statSync(path);
      if (!s.isDirectory() || s.mtimeMs >= cutoff) continue;
      rmSync(path, { recursive: true, force: true });
      removed.push(name);
    } catch {
      // gone meanwhile, or not ours
    }
  }
  return removed;
}
