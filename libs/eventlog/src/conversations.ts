/**
 * The conversation index (K2): per Conversation, the Runs admission admitted in it, oldest first,
 * each with the clientMessageId it was admitted for. A KV bucket `<prefix>_conversations` (key:
 * the Conversation's key, contracts `conversationKey`: the conversationId scoped by the principal
 * with authentication on, so two principals' Conversations of one id are two entries), written
 * only by admission.
 *
 * It is an index, not the truth: every entry is added AFTER the Run's `run.admitted` is in the
 * log, by compare-and-set, idempotently (an entry already there is left as it is). A crash between
 * the append and the index update leaves an admitted Run missing here until the same message is
 * posted again (the client retries a message whose answer it lost, K1: the repeat repairs the
 * entry); meanwhile later Runs' `conversationHistory` does not list it, and a clarification
 * answer admitted in that window cannot be found by its clientMessageId (docs/architecture.md).
 */
import type { KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { AbortError, KvStore, retry } from '@runplane/kit';
import { z } from 'zod';
import { bucketName } from './bus.js';
import type { EventLog } from './event-log.js';

/** One admitted Run of a Conversation. */
export const IndexedRun = z.object({
  runId: z.string(),
  /** The clientMessageId the Run was admitted for (a clarification answer's Run id is not derived from it). */
  clientMessageId: z.string(),
  /** ISO-8601 admission time (`run.admitted.occurredAt`). */
  admittedAt: z.string(),
});
export type IndexedRun = z.infer<typeof IndexedRun>;

const IndexValue = z.object({
  runs: z.array(IndexedRun),
});

type IndexValue = z.infer<typeof IndexValue>;

/** The per-Conversation list of admitted Runs (see the file comment for its crash window). */
export class ConversationIndex extends KvStore<IndexValue> {
  private constructor(nc: NatsConnection, kv: KV, bucket: string) {
    super(nc, kv, bucket, IndexValue);
  }

  /** Opens (creating if missing and allowed) the bucket of `log`'s subject space. */
  static async open(log: EventLog): Promise<ConversationIndex> {
    const bucket = bucketName(log.space, 'conversations');
    return new ConversationIndex(log.nc, await KvStore.openBucket(log.nc, bucket), bucket);
  }

  /** The Conversation's Runs, oldest first, and the entry's revision (0: no entry; an entry that is not an index reads as empty). */
  async read(conversationId: string): Promise<{ runs: IndexedRun[]; revision: number }> {
    const entry = await this.entry(conversationId);
    if (!entry) return { runs: [], revision: 0 };
    return { runs: this.parseValue(entry)?.runs ?? [], revision: entry.revision };
  }

  /** The Run a clientMessageId was admitted as in the Conversation, per the index, or null. */
  async runOf(conversationId: string, clientMessageId: string): Promise<IndexedRun | null> {
    const { runs } = await this.read(conversationId);
    return runs.find((r) => r.clientMessageId === clientMessageId) ?? null;
  }

  /**
   * Adds an admitted Run, once: by compare-and-set on the Conversation's entry, re-reading on a
   * conflict (concurrent admissions in one Conversation). An entry for the same Run is left as it is.
   * @returns true when this call added it.
   * @throws when the compare-and-set keeps conflicting, or on NATS errors.
   */
  add(conversationId: string, run: IndexedRun): Promise<boolean> {
    return this.change(conversationId, ({ runs }) => (runs.some((r) => r.runId === run.runId) ? false : { runs: [...runs, run] }));
  }

  /**
   * Changes the Conversation's entry by compare-and-set, reading it again on a conflict: `next`
   * gives the new value, or the answer when nothing is to be written.
   * @returns true when the new value was written, else what `next` answered.
   * @throws when the compare-and-set keeps conflicting (the `kvCompareAndSet` policy: 30 attempts), or on NATS errors.
   */
  private change(conversationId: string, next: (current: { runs: IndexedRun[] }) => boolean | IndexValue): Promise<boolean> {
    return retry('kvCompareAndSet', async () => {
      // only the compare-and-set is retried: a failed read is NATS's answer, not a race
      const { revision, ...current } = await this.read(conversationId).catch((e: Error) => {
        throw new AbortError(e);
      });
      const value = next(current);
      if (typeof value === 'boolean') return value;
      if (revision === 0) await this.create(conversationId, value);
      else await this.update(conversationId, value, revision);
      return true;
    });
  }
}
