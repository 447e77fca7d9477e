import { Migration } from '@mikro-orm/migrations';

/**
 * Adds to `runs` the tokens measured and the count of model requests whose usage is unknown (no
 * usage chunk, a failed or cut request, a dead process): unknown usage is counted, never summed
 * as 0 tokens (K9). Defaults 0 for rows projected before it; a rebuild fills them from events.
 */
export class Migration20261130140000_run_usage extends Migration {
  override name = 'Migration20261130140000_run_usage';

  override up(): void {
    this.addSql(`alter table "runs"
      add column "prompt_tokens" integer not null default 0,
      add column "completion_tokens" integer not null default 0,
      add column "unknown_usage_turns" integer not null default 0`);
  }

  override down(): void {
    this.addSql(`alter table "runs"
      drop column "prompt_tokens",
      drop column "completion_tokens",
      drop column "unknown_usage_turns"`);
  }
}
