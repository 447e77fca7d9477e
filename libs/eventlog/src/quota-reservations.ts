/**
 * Admission's quota reservations: per principal, the Runs admission is admitting or has admitted
 * and the projections may not show yet. A KV bucket `<prefix>_quotas` (key: {@link principalKey}),
 * written only by admission.
 *
 * The quotas count from the projections, which follow the log by the projector's lag, so a burst
 * of parallel requests (or requests spread over several admission replicas) all read the same
 * usage and all pass. A new Run is therefore reserved here by compare-and-set BEFORE its
 * `run.admitted` is appended: two admissions of one principal that read the same entry cannot both
 * write it, and the loser reads the winner's reservation and counts it. An entry leaves when the
 * projections show its Run, when it is older than the longest window it can count in (an hour),
 * or when admission finds it never reached the log (a crash between reserving and appending).
 *
 * It is a guard, not the truth: the usage a refusal names is still the log's, through the
 * projections plus these reservations (docs/configuration.md, "Quotas").
 */
import { createHash } from 'node:crypto';
import { isRevisionMismatch, KvStore } from '@runplane/kit';
import { z } from 'zod';
import { bucketName } from './bus.js';
import type { EventLog } from './event-log.js';

/** One Run reserved against its principal's quotas. */
export const QuotaReservation = z.object({
  runId: z.string(),
  /** ISO-8601 time admission reserved it (about its `run.admitted.occurredAt`). */
  reservedAt: z.string(),
});
export type QuotaReservation = z.infer<typeof QuotaReservation>;

const EntryValue = z.object({ runs: z.array(QuotaReservation) });
type EntryValue = z.infer<typeof EntryValue>;

/** A principal's reservations and the entry's revision (0: no entry), to write back by compare-and-set. */
export interface QuotaReservationsEntry {
  runs: QuotaReservation[];
  revision: number;
}

/** Another admission wrote the principal's entry since it was read: read it again and decide again. */
export class ReservationConflict extends Error {
  override readonly name = 'ReservationConflict';
  constructor(readonly key: string) {
    super(`another admission changed the quota reservations of ${key}; read them again`);
  }
}

/**
 * The KV key of a principal's entry: `p.` and the base64url sha256 of the principal (a KV key allows
 * only `[-/_=.a-zA-Z0-9]`, and a principal is any token `sub`), `anonymous` for Runs without one.
 */
export const principalKey = (principal: string | null): string =>
  principal === null ? 'anonymous' : `p.${createHash('sha256').update(principal).digest('base64url')}`;

/** The per-principal reservations (see the file comment). */
export class QuotaReservations extends KvStore<EntryValue> {
  /** Opens (creating if missing and allowed) the bucket of `log`'s subject space. */
  static async open(log: EventLog): Promise<QuotaReservations> {
    return new QuotaReservations(await KvStore.openBucket(log.nc, bucketName(log.space, 'quotas')), EntryValue);
  }

  /** The principal's reservations (an unreadable entry reads as none, and is overwritten by the next write). */
  async read(principal: string | null): Promise<QuotaReservationsEntry> {
    const { value, revision } = await this.current(principalKey(principal));
    return { runs: value?.runs ?? [], revision };
  }

  /**
   * Writes the principal's reservations if the entry is still at `revision` (0: absent).
   * @throws ReservationConflict when another admission wrote it since; NATS errors otherwise.
   */
  async write(principal: string | null, runs: readonly QuotaReservation[], revision: number): Promise<void> {
    const key = principalKey(principal);
    const value: EntryValue = { runs: [...runs] };
    try {
      if (revision === 0) await this.create(key, value);
      else await this.update(key, value, revision);
    } catch (e) {
      throw isRevisionMismatch(e) ? new ReservationConflict(key) : e;
    }
  }

  /**
   * Changes the principal's reservations by compare-and-set ({@link KvStore.compareAndSet}): `next` sees
   * the current ones and answers the new list, or null to write nothing. Only a lost
   * compare-and-set (another admission of the same principal wrote first) is retried: the entry is
   * read again and `next` asked again, so what `next` decides always rests on the reservations as
   * stored; a write that failed otherwise is not repeated (it may have reserved).
   * @returns true when a new list was written.
   * @throws ReservationConflict after the `quotaReservation` policy's 30 attempts; NATS errors; what `next` throws.
   */
  async change(principal: string | null, next: (runs: readonly QuotaReservation[]) => Promise<QuotaReservation[] | null>): Promise<boolean> {
    const key = principalKey(principal);
    try {
      return await this.compareAndSet(
        key,
        async (current) => {
          const runs = await next(current?.runs ?? []);
          return runs === null ? null : { runs };
        },
        { policy: 'quotaReservation' },
      );
    } catch (e) {
      throw isRevisionMismatch(e) ? new ReservationConflict(key) : e;
    }
  }
}
