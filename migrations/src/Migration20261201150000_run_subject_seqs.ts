import { Migration } from '@mikro-orm/migrations';

/**
 * Adds to `runs` the last sequence the projection applied on each subject of the Run
 * (`{"admission": 1, "runtime": 7, ...}`): what the projector checks each event's back-link
 * against, so a missed event is seen as a gap instead of being skipped (K11). `{}` on rows
 * projected before it: the first event checked against it reports a gap and the projector
 * re-projects that Run from its log, which fills it; a rebuild fills it from events.
 */
export class Migration20261201150000_run_subject_seqs extends Migration {
  override name = 'Migration20261201150000_run_subject_seqs';

  override up(): void {
    // existing rows get `{}`; new rows always carry the value the projector computed (no default)
    this.addSql(`alter table "runs" add column "subject_seqs" jsonb not null default '{}'::jsonb`);
    this.addSql(`alter table "runs" alter column "subject_seqs" drop default`);
  }

  override down(): void {
    this.addSql(`alter table "runs" drop column "subject_seqs"`);
  }
}
