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
import { Kvm, type KV } from '@nats-io/kv';
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

/** Most compare-and-set attempts of one {@link ConversationIndex.add} before it gives up. */
const MAX_CAS_ATTEMPTS = 30;

/** The per-Conversation list of admitted Runs (see the file comment for its crash window). */
export class ConversationIndex {
  private constructor(
    readonly kv: KV,
    readonly bucket: string,
  ) {}

  /** Opens (creating if missing and allowed) the bucket of `log`'s subject space. */
  static async open(log: EventLog): Promise<ConversationIndex> {
    const bucket = bucketName(log.space, 'conversations');
    const kv = await new Kvm(log.nc).create(bucket, { history: 1 });
    return new ConversationIndex(kv, bucket);
  }

  /** The Conversation's Runs, oldest first, and the entry's revision (0: no entry). */
  async read(conversationId: string): Promise<{ runs: IndexedRun[]; revision: number }> {
    const entry = await this.kv.get(conversationId);
    if (!entry || entry.operation !== 'PUT') return { runs: [], revision: entry?.revision ?? 0 };
    const parsed = IndexValue.safeParse(entry.json());
    if (!parsed.success) return { runs: [], revision: entry.revision };
    return { runs: parsed.data.runs, revision: entry.revision };
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
   * @throws when the compare-and-set keeps conflicting ({@link MAX_CAS_ATTEMPTS}), or on NATS errors.
   */
  private async change(conversationId: string, next: (current: { runs: IndexedRun[] }) => boolean | z.infer<typeof IndexValue>): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      const { revision, ...current } = await this.read(conversationId);
      const value = next(current);
      if (typeof value === 'boolean') return value;
      try {
        if (revision === 0) await this.kv.create(conversationId, JSON.stringify(value));
        else await this.kv.update(conversationId, JSON.stringify(value), revision);
        return true;
      } catch (e) {
        if (attempt >= MAX_CAS_ATTEMPTS) throw e;
        await new Promise((r) => setTimeout(r, Math.random() * 20 * Math.min(attempt, 5)));
      }
    }
  }
}
