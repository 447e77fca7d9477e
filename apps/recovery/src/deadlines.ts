/**
 * Run deadlines recovery watches (K10): one NATS KV bucket `<prefix>_deadlines`, owned by
 * recovery, one key per Run (its id), value `{deadlineAt}` (ISO-8601). Recovery records it when it
 * sees `run.admitted` and forgets it once the Run needs no deadline watch any more (fenced,
 * finished or settled), so a restarted recovery still knows every Run it has to stop. The bucket
 * is coordination only: the facts (the admission with its limits, the fence) are in the Run's log.
 */
import type { KvEntry } from '@nats-io/kv';
import { z } from 'zod';
import type { EventLog } from '@runplane/eventlog';
import { kvJson, KvStore } from '@runplane/kit';

export const DeadlineValue = z.object({ deadlineAt: z.string().datetime() });
export type DeadlineValue = z.infer<typeof DeadlineValue>;

/** A deadline as read from the bucket. */
export interface DeadlineEntry {
  runId: string;
  deadlineAt: string;
}

/** The deadlines bucket ({@link KvStore}). */
export class DeadlineStore extends KvStore<DeadlineValue> {
  /** The bucket name for a log's subject space: `<prefix>_deadlines`. */
  static bucketFor(log: Pick<EventLog, 'space'>): string {
    return `${log.space.prefix}_deadlines`;
  }

  /** Opens (creating if missing) the bucket of `log`'s subject space. */
  static async open(log: EventLog): Promise<DeadlineStore> {
    return new DeadlineStore(await KvStore.openBucket(log.nc, DeadlineStore.bucketFor(log)), DeadlineValue);
  }

  /** Parses a bucket entry; null for a deleted key or a value that is not a deadline. */
  static parse(entry: KvEntry): DeadlineEntry | null {
    const value = kvJson(entry, DeadlineValue);
    return value ? { runId: entry.key, deadlineAt: value.deadlineAt } : null;
  }

  /** Records a Run's deadline (idempotent: the same value again changes nothing that matters). */
  async record(runId: string, deadlineAt: string): Promise<void> {
    await this.put(runId, { deadlineAt });
  }

  /** Forgets a Run's deadline (its Run is fenced, finished or settled). */
  forget(runId: string): Promise<void> {
    return this.purge(runId);
  }
}
