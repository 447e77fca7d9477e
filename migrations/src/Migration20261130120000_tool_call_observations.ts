import { Migration } from '@mikro-orm/migrations';

/**
 * Adds to `tool_calls` what an operator needs about an `unknown` call (K5): the late observation
 * of its real outcome (`tool.call.late_observed`) and the operator's reconciliation
 * (`tool.call.reconciled`: outcome, who, when). Both sit beside the receipt's `status`, which
 * they never rewrite. Nullable, no defaults that read a clock: a rebuild fills them from events.
 */
export class Migration20261130120000_tool_call_observations extends Migration {
  override name = 'Migration20261130120000_tool_call_observations';

  override up(): void {
    this.addSql(`alter table "tool_calls"
      add column "late_status" text null check ("late_status" in ('succeeded', 'failed')),
      add column "late_observed_at" timestamptz null,
      add column "reconciled_outcome" text null check ("reconciled_outcome" in ('succeeded', 'failed', 'not_executed')),
      add column "reconciled_by" text null,
      add column "reconciled_at" timestamptz null`);
  }

  override down(): void {
    this.addSql(`alter table "tool_calls"
      drop column "late_status",
      drop column "late_observed_at",
      drop column "reconciled_outcome",
      drop column "reconciled_by",
      drop column "reconciled_at"`);
  }
}
