/**
 * Several projector replicas start at once on a database that lacks the migrations (the first
 * `kubectl apply -k` of deploy/k8s starts three): each one migrates at start-up, and every one
 * must start. Without a lock, the replicas that lose the race fail their start with
 * `duplicate key value violates unique constraint "pg_type_typname_nsp_index"` (two CREATE TABLE
 * of the same table) and are restarted by Kubernetes.
 */
import { describe, expect, it } from '@jest/globals';
import { createProjectionOrm, databaseUrlWith, dropDatabase, ensureDatabase, migrateUp } from '@runplane/projections';
import { adminUrl, uniqueTag } from './fixtures.js';

describe('migrateUp from several processes at once', () => {
  it('applies each migration once and lets every replica start', async () => {
    const db = `rp_test_migrace_${uniqueTag()}`;
    await ensureDatabase(adminUrl, db);
    const url = databaseUrlWith(adminUrl, db);
    // one ORM (pool) per replica, as in three projector processes
    const orms = await Promise.all([0, 1, 2].map(() => createProjectionOrm({ databaseUrl: url })));
    try {
      const results = await Promise.allSettled(orms.map((orm) => migrateUp(orm)));
      const failures = results.flatMap((r) => (r.status === 'rejected' ? [String(r.reason)] : []));
      expect(failures).toEqual([]);
      const applied = results.map((r) => (r.status === 'fulfilled' ? r.value : []));
      // exactly one replica applied them all, in order; the others found nothing left to do
      const appliers = applied.filter((names) => names.length > 0);
      expect(appliers).toHaveLength(1);
      const rows = await orms[0]!.em.getConnection().execute<{ name: string }[]>('select name from mikro_orm_migrations order by id');
      expect(rows.map((r) => r.name)).toEqual(appliers[0]);
      expect(await migrateUp(orms[1]!)).toEqual([]);
    } finally {
      await Promise.all(orms.map((orm) => orm.close()));
      await dropDatabase(adminUrl, db);
    }
  }, 60_000);
});
