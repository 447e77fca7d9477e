import { Migration } from '@mikro-orm/migrations';

/**
 * Adds to `runs` the grant's budget limits and the Run's clocks (K7): queue time, execution
 * time, last progress, deadline; to `tool_calls` the dispatch time (a call's step clocks:
 * proposed -> dispatched -> receipt); and the table `model_turns`, one row per model turn with
 * its step clocks (requested -> first text -> completed or failed) and its usage, null when
 * unknown (K9). Every column derives from events (K11); rows projected before it keep nulls (and
 * no turn rows) until a rebuild fills them from the log.
 */
export class Migration20261130150000_run_clocks extends Migration {
  override name = 'Migration20261130150000_run_clocks';

  override up(): void {
    this.addSql(`alter table "runs"
      add column "max_model_requests" integer null,
      add column "max_tool_calls" integer null,
      add column "max_input_tokens" integer null,
      add column "max_output_tokens" integer null,
      add column "reserve_model_requests" integer null,
      add column "reserve_output_tokens" integer null,
      add column "no_progress_seconds" integer null,
      add column "deadline_at" timestamptz null,
      add column "started_at" timestamptz null,
      add column "queued_ms" bigint null,
      add column "execution_ended_at" timestamptz null,
      add column "executing_ms" bigint null,
      add column "last_progress_at" timestamptz null`);
    this.addSql(`alter table "tool_calls" add column "dispatched_at" timestamptz null`);
    this.addSql(`create table "model_turns" (
      "run_id" text not null references "runs" ("run_id") on delete cascade deferrable initially deferred,
      "turn" integer not null,
      "status" text not null check ("status" in ('requested', 'completed', 'failed')),
      "requested_at" timestamptz null,
      "first_text_at" timestamptz null,
      "ended_at" timestamptz null,
      "duration_ms" bigint null,
      "finish_reason" text null,
      "content_chars" integer null,
      "tool_calls" integer null,
      "prompt_tokens" integer null,
      "completion_tokens" integer null,
      "error_kind" text null,
      "last_seq" bigint not null,
      primary key ("run_id", "turn")
    )`);
  }

  override down(): void {
    this.addSql('drop table if exists "model_turns"');
    this.addSql(`alter table "tool_calls" drop column "dispatched_at"`);
    this.addSql(`alter table "runs"
      drop column "max_model_requests",
      drop column "max_tool_calls",
      drop column "max_input_tokens",
      drop column "max_output_tokens",
      drop column "reserve_model_requests",
      drop column "reserve_output_tokens",
      drop column "no_progress_seconds",
      drop column "deadline_at",
      drop column "started_at",
      drop column "queued_ms",
      drop column "execution_ended_at",
      drop column "executing_ms",
      drop column "last_progress_at"`);
  }
}
