import { Migration } from '@mikro-orm/migrations';

/**
 * An index for admission's per-principal quotas (`quotaUsageOf`): the Runs of a principal not
 * settled yet, counted on every new admission while a concurrency quota is set. Partial, so it
 * holds only the Runs in flight, however many a principal ran before. The hourly count uses
 * `runs_principal_admitted_idx`.
 */
export class Migration20261202140000_run_quota_index extends Migration {
  override name = 'Migration20261202140000_run_quota_index';

  override up(): void {
    this.addSql(`create index "runs_principal_active_idx" on "runs" ("principal") where "status" <> 'settled'`);
  }

  override down(): void {
    this.addSql(`drop index if exists "runs_principal_active_idx"`);
  }
}
