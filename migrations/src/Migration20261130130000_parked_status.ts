import { Migration } from '@mikro-orm/migrations';

/**
 * Allows the parked statuses of a Run (K10): `awaiting_human` (a question for a human is
 * pending) and `awaiting_child` (a child Run has not settled). Only the check constraint
 * changes; no row is rewritten.
 */
export class Migration20261130130000_parked_status extends Migration {
  override name = 'Migration20261130130000_parked_status';

  override up(): void {
    this.addSql('alter table "runs" drop constraint if exists "runs_status_check"');
    this.addSql(
      `alter table "runs" add constraint "runs_status_check" check ("status" in ('admitted', 'running', 'awaiting_human', 'awaiting_child', 'finishing', 'settled'))`,
    );
  }

  override down(): void {
    this.addSql('alter table "runs" drop constraint if exists "runs_status_check"');
    this.addSql(`alter table "runs" add constraint "runs_status_check" check ("status" in ('admitted', 'running', 'finishing', 'settled'))`);
  }
}
