import { Migration } from '@mikro-orm/migrations';

/**
 * Creates the four projection tables (runs, messages, passages, tool_calls). Every row carries
 * `last_seq`, the stream sequence of the last event applied to it; `runs.last_seq` is the per-Run
 * checkpoint that makes re-applying a redelivered event a no-op (K11). No column has a database
 * default that reads a clock: all values come from events, so a rebuild is identical.
 * Foreign keys to `runs` are deferred to commit, so one transaction may write a Run and its
 * message in any order.
 */
export class Migration20261130000000_projections extends Migration {
  override name = 'Migration20261130000000_projections';

  override up(): void {
    this.addSql(`create table "runs" (
      "run_id" text not null primary key,
      "conversation_id" text not null,
      "message_id" text not null,
      "client_message_id" text not null,
      "question" text not null,
      "status" text not null check ("status" in ('admitted', 'running', 'finishing', 'settled')),
      "outcome" text null check ("outcome" in ('completed', 'partial', 'failed', 'canceled', 'interrupted')),
      "reason" text null,
      "model_requests" integer not null,
      "tool_calls" integer not null,
      "passages" integer not null,
      "admitted_at" timestamptz not null,
      "settled_at" timestamptz null,
      "last_seq" bigint not null
    )`);
    this.addSql(`create index "runs_conversation_id_idx" on "runs" ("conversation_id", "admitted_at")`);

    this.addSql(`create table "messages" (
      "message_id" text not null primary key,
      "conversation_id" text not null,
      "client_message_id" text not null,
      "content" text not null,
      "content_sha256" text not null,
      "run_id" text not null references "runs" ("run_id") on delete cascade deferrable initially deferred,
      "admitted_at" timestamptz not null,
      "last_seq" bigint not null
    )`);
    this.addSql(`create index "messages_conversation_client_idx" on "messages" ("conversation_id", "client_message_id")`);
    this.addSql(`create index "messages_run_id_idx" on "messages" ("run_id")`);

    this.addSql(`create table "passages" (
      "run_id" text not null references "runs" ("run_id") on delete cascade deferrable initially deferred,
      "passage_id" text not null,
      "index" integer not null,
      "version" integer not null,
      "text" text not null,
      "sha256" text not null,
      "committed_at" timestamptz not null,
      "last_seq" bigint not null,
      primary key ("run_id", "passage_id")
    )`);

    this.addSql(`create table "tool_calls" (
      "run_id" text not null references "runs" ("run_id") on delete cascade deferrable initially deferred,
      "tool_call_id" text not null,
      "turn" integer null,
      "name" text not null,
      "arguments_text" text null,
      "status" text not null check ("status" in ('proposed', 'dispatched', 'succeeded', 'failed', 'denied', 'unknown')),
      "error_code" text null,
      "error_message" text null,
      "result_sha256" text null,
      "proposed_at" timestamptz null,
      "receipt_at" timestamptz null,
      "last_seq" bigint not null,
      primary key ("run_id", "tool_call_id")
    )`);
  }

  override down(): void {
    this.addSql('drop table if exists "tool_calls"');
    this.addSql('drop table if exists "passages"');
    this.addSql('drop table if exists "messages"');
    this.addSql('drop table if exists "runs"');
  }
}
