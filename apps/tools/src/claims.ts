/**
 * Live executors' claims on tool calls (K5): a NATS KV bucket `<prefix>_claims`, one key per Run
 * and tool call (`<runId>.<toolCallId>`), whose value names the holder instance and an expiry.
 * The expiry is in the value (KV key TTL, nats-server 2.11+, is not used) and every reader
 * compares it with its own clock. A claim is taken with `create` (or, when the previous holder's
 * claim expired, `update` on the revision read), renewed with `update(key, value, revision)` while
 * the call executes, and deleted once the call has its receipt.
 */
import { ConnectionGrace, type EventLog } from '@runplane/eventlog';
import { AbortError, type KvBucket, KvStore, retry } from '@runplane/kit';
import { z } from 'zod';
import type { ToolClaim } from './decide.js';

/** The expiry {@link ClaimStore.judgedExpiry} gives every claim while this process's connection to NATS is down. */
const FAR_FUTURE = '9999-12-31T23:59:59.999Z';

/** The stored value of a claim: the call, its holder instance and its expiry (ISO-8601). */
export const ClaimValue = z.object({
  runId: z.string(),
  toolCallId: z.string(),
  holder: z.string(),
  expiresAt: z.string(),
});
export type ClaimValue = z.infer<typeof ClaimValue>;

/** Another live executor holds the claim: this worker must not dispatch the call. */
export class ClaimTaken extends Error {
  constructor(
    readonly key: string,
    readonly holder: string,
  ) {
    super(`the claim ${key} is held by ${holder}`);
    this.name = 'ClaimTaken';
  }
}

/** The executor's claim was renewed (or taken) after it was read as expired: the call must not be declared unknown on that reading. */
export class ClaimRenewed extends Error {
  constructor(readonly key: string) {
    super(`the claim ${key} changed after it was read: its executor may be alive`);
    this.name = 'ClaimRenewed';
  }
}

/** A claim this process holds, with the revision its next renewal is conditional on. */
export interface HeldClaim {
  key: string;
  revision: number;
}

/** The claims bucket ({@link KvStore}): taken, renewed and removed by compare-and-set. */
export class ClaimStore extends KvStore<ClaimValue> {
  /** Keys of the claims this process holds for calls it is executing now (taken, not yet released). */
  private readonly mine = new Set<string>();
  /** This process's connection to NATS: no claim counts as expired while it is down, nor before a TTL and the others' reconnect time after it is back. */
  private readonly grace = new ConnectionGrace();
  /** Told of every reconnection to NATS ({@link onReconnect}). */
  private readonly reconnectListeners = new Set<() => void>();

  private constructor(
    at: KvBucket,
    /** This process's instance id (the holder named in its claims). */
    readonly holder: string,
    private readonly ttlMs: number,
  ) {
    super(at, ClaimValue);
  }

  /** The bucket name for a log's subject space: `<prefix>_claims`. */
  static bucketFor(log: Pick<EventLog, 'space'>): string {
    return `${log.space.prefix}_claims`;
  }

  /** Opens (creating when missing) the claims bucket of `log`'s subject space. */
  static async open(log: EventLog, ttlMs: number): Promise<ClaimStore> {
    const store = new ClaimStore(await KvStore.openBucket(log.nc, ClaimStore.bucketFor(log)), log.writer.instance, ttlMs);
    store.grace.follow(log.nc, () => {
      for (const listener of store.reconnectListeners) listener();
    });
    return store;
  }

  /** Calls `listener` on every reconnection of this store's connection to NATS. @returns what stops it. */
  onReconnect(listener: () => void): () => void {
    this.reconnectListeners.add(listener);
    return () => this.reconnectListeners.delete(listener);
  }

  /**
   * The expiry a reader should judge a stored claim by. A claim this very process holds for a
   * call it is still executing is alive, whatever its stored expiry (its renewals may have been
   * missed while NATS was unreachable). Any other claim does not expire while this process's own
   * connection is down, and expires no earlier than a full TTL, plus the time other clients take to
   * reconnect, after its last reconnection (ConnectionGrace): renewals missed during a NATS outage
   * are not an expiry (docs/tool-effects.md "A live executor's claim").
   */
  judgedExpiry(key: string, claim: ToolClaim): string {
    if (this.mine.has(key) && claim.holder === this.holder) return new Date(Date.now() + this.ttlMs).toISOString();
    const graceUntil = this.grace.judgeFrom(this.ttlMs);
    if (!Number.isFinite(graceUntil)) return FAR_FUTURE; // this process cannot hear renewals now: nothing expires
    return Date.parse(claim.expiresAt) >= graceUntil ? claim.expiresAt : new Date(graceUntil).toISOString();
  }

  /** True when a stored claim counts as expired now (see {@link judgedExpiry}). */
  expired(key: string, claim: ToolClaim): boolean {
    return Date.parse(this.judgedExpiry(key, claim)) <= Date.now();
  }

  static keyOf(runId: string, toolCallId: string): string {
    return `${runId}.${toolCallId}`;
  }

  private value(runId: string, toolCallId: string): ClaimValue {
    return { runId, toolCallId, holder: this.holder, expiresAt: new Date(Date.now() + this.ttlMs).toISOString() };
  }

  /** The claim stored under `key` and its revision, or null (absent, deleted, or not a claim). */
  async read(key: string): Promise<{ claim: ClaimValue; revision: number } | null> {
    const found = await this.getRecord(key);
    return found ? { claim: found.value, revision: found.revision } : null;
  }

  /**
   * Claims of the given calls of a Run: toolCallId -> claim, or null when absent, and the
   * revision each was read at (0 when absent), for {@link seize}.
   */
  async lookup(
    runId: string,
    toolCallIds: readonly string[],
  ): Promise<{ claims: Record<string, ToolClaim | null>; revisions: Record<string, number> }> {
    const claims: Record<string, ToolClaim | null> = {};
    const revisions: Record<string, number> = {};
    await Promise.all(
      toolCallIds.map(async (id) => {
        const key = ClaimStore.keyOf(runId, id);
        const found = await this.read(key);
        claims[id] = found ? { holder: found.claim.holder, expiresAt: this.judgedExpiry(key, found.claim) } : null;
        revisions[id] = found?.revision ?? 0;
      }),
    );
    return { claims, revisions };
  }

  /**
   * Removes an expired claim before its call is declared unknown, only if it is still the
   * revision that was read (compare-and-set): a holder that renewed meanwhile is alive, and its
   * call is not declared unknown on a stale reading. The claim as it was read (`seen`) is judged
   * again first, on this process's connection as it is now: a decision whose reads waited through a
   * NATS outage must give the holder the grace after the reconnection too (ConnectionGrace, K5, K10).
   * @throws ClaimRenewed when the claim changed since it was read, or is no longer judged expired.
   */
  async seize(runId: string, toolCallId: string, revision: number, seen: ToolClaim | null = null): Promise<void> {
    const key = ClaimStore.keyOf(runId, toolCallId);
    if (seen && !this.expired(key, seen)) throw new ClaimRenewed(key);
    if (revision === 0) {
      if (await this.read(key)) throw new ClaimRenewed(key); // it appeared since: an executor took it
      return;
    }
    try {
      await this.delete(key, revision);
    } catch {
      throw new ClaimRenewed(key);
    }
  }

  /**
   * Takes the claim on a call before its dispatch is appended: creates it, renews it when this
   * process holds it already, or takes it over when the holder's claim expired.
   * @throws ClaimTaken when another live executor holds it.
   */
  async take(runId: string, toolCallId: string): Promise<HeldClaim> {
    const key = ClaimStore.keyOf(runId, toolCallId);
    // this process is executing the call already (a second, stale wake decided to dispatch it again):
    // it must neither dispatch it twice nor touch the claim the execution renews
    if (this.mine.has(key)) throw new ClaimTaken(key, this.holder);
    // a lost create/update race is read and decided again (claimRace: 3 attempts, no wait); a
    // failed read, or a live holder, ends it at once
    const raced = new Set<unknown>();
    const write = async (attempt: Promise<number>) => {
      try {
        const revision = await attempt;
        this.mine.add(key);
        return { key, revision };
      } catch (e) {
        raced.add(e);
        throw e;
      }
    };
    return retry('claimRace', async () => {
      const found = await this.read(key).catch((e: Error) => {
        throw new AbortError(e);
      });
      if (!found) return write(this.create(key, this.value(runId, toolCallId)));
      const mine = found.claim.holder === this.holder;
      if (!mine && !this.expired(key, found.claim)) throw new AbortError(new ClaimTaken(key, found.claim.holder));
      return write(this.update(key, this.value(runId, toolCallId), found.revision));
    }).catch((e: unknown) => {
      throw raced.has(e) ? new ClaimTaken(key, 'a concurrent taker') : e;
    });
  }

  /**
   * Extends a held claim. A failed update is not by itself a loss (a publish can time out after
   * it was stored): the key is read again, and the claim is lost only when someone else holds it
   * or it is gone.
   * @returns the renewed claim, the unchanged one when NATS did not answer (try again later), or null when it was lost.
   */
  async renew(held: HeldClaim, runId: string, toolCallId: string): Promise<HeldClaim | null> {
    try {
      return { key: held.key, revision: await this.update(held.key, this.value(runId, toolCallId), held.revision) };
    } catch {
      try {
        const found = await this.read(held.key);
        if (!found || found.claim.holder !== this.holder) return null;
        return { key: held.key, revision: await this.update(held.key, this.value(runId, toolCallId), found.revision) };
      } catch {
        return held;
      }
    }
  }

  /** This process no longer executes the call under `key` (its claim is released or lost). */
  executionEnded(key: string): void {
    this.mine.delete(key);
  }

  /** Deletes a claim (its call has its receipt); only the stored revision when given. */
  async release(key: string, revision?: number): Promise<void> {
    try {
      await this.delete(key, revision);
      this.mine.delete(key);
    } catch {
      // a newer revision stands (renewed since): it is not this release's to delete
      if (revision === undefined) this.mine.delete(key);
    }
  }

  /** Every claim in the bucket (keys of deleted claims skipped), without a consumer ({@link KvStore.keys}). */
  async *all(): AsyncGenerator<{ key: string; claim: ClaimValue; revision: number }> {
    for (const key of await this.keys()) {
      const found = await this.read(key);
      if (found) yield { key, ...found };
    }
  }
}
