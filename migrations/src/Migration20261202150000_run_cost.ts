import { Migration } from '@mikro-orm/migrations';

/**
 * Adds the Run's money to `runs` (K7): its money limit and currency, the cost measured from
 * reported usage, the upper bound of unknown usage (in flight included) and the reservation of
 * the turn in flight, all integer micro-units. Rows projected before it hold nulls (read as 0 and null); a
 * rebuild fills them from events.
 */
export class Migration20261202150000_run_cost extends Migration {
  override name = 'Migration20261202150000_run_cost';

  override up(): void {
    this.addSql(`alter table "runs" add column "max_cost_micros" bigint null`);
    this.addSql(`alter table "runs" add column "cost_currency" text null`);
    this.addSql(`alter table "runs" add column "cost_micros" bigint null`);
    this.addSql(`alter table "runs" add column "cost_unknown_max_micros" bigint null`);
    this.addSql(`alter table "runs" add column "cost_in_flight_micros" bigint null`);
  }

  override down(): void {
    for (const c of ['cost_in_flight_micros', 'cost_unknown_max_micros', 'cost_micros', 'cost_currency', 'max_cost_micros'])
      this.addSql(`alter table "runs" drop column "${c}"`);
  }
}
