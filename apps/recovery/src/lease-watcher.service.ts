import { Inject, Injectable, Logger, Optional, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import type { KvWatchEntry } from '@nats-io/kv';
import {
  EventLog,
  HeartbeatStore,
  heartbeatEveryMs,
  heartbeatFreshUntil,
  instanceOfHeartbeatKey,
  PartitionOwnership,
  LeaseStore,
  leaseExpiresAt,
  isTransientNatsError,
  ConnectionGrace,
  type HeartbeatEntry,
  type LeaseEntry,
} from '@runplane/eventlog';
import { parkedAtLastTurn, parkedOn, unansweredWaits } from '@runplane/run-facts';
import { InTurn, Periodic, type KvWatch } from '@runplane/kit';
import { leaseExpiriesTotal, RunCommandHandler } from '@runplane/service-kit';
import { decide, expiredLease, lostAfterHandover, type ExpiredLeaseVerdict } from './decide.js';

export const RECOVERY_SETTINGS = Symbol('RECOVERY_SETTINGS');
export const RECOVERY_LEASES = Symbol('RECOVERY_LEASES');
export const RECOVERY_HEARTBEATS = Symbol('RECOVERY_HEARTBEATS');

/** How often parked leases are checked against their Runs (to forget those of ended Runs), ms. */
const PARKED_CLEANUP_EVERY_MS = 30_000;
/**
 * Most parked leases one clean-up pass checks (each check reads its Run from the log), taken in
 * turn: a settled Run's key is forgotten at its settlement ({@link LeaseWatcher.settled}), so the
 * pass is only the safety net. Checking every one each pass read 10,000 Runs every 30 s with
 * 10,000 Runs parked, and recovery's RSS rose by 100 MiB while nothing happened.
 */
const PARKED_CLEANUP_BATCH = 200;

/** Settings of recovery (contracts' LeaseConfig and RecoveryConfig). */
export interface RecoverySettings {
  /** The lease TTL the runtimes use, ms: the grace after recovery's own reconnection to NATS. */
  leaseTtlMs: number;
  /** How often every lease is compared with the clock, ms. */
  sweepMs: number;
}

/**
 * Watches the execution leases (K6, K10), off the Run's happy path: it appends nothing while a
 * holder renews its lease and finishes (the runtime records its own grant, `lease.granted`, with
 * its first event under the lease, so recovery is off the happy path; a grant seen in the bucket is only kept in memory,
 * to judge its expiry). When a lease
 * expired (its holder crashed or froze) or was released by a stopping runtime with the Run
 * unfinished, it marks the lease fenced in the bucket (compare-and-set: the holder's next renewal
 * fails) and fences the Run in the log through {@link decide}; the lifecycle settles it
 * `interrupted`. Recovery never resumes a Run. Time during which recovery itself could not reach
 * NATS is not counted against any lease: after it reconnects, every lease gets a full TTL again
 * (its holder was just as cut off, and renews within a third of it).
 *
 * Handed-over Runs (a drain, K10): a lease released `handover` is kept like a parked one (the
 * handover takes it at the next epoch) and never fenced; one whose holder recorded the handover but
 * was lost before releasing is marked `handover` instead of fenced.
 *
 * Parked Runs (K10): a lease released `parked` is kept (it is what a wake takes again at the next
 * epoch) and never fenced; when its wait's expiry (`wakeBy`) passed more than one TTL ago, the
 * Run is decided `WaitExpired` (fenced `wait-expired` if the wait is still unanswered). A lease
 * that expires, or is released by a stopping runtime, while the Run's log says it is parked at
 * its last turn (the holder died between parking and releasing; its wake may be recorded already)
 * gets `lease.parked` in the log and is marked parked instead of fenced.
 *
 * Late or gone (K10): it also follows the runtimes' process heartbeats. A held lease that expired
 * while its holder's heartbeat is fresh is not fenced yet (the holder is alive, its renewals
 * late), for at most one more TTL ({@link expiredLease}); a killed holder's heartbeat stops with
 * it, so its leases are fenced on their own expiry, as before.
 *
 * Partitions: with several recovery replicas, each acts only on the leases of the Runs of the
 * partitions it owns ({@link PartitionOwnership.owns}); every replica follows every lease (a
 * partition that moves to it is acted on at its next sweep). A brief overlap while partitions move
 * is safe: a fence is a compare-and-set in the bucket and a conditional append in the log (K6).
 */
@Injectable()
export class LeaseWatcher implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger('recovery');
  /** The latest entry of every lease, by Run. */
  private readonly leases = new Map<string, LeaseEntry>();
  /**
   * What is already recorded in the log, by Run: fences (`fence/<epoch>`). A Run's entry goes when its lease key does (a Run that ended): it used to
   * grow by one string per Run for the life of the process.
   */
  private readonly recorded = new Map<string, Set<string>>();
  private watch: KvWatch | null = null;
  /** The latest heartbeat of every runtime process, by writer instance. */
  private readonly heartbeats = new Map<string, HeartbeatEntry>();
  private heartbeatWatch: KvWatch | null = null;
  /** Expired leases spared as late: the lease revision last logged as late, by Run (logged once each; goes with the lease key). */
  private readonly spared = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private sweeping: Promise<void> | null = null;
  /** Recovery's own connection to NATS: no lease expires while it is down, nor before a TTL plus the grace after it is back (K10). */
  private readonly grace = new ConnectionGrace();
  private stopped = false;
  /** Parked leases whose wait expiry was already decided (`runId/wakeBy`). */
  private readonly expiryDecided = new Set<string>();
  private readonly parkedCleanupPass = new Periodic(PARKED_CLEANUP_EVERY_MS);
  /** The parked leases the next clean-up pass checks: at most {@link PARKED_CLEANUP_BATCH}, in turn. */
  private readonly parkedCleanupTurn = new InTurn(PARKED_CLEANUP_BATCH);

  constructor(
    private readonly log: EventLog,
    /** Recovery's one command handler (its folds are shared with the other adapters of the service). */
    private readonly commands: RunCommandHandler,
    @Inject(RECOVERY_LEASES) private readonly store: LeaseStore,
    @Inject(RECOVERY_HEARTBEATS) private readonly beats: HeartbeatStore,
    @Inject(RECOVERY_SETTINGS) private readonly settings: RecoverySettings,
    /** This replica's partitions; absent = it owns every Run (one recovery process). */
    @Optional() private readonly ownership?: PartitionOwnership,
  ) {}

  /** True when this replica acts on the Run (it owns the Run's partition). */
  private mine(runId: string): boolean {
    return this.ownership?.owns(runId) ?? true;
  }

  async onApplicationBootstrap(): Promise<void> {
    this.grace.follow(this.log.nc);
    // both buckets are followed for as long as recovery runs: a watch that ends or fails (NATS
    // restarted under it) is opened again, so grants and renewals made after a restart are still seen
    this.watch = await this.store.watch((e) => this.take(e), {
      reopenAfterMs: this.settings.sweepMs,
      onError: (what, error) =>
        this.logger.warn({ error: error.message }, what === 'failed' ? 'lease watch failed; watching again' : 'could not watch the leases yet'),
    });
    this.heartbeatWatch = await this.beats.watch(
      (e) => {
        const entry = HeartbeatStore.parse(e);
        if (entry) this.heartbeats.set(entry.instance, entry);
        else this.heartbeats.delete(instanceOfHeartbeatKey(e.key) ?? e.key);
      },
      {
        reopenAfterMs: this.settings.sweepMs,
        onError: (_what, error) => this.logger.warn({ error: error.message }, 'heartbeat watch failed; watching again'),
      },
    );
    this.timer = setInterval(() => {
      this.sweeping ??= this.sweep().finally(() => (this.sweeping = null));
    }, this.settings.sweepMs);
  }

  /**
   * Keeps the latest entry of every lease (what the sweep judges). It records no grant: a grant is
   * the holder's own fact, recorded by the runtime with its first event under the lease (one
   * decision, no round trip through recovery). A holder that took the lease and wrote
   * nothing under it before it was lost has nothing of its own in the log to close beyond what the
   * fence closes anyway (the fence names the lost epoch and holder from this entry).
   */
  private take(e: KvWatchEntry): void {
    if (e.operation !== 'PUT') {
      this.drop(e.key);
      return;
    }
    const entry = LeaseStore.parse(e);
    if (!entry) {
      this.logger.warn({ key: e.key, revision: e.revision }, 'a lease entry that is not a lease value: ignored');
      return;
    }
    const known = this.leases.get(entry.runId);
    if (known && known.revision > entry.revision) return; // older than what a sweep already read
    this.leases.set(entry.runId, entry);
  }

  /** Compares every lease with the clock and acts on the lost ones. */
  private async sweep(): Promise<void> {
    if (this.stopped) return;
    const now = Date.now();
    const entries = [...this.leases.values()];
    const parked = (e: LeaseEntry) => e.value.state === 'released' && (e.value.reason === 'parked' || e.value.reason === 'handover');
    const toClean = this.parkedCleanupPass.due(now)
      ? new Set(this.parkedCleanupTurn.next(entries.filter((e) => parked(e) && this.mine(e.runId))).map((e) => e.runId))
      : null;
    for (const entry of entries) {
      const v = entry.value;
      if (!this.mine(entry.runId)) continue;
      try {
        // parked and handed-over leases are what a wake takes again at the next epoch: never fenced nor forgotten early
        if (parked(entry)) {
          await this.sweepParked(entry, now, toClean?.has(entry.runId) ?? false);
          continue;
        }
        if (v.state === 'held') {
          const verdict = this.verdictOn(entry, now);
          if (verdict.kind === 'gone') await this.fence(entry, 'lease-expired', verdict.detail);
          else if (verdict.kind === 'late' && this.spared.get(entry.runId) !== entry.revision) {
            this.spared.set(entry.runId, entry.revision);
            const lastBeat = this.heartbeats.get(v.holder.instance)?.writtenAt.toISOString() ?? null;
            // what the sweep knows is that the last beat is within its TTL, not that the process is alive now
            this.logger.warn(
              { runId: entry.runId, epoch: v.epoch, holder: v.holder.instance, lastBeat, fenceBy: new Date(verdict.fenceBy).toISOString() },
              "lease expired but its holder's last heartbeat is within its TTL: late, not gone; not fenced yet",
            );
          }
        } else if (v.state === 'released' && v.reason === 'stopping') {
          await this.fence(
            entry,
            'runtime-stopped',
            `runtime ${v.holder.instance} stopped and released lease epoch ${v.epoch} with the Run unfinished`,
          );
        } else if (v.state === 'released') {
          await this.store.forget(entry.runId);
          this.drop(entry.runId);
        } else if (v.state === 'fenced' && !this.wasRecorded(entry.runId, `fence/${v.epoch}`)) {
          // fenced in the bucket but not yet (or not known to be) in the log: a previous attempt failed
          await this.recordFence(entry, 'lease-expired', `lease epoch ${v.epoch} of ${v.holder.instance} was fenced`);
        }
      } catch (e) {
        // NATS did not answer (JetStream still recovering after a restart, a frozen server): the
        // holders' renewals went unanswered too, so the reconnection grace counts from now, not
        // from the TCP reconnection (seen: a restarted server that took 8 s under load to answer
        // JetStream requests, past the grace, and a live holder fenced)
        if (isTransientNatsError(e)) this.grace.unanswered();
        this.logger.warn({ runId: entry.runId, error: (e as Error).message }, 'lease sweep step failed; retried on the next sweep');
      }
    }
  }

  /**
   * A parked lease: decides the wait's expiry once it passed (plus one TTL, so that an answer
   * admission accepted just before the expiry is in the log first), and forgets the key of a Run
   * that ended (on the slower clean-up pass).
   */
  private async sweepParked(entry: LeaseEntry, now: number, cleanup: boolean): Promise<void> {
    const v = entry.value;
    if (v.state !== 'released') return;
    const key = `${entry.runId}/${v.wakeBy}`;
    const due = v.wakeBy !== undefined && !this.expiryDecided.has(key) && now > Date.parse(v.wakeBy) + this.settings.leaseTtlMs;
    if (!due && !cleanup) return;
    const { facts, appended } = await this.commands.handle(entry.runId, (f, at) => (due ? decide(f, { type: 'WaitExpired' }, at) : []));
    if (due) this.expiryDecided.add(key);
    if (appended.length) this.logger.warn({ runId: entry.runId, wakeBy: v.wakeBy }, 'wait expired unanswered: Run fenced');
    if (appended.length || facts.settled || facts.fenced || facts.finished) {
      await this.store.forget(entry.runId);
      this.drop(entry.runId);
      this.expiryDecided.delete(key);
    }
  }

  /**
   * True when the Run's log says it is parked at its last turn (K10: `parkedAtLastTurn`, whether or
   * not its wake is recorded yet): then a lost lease loses nothing. The decider's `lease.parked`
   * closes the lost holder's epoch in the log first (K6), then the lease is marked parked
   * (compare-and-set, with the earliest unanswered wait's expiry) instead of fenced, so the wake
   * takes it at the next epoch: a wake already recorded is redelivered to the runtime until then.
   */
  private async parkedInstead(entry: LeaseEntry, reason: 'lease-expired' | 'runtime-stopped', detail: string): Promise<boolean> {
    const read = await this.commands.folds.read(entry.runId);
    if (read.cancelRequested || !parkedAtLastTurn(read)) return false;
    const { epoch, holder } = entry.value;
    const { facts, appended } = await this.commands.handle(entry.runId, (f, now) =>
      decide(f, { type: 'LeaseLost', epoch, holder, reason, detail }, now),
    );
    // decided from a fresher read that fenced after all: the ordinary path marks the lease fenced
    if (facts.parkedEpoch < epoch && !appended.some((e) => e.event.type === 'lease.parked')) return false;
    const wakeBy = unansweredWaits(facts)
      .map((w) => w.expiresAt)
      .sort()[0];
    try {
      await this.store.park(entry, wakeBy);
      this.logger.log(
        { runId: entry.runId, epoch, woken: parkedOn(facts) === null },
        'lease of a parked Run lost by its holder: epoch closed, lease marked parked, not fenced',
      );
    } catch {
      const fresh = await this.store.get(entry.runId).catch(() => undefined);
      if (fresh && this.leases.get(entry.runId) === entry) this.leases.set(entry.runId, fresh);
    }
    return true;
  }

  /**
   * True when the Run's log shows `run.handed_over` at the lost lease's epoch (its draining holder
   * recorded the transfer, then was lost before releasing the lease `handover`): the lease is then
   * marked handed over (compare-and-set) instead of fenced, and the handover takes it at the next epoch.
   */
  private async handedOverInstead(entry: LeaseEntry): Promise<boolean> {
    const facts = await this.commands.folds.read(entry.runId);
    if (!lostAfterHandover(facts, entry.value.epoch)) return false;
    try {
      await this.store.handOver(entry);
      this.logger.log(
        { runId: entry.runId, epoch: entry.value.epoch },
        'lease of a handed-over Run lost by its holder: marked handed over, not fenced',
      );
    } catch {
      const fresh = await this.store.get(entry.runId).catch(() => undefined);
      if (fresh && this.leases.get(entry.runId) === entry) this.leases.set(entry.runId, fresh);
    }
    return true;
  }

  /**
   * What a held lease's expiry means now ({@link expiredLease}). While recovery's own connection
   * is down nothing expires, and after it is back the holder gets a full TTL plus the time every
   * other client may take to reconnect: renewals recovery could not hear are not missed renewals
   * (ConnectionGrace, K10).
   */
  private verdictOn(entry: LeaseEntry, now: number): ExpiredLeaseVerdict {
    const v = entry.value;
    if (v.state !== 'held') return { kind: 'held' };
    const storedExpiresAt = leaseExpiresAt(entry);
    const expiresAt = Math.max(storedExpiresAt, this.grace.judgeFrom(v.ttlMs));
    const beat = this.heartbeats.get(v.holder.instance);
    return expiredLease(
      { epoch: v.epoch, holder: v.holder, ttlMs: v.ttlMs, expiresAt, storedExpiresAt },
      // a beat vouches for the holder for at least one lease TTL here, whatever the
      // (shorter) membership TTL it was written with: on a loaded machine a holder is not
      // judged gone for a few late beats (K10: late is not gone)
      beat
        ? {
            freshUntil: Math.max(heartbeatFreshUntil(beat), beat.writtenAt.getTime() + v.ttlMs),
            lastAt: beat.writtenAt.getTime(),
            everyMs: heartbeatEveryMs(beat.value.ttlMs),
          }
        : null,
      now,
    );
  }

  /** Marks the lease fenced (compare-and-set), then fences the Run in the log (a parked Run's lease is marked parked, a handed-over one handed over, instead). */
  private async fence(entry: LeaseEntry, reason: 'lease-expired' | 'runtime-stopped', detail: string): Promise<void> {
    if (await this.handedOverInstead(entry)) return;
    if (await this.parkedInstead(entry, reason, detail)) return;
    // the reads above may have waited through a NATS outage (the command handler retries them):
    // an expiry is judged again, on the connection as it is now, before the compare-and-set
    if (reason === 'lease-expired' && this.verdictOn(entry, Date.now()).kind !== 'gone') return;
    try {
      await this.store.fence(entry);
    } catch (e) {
      if (isTransientNatsError(e)) this.grace.unanswered();
      // the holder renewed or released it meanwhile: take the stored entry (the watch may have
      // missed it across a NATS restart) so the next sweep judges the current one
      const fresh = await this.store.get(entry.runId).catch(() => undefined);
      if (fresh && this.leases.get(entry.runId) === entry) this.leases.set(entry.runId, fresh);
      return;
    }
    // counted once per lease epoch: only one compare-and-set can fence it
    if (reason === 'lease-expired') leaseExpiriesTotal.inc();
    this.logger.warn({ runId: entry.runId, epoch: entry.value.epoch, reason }, 'execution lease lost: fencing the Run');
    await this.recordFence(entry, reason, detail);
  }

  private async recordFence(entry: LeaseEntry, reason: 'lease-expired' | 'runtime-stopped', detail: string): Promise<void> {
    const { epoch, holder } = entry.value;
    await this.commands.handle(entry.runId, (f, now) => decide(f, { type: 'LeaseLost', epoch, holder, reason, detail }, now));
    this.markRecorded(entry.runId, `fence/${epoch}`);
  }

  private wasRecorded(runId: string, what: string): boolean {
    return this.recorded.get(runId)?.has(what) ?? false;
  }

  /** Notes a fence recorded in the log; nothing once the Run's lease key is gone (its Run ended). */
  private markRecorded(runId: string, what: string): void {
    if (!this.leases.has(runId)) return;
    const set = this.recorded.get(runId) ?? new Set<string>();
    set.add(what);
    this.recorded.set(runId, set);
  }

  /**
   * A Run settled (its `run.settled` delivered): a lease it left released (parked or handed over,
   * never woken again) is forgotten now, key and memory, instead of by a clean-up pass that reads
   * the Run to find it ended. A held lease is left to the sweep. Idempotent.
   * @throws NATS errors from deleting the key (the delivery is retried).
   */
  async settled(runId: string): Promise<void> {
    const entry = this.leases.get(runId);
    if (entry?.value.state !== 'released') return;
    await this.store.forget(runId);
    this.drop(runId);
  }

  /**
   * Forgets a Run whose lease key is gone (deleted when the Run ended): its lease, what was noted
   * about it and its fold. A key written again later (a wake) is followed afresh; a grant noted again is
   * decided again, which appends nothing when the log has it (the decider is idempotent).
   */
  private drop(runId: string): void {
    this.leases.delete(runId);
    // the Run's fold (its events, kept by the command handler for up to 2,000 Runs) goes too
    this.commands.folds.forget(runId);
    this.recorded.delete(runId);
    this.spared.delete(runId);
  }

  async onApplicationShutdown(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.watch?.stop();
    this.heartbeatWatch?.stop();
    await this.sweeping;
  }
}
