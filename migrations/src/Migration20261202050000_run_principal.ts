import { Migration } from '@mikro-orm/migrations';

/**
 * Adds to `runs` who submitted the Run (`run.admitted` `principal`, the verified token's `sub`),
 * for `GET /v1/runs`: a principal lists its own Runs only. Null with authentication disabled and
 * on rows projected before it (such Runs are listed to admins only); a rebuild fills it from
 * events. The two indexes serve the list's order (newest admission first, then id), for one
 * principal and for all.
 */
export class Migration20261202050000_run_principal extends Migration {
  override name = 'Migration20261202050000_run_principal';

  override up(): void {
    this.addSql(`alter table "runs" add column "principal" text null`);
    this.addSql(`create index "runs_principal_admitted_idx" on "runs" ("principal", "admitted_at" desc, "run_id" desc)`);
    this.addSql(`create index "runs_admitted_idx" on "runs" ("admitted_at" desc, "run_id" desc)`);
  }

  override down(): void {
    this.addSql(`drop index if exists "runs_admitted_idx"`);
    this.addSql(`drop index if exists "runs_principal_admitted_idx"`);
    this.addSql(`alter table "runs" drop column "principal"`);
  }
}
