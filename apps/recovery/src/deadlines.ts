/**
 * Run deadlines recovery watches (K10): one NATS KV bucket `<prefix>_deadlines`, owned by
 * recovery, one key per Run (its id), value `{deadlineAt}` (ISO-8601). Recovery records it when it
 * sees `run.admitted` and forgets it once the Run needs no deadline watch any more (fenced,
 * finished or settled), so a restarted recovery still knows every Run it has to stop. The bucket
 * is coordination only: the facts (the admission with its limits, the fence) are in the Run's log.
 */
import { Kvm, type KV, type KvEntry } from '@nats-io/kv';
import { z } from 'zod';
import { kvJson, type EventLog } from '@runplane/eventlog';

export const DeadlineValue = z.object({ deadlineAt: z.string().datetime() });
export type DeadlineValue = z.infer<typeof DeadlineValue>;

/** A deadline as read from the bucket. */
export interface DeadlineEntry {
  runId: string;
  deadlineAt: string;
}

export class DeadlineStore {
  private constructor(
    readonly kv: KV,
    readonly bucket: string,
  ) {}

  /** The bucket name for a log's subject space: `<prefix>_deadlines`. */
  static bucketFor(log: Pick<EventLog, 'space'>): string {
    return `${log.space.prefix}_deadlines`;
  }

  /** Opens (creating if missing) the bucket of `log`'s subject space. */
  static async open(log: EventLog): Promise<DeadlineStore> {
    const bucket = DeadlineStore.bucketFor(log);
    const kv = await new Kvm(log.nc).create(bucket, { history: 1 });
    return new DeadlineStore(kv, bucket);
  }

  /** Parses a bucket entry; null for a deleted key or a value that is not a deadline. */
  static parse(entry: KvEntry): DeadlineEntry | null {
    const value = kvJson(entry, DeadlineValue);
    return value ? { runId: entry.key, deadlineAt: value.deadlineAt } : null;
  }

  /** Records a Run's deadline (idempotent: the same value again changes nothing that matters). */
  async record(runId: string, deadlineAt: string): Promise<void> {
    const value: DeadlineValue = { deadlineAt };
    await this.kv.put(runId, JSON.stringify(value));
  }

  /** Forgets a Run's deadline (its Run is fenced, finished or settled). */
  async forget(runId: string): Promise<void> {
    await this.kv.purge(runId);
  }

  /** Deletes the bucket: test clean-up only. */
  async destroy(): Promise<void> {
    await this.kv.destroy().catch(() => undefined);
  }
}
