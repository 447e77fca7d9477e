import { Migration } from '@mikro-orm/migrations';

/**
 * Adds to `runs` the clarification a Run asked the user (K2): the id of its
 * `clarification.requested`, null for a Run that asked none. A reply naming it starts a new Run.
 * Null for rows projected before it; a rebuild fills it from events.
 */
export class Migration20261130161000_run_clarification extends Migration {
  override name = 'Migration20261130161000_run_clarification';

  override up(): void {
    this.addSql(`alter table "runs" add column "clarification_id" text null`);
  }

  override down(): void {
    this.addSql(`alter table "runs" drop column "clarification_id"`);
  }
}
