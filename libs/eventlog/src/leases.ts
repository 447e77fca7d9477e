/**
 * Execution leases (K6): one NATS KV bucket `<prefix>_leases`, one key per Run. A runtime instance
 * executes a Run only while it holds the Run's lease; every change is a compare-and-set on the
 * key's revision (KV `create`, `update(key, value, revision)`), so two instances can never both
 * believe they hold it after a change. A lease's expiry is its last write's server timestamp plus
 * `ttlMs`, judged by recovery against the holder's heartbeat (a KV key TTL, 2.11+, would delete the
 * key without that judgement: a late holder is not a gone one). Recovery watches
 * the bucket, fences a Run whose lease expired or was released by a stopping runtime, and marks
 * the key `fenced` so that the stale holder's renewal fails. The lease is coordination only: the
 * facts (grant, fence) are events in the Run's log, and the fence is what stops a stale holder's
 * writes (docs/recovery.md).
 */
import type { KvEntry } from '@nats-io/kv';
import { kvJson, KvStore } from '@runplane/kit';
import { z } from 'zod';
import type { EventLog } from './event-log.js';

/** A lease's value in the bucket. */
export const LeaseValue = z.discriminatedUnion('state', [
  /** Held by `holder`, renewed at least every `ttlMs`. */
  z.object({
    state: z.literal('held'),
    epoch: z.number().int().positive(),
    holder: z.object({ service: z.string(), instance: z.string() }),
    ttlMs: z.number().int().positive(),
  }),
  /**
   * Given up by its holder: `finished` (execution ended normally), `stopping` (the runtime shuts
   * down with the Run unfinished and something in flight: fenced), `parked` (the Run waits for a
   * human's answer or a child Run, K10) or `handover` (a draining runtime recorded
   * `run.handed_over` at a safe point). `parked` and `handover` are the only states from which the
   * lease may be taken again, at the next epoch, once the wake (the answer, or the handover
   * itself) is recorded; recovery fences neither. `wakeBy`: when the parked Run's wait expires
   * (recovery fences it then).
   */
  z.object({
    state: z.literal('released'),
    epoch: z.number().int().positive(),
    holder: z.object({ service: z.string(), instance: z.string() }),
    reason: z.enum(['finished', 'stopping', 'parked', 'handover']),
    wakeBy: z.string().datetime().optional(),
  }),
  /** Fenced by recovery: nobody may hold it again (a stored Run is not a licence to resume, K10). */
  z.object({
    state: z.literal('fenced'),
    epoch: z.number().int().positive(),
    holder: z.object({ service: z.string(), instance: z.string() }),
  }),
]);
export type LeaseValue = z.infer<typeof LeaseValue>;

/** A lease as read from the bucket: its value, the revision to compare-and-set against, and the server time of its last write. */
export interface LeaseEntry {
  runId: string;
  value: LeaseValue;
  revision: number;
  writtenAt: Date;
}

/** A lease this process holds. */
export interface HeldLease {
  runId: string;
  epoch: number;
  revision: number;
  ttlMs: number;
}

/** Why a lease could not be taken. */
export type AcquireRefusal = { held: false; by: LeaseEntry };

/** The leases bucket: every write a compare-and-set ({@link KvStore}). */
export class LeaseStore extends KvStore<LeaseValue> {
  /** The bucket name for a log's subject space: `<prefix>_leases`. */
  static bucketFor(log: Pick<EventLog, 'space'>): string {
    return `${log.space.prefix}_leases`;
  }

  /** Opens (creating if missing) the bucket of `log`'s subject space. */
  static async open(log: EventLog): Promise<LeaseStore> {
    return new LeaseStore(await KvStore.openBucket(log.nc, LeaseStore.bucketFor(log)), LeaseValue);
  }

  /** Parses a bucket entry; null for a deleted key or a value that is not a lease. */
  static parse(entry: KvEntry): LeaseEntry | null {
    const value = kvJson(entry, LeaseValue);
    return value ? { runId: entry.key, value, revision: entry.revision, writtenAt: entry.created } : null;
  }

  /** The Run's lease, or null when there is none. */
  async get(runId: string): Promise<LeaseEntry | null> {
    const entry = await this.entry(runId);
    return entry ? LeaseStore.parse(entry) : null;
  }

  /**
   * Takes the Run's lease for `holder` (epoch 1): succeeds only when the Run has no lease at all.
   * A Run whose lease was ever held, released or fenced is never taken again (K10: no resume in
   * place), except a parked one through {@link resume}.
   * @returns the held lease, or the existing entry that refused it.
   */
  async acquire(runId: string, holder: { service: string; instance: string }, ttlMs: number): Promise<HeldLease | AcquireRefusal> {
    const value: LeaseValue = { state: 'held', epoch: 1, holder, ttlMs };
    try {
      const revision = await this.create(runId, value);
      return { runId, epoch: 1, revision, ttlMs };
    } catch (e) {
      const existing = await this.get(runId);
      if (!existing) throw e;
      return { held: false, by: existing };
    }
  }

  /**
   * Takes a parked or handed-over Run's lease again (K10: only an accepted wake continues a Run
   * whose lease was released): a compare-and-set from `released`/`parked` or `released`/`handover`
   * to `held` at the next epoch (previous + 1), so every event written under it carries the new
   * epoch and a holder of an older epoch can hold nothing. The caller checks in the log that the
   * wake is recorded before it resumes (a parked Run's answer; a handover's `run.handed_over` at
   * exactly the lease's epoch).
   * @returns the held lease, or the entry that refused it (not parked, or changed meanwhile).
   */
  async resume(entry: LeaseEntry, holder: { service: string; instance: string }, ttlMs: number): Promise<HeldLease | AcquireRefusal> {
    const v = entry.value;
    if (v.state !== 'released' || (v.reason !== 'parked' && v.reason !== 'handover')) return { held: false, by: entry };
    const epoch = v.epoch + 1;
    const value: LeaseValue = { state: 'held', epoch, holder, ttlMs };
    try {
      const revision = await this.update(entry.runId, value, entry.revision);
      return { runId: entry.runId, epoch, revision, ttlMs };
    } catch (e) {
      const now = await this.get(entry.runId);
      if (!now) throw e;
      return { held: false, by: now };
    }
  }

  /**
   * Marks a lease `released`/`parked` on behalf of a holder that is gone (recovery, for a Run whose
   * log says it is parked: the holder died between parking and releasing). Compare-and-set.
   * @throws when the lease changed since it was read.
   */
  async park(entry: LeaseEntry, wakeBy?: string): Promise<number> {
    const value: LeaseValue = {
      state: 'released',
      epoch: entry.value.epoch,
      holder: entry.value.holder,
      reason: 'parked',
      ...(wakeBy ? { wakeBy } : {}),
    };
    return this.update(entry.runId, value, entry.revision);
  }

  /**
   * Marks a lease `released`/`handover` on behalf of a holder that is gone after it recorded
   * `run.handed_over` under this epoch and before it released the lease (recovery). Compare-and-set.
   * @throws when the lease changed since it was read.
   */
  async handOver(entry: LeaseEntry): Promise<number> {
    const value: LeaseValue = { state: 'released', epoch: entry.value.epoch, holder: entry.value.holder, reason: 'handover' };
    return this.update(entry.runId, value, entry.revision);
  }

  /**
   * Renews a held lease (compare-and-set on its revision).
   * @returns the lease with its new revision.
   * @throws when the lease changed meanwhile (fenced, or not ours): the holder must stop executing.
   */
  async renew(lease: HeldLease, holder: { service: string; instance: string }): Promise<HeldLease> {
    const value: LeaseValue = { state: 'held', epoch: lease.epoch, holder, ttlMs: lease.ttlMs };
    const revision = await this.update(lease.runId, value, lease.revision);
    return { ...lease, revision };
  }

  /**
   * Gives a held lease up (compare-and-set): `finished` after execution ended, `stopping` when the
   * runtime shuts down with the Run unfinished (recovery then fences it at once, without waiting
   * for the expiry), `parked` when the Run waits for a wake (`wakeBy`: its wait's expiry),
   * `handover` after the draining holder recorded `run.handed_over` (recovery does not fence it).
   * @throws when the lease changed meanwhile.
   */
  async release(
    lease: HeldLease,
    holder: { service: string; instance: string },
    reason: 'finished' | 'stopping' | 'parked' | 'handover',
    wakeBy?: string,
  ): Promise<void> {
    const value: LeaseValue = { state: 'released', epoch: lease.epoch, holder, reason, ...(wakeBy ? { wakeBy } : {}) };
    await this.update(lease.runId, value, lease.revision);
  }

  /**
   * Marks a lease fenced (compare-and-set on the revision recovery read), so that its holder's
   * next renewal or release fails.
   * @throws when the lease changed since it was read (the holder renewed it: read again).
   */
  async fence(entry: LeaseEntry): Promise<number> {
    const value: LeaseValue = { state: 'fenced', epoch: entry.value.epoch, holder: entry.value.holder };
    return this.update(entry.runId, value, entry.revision);
  }

  /** Removes a Run's lease key (recovery's clean-up once the Run needs it no more). */
  forget(runId: string): Promise<void> {
    return this.purge(runId);
  }
}

/** When a held lease expires: the server time of its last write plus its TTL, in ms since the epoch. */
export function leaseExpiresAt(entry: LeaseEntry): number {
  return entry.value.state === 'held' ? entry.writtenAt.getTime() + entry.value.ttlMs : entry.writtenAt.getTime();
}
