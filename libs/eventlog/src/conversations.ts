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
import { KvStore } from '@runplane/kit';
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
  /** Opens (creating if missing and allowed) the bucket of `log`'s subject space. */
  static async open(log: EventLog): Promise<ConversationIndex> {
    return new ConversationIndex(await KvStore.openBucket(log.nc, bucketName(log.space, 'conversations')), IndexValue);
  }

  /** The Conversation's Runs, oldest first, and the entry's revision (0: no entry; an entry that is not an index reads as empty). */
  async read(conversationId: string): Promise<{ runs: IndexedRun[]; revision: number }> {
    const { value, revision } = await this.current(conversationId);
    return { runs: value?.runs ?? [], revision };
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
    // adding is idempotent (a Run already listed is left as it is), so any failed write may be
    // repeated, a timed-out one included: the next read shows whether it landed
    return this.compareAndSet(
      conversationId,
      (current) => (current?.runs.some((r) => r.runId === run.runId) ? null : { runs: [...(current?.runs ?? []), run] }),
      {
        policy: 'kvCompareAndSet',
        retryOn: () => true,
      },
    );
  }
}
