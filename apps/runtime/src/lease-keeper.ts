import type { Subscription } from '@nats-io/transport-node';
import { Logger } from '@nestjs/common';
import {
  EventLog,
  extractTraceContext,
  LeaseStore,
  renewalVerdict,
  RetryLater,
  runtimeNudgeSubject,
  traceContext,
  traceHeaders,
  type HeldLease,
} from '@runplane/eventlog';
import { handedOverAt, type RunFacts } from '@runplane/run-facts';
import { RenewalSlots } from '@runplane/kit';
import { leaseRenewalsTotal, runQueueSeconds } from '@runplane/service-kit';
import { wakeAwaitsRecovery } from './parking.js';

/** What the lease keeper tells the Run executor. */
export interface LeaseKeeperEvents {
  /** The Run must be decided again (a renewal tick found it idle for a lease TTL, or a peer nudged this holder). */
  wake(runId: string): void;
  /** The lease was lost (fenced, taken): execution of that Run stops here at once (its model request is aborted). */
  lost(runId: string): void;
}

/**
 * The runtime's lease keeper (K6, K8, K10): takes, holds, renews and releases the execution leases
 * of this replica (KV bucket `<prefix>_leases`, compare-and-set through {@link LeaseStore}), and
 * nothing else. Every Run the executor decides is decided under a lease this keeper holds.
 *
 * - {@link take}: the first wake of a Run takes its lease; a Run whose lease was ever taken,
 *   released or fenced is never taken again (no resume in place, K10), except a parked Run whose
 *   wake is recorded, or a Run its draining holder handed over at that very epoch: both are taken
 *   at the next epoch. A Run held by another live replica nudges that holder at once (core NATS,
 *   {@link runtimeNudgeSubject}), which decides it again right away.
 * - A timer renews every held lease every third of its TTL, each on its own (one renewal per lease
 *   at a time, all concurrently: one slow round trip never delays another lease), and wakes a Run
 *   not woken within a lease TTL (the safety net for a wake that reached another replica and whose
 *   nudge was lost). A renewal that finds the lease changed reports it {@link LeaseKeeperEvents.lost}.
 *   A renewal that fails because NATS is unreachable is retried on the next tick; when the
 *   connection comes back every held lease is renewed at once, without waiting for a renewal the
 *   outage left unanswered (K10: a NATS restart is not an expiry).
 */
export class LeaseKeeper {
  private readonly logger = new Logger('runtime');
  /** Leases this replica holds, by Run. */
  private readonly held = new Map<string, HeldLease>();
  /** One renewal per lease at a time, unless it waited a whole tick or NATS reconnected ({@link RenewalSlots}). */
  private readonly renewing: RenewalSlots<string>;
  /** When each held Run was last woken (a delivery, a nudge, a tick), ms since the epoch. */
  private readonly lastWake = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;
  private nudges: Subscription | null = null;
  private events: LeaseKeeperEvents | null = null;
  /** Renewals stopped (the drain's bound passed, or the process shuts down). */
  private stopped = false;
  /** Wakes stopped (a draining replica keeps its leases but starts nothing). */
  private quiet = false;

  /**
   * @param log the runtime's event log (its writer is the holder recorded in every lease).
   * @param leases the lease bucket.
   * @param ttlMs the lease time-to-live, ms (`RUNPLANE_LEASE_TTL_MS`); renewed every third of it.
   */
  constructor(
    private readonly log: EventLog,
    private readonly leases: LeaseStore,
    readonly ttlMs: number,
  ) {
    // renewals and wakes run every tick: a third of the TTL (at least 100 ms)
    const tickMs = Math.max(100, Math.floor(ttlMs / 3));
    this.renewing = new RenewalSlots(tickMs);
    this.timer = setInterval(() => this.renewAll(false), tickMs);
    void this.followReconnections();
  }

  /** Starts telling `events` about wakes and lost leases, and follows this replica's nudge subject. */
  bind(events: LeaseKeeperEvents): void {
    this.events = events;
    this.nudges ??= this.followNudges();
  }

  /** The lease this replica holds on the Run, if any. */
  holding(runId: string): HeldLease | undefined {
    return this.held.get(runId);
  }

  /** The Runs this replica holds. */
  heldRuns(): string[] {
    return [...this.held.keys()];
  }

  /** Notes that the Run was woken now (a delivery): the renewal tick does not wake it again within a lease TTL. */
  woken(runId: string): void {
    this.lastWake.set(runId, Date.now());
  }

  /**
   * Takes the Run's lease for this replica, from the Run's `facts` as the log shows them.
   * @returns the lease, or null when another replica holds it, or it was released or fenced for good (never resumed here).
   * @throws RetryLater when the wake must be redelivered: the Run was handed over at the epoch whose lease is not released yet, or a lost holder's lease awaits recovery after the Run parked (K10: a wake is never dropped).
   */
  async take(runId: string, facts: RunFacts): Promise<HeldLease | null> {
    let taken = await this.leases.acquire(runId, this.log.writer, this.ttlMs);
    // a parked Run whose wake is recorded (the log says it is no longer parked) is taken again, at the next epoch
    if ('held' in taken && taken.by.value.state === 'released' && taken.by.value.reason === 'parked') {
      taken = await this.leases.resume(taken.by, this.log.writer, this.ttlMs);
      if (!('held' in taken)) this.logger.log({ runId, epoch: taken.epoch }, 'parked Run woken: lease taken again');
    }
    // a Run its draining holder handed over at this very epoch (the log says so: the handover is the wake) is taken at the next
    const handed = handedOverAt(facts);
    if ('held' in taken && taken.by.value.state === 'released' && taken.by.value.reason === 'handover' && handed === taken.by.value.epoch) {
      taken = await this.leases.resume(taken.by, this.log.writer, this.ttlMs);
      if (!('held' in taken)) this.logger.log({ runId, epoch: taken.epoch, from: facts.handedOver?.holder.instance }, 'handed-over Run taken');
    }
    if ('held' in taken) {
      const by = taken.by.value;
      // handed over at this epoch, the lease not released yet (its holder does that next, or recovery for a lost one)
      if (handed !== null && handed === by.epoch && by.state !== 'fenced') {
        throw new RetryLater(`Run handed over at epoch ${by.epoch}; lease still ${by.state}`, Math.min(100, this.retryWakeMs()));
      }
      // held by another live replica: tell the holder at once (it decides again now, not at its next renewal)
      if (by.state === 'held' && by.holder.instance !== this.log.writer.instance) this.nudge(by.holder.instance, runId);
      // a wake recorded while the lease of a lost holder that had parked the Run is not released yet: recovery
      // marks it parked at its expiry (K10), so the wake is redelivered until then, never dropped
      if (wakeAwaitsRecovery(facts, by)) throw new RetryLater(`lease ${by.state} at epoch ${by.epoch} after the Run parked`, this.retryWakeMs());
      return null; // another instance executes it, or it was released or fenced: never resumed here
    }
    this.held.set(runId, taken);
    // epoch 1 is created once per Run (acquire): the Run's queue time, admission to its first lease
    if (taken.epoch === 1 && facts.admitted) runQueueSeconds.observe((Date.now() - Date.parse(facts.admitted.at)) / 1000);
    return taken;
  }

  /**
   * Gives the Run's lease up (if held), with the reason recovery reads (`parked` with the wait's
   * expiry `wakeBy`, `handover`, `stopping`, `finished`). A renewal of this holder that landed
   * just before (a renewal is never coordinated with the release) moved the lease's revision: the
   * release reads it again and releases that revision (up to 3 times). Only positive evidence of
   * another writer (fenced, taken, another epoch) keeps it from releasing, as for a renewal (K6);
   * left held, the lease would hold a parked Run's wake back until recovery marks it parked after
   * its expiry, and its no-progress limit could run out meanwhile.
   * @returns true when released (also when a release whose answer was lost was stored after all).
   */
  async release(runId: string, reason: 'finished' | 'stopping' | 'parked' | 'handover', wakeBy?: string): Promise<boolean> {
    const lease = this.held.get(runId);
    if (!lease) return false;
    this.held.delete(runId);
    this.lastWake.delete(runId);
    const instance = this.log.writer.instance;
    let at = lease;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.leases.release(at, this.log.writer, reason, wakeBy);
        return true;
      } catch (e) {
        const current = await this.leases.get(runId).catch(() => undefined);
        const v = current?.value;
        if (v?.state === 'released' && v.epoch === lease.epoch && v.holder.instance === instance && v.reason === reason) return true;
        const verdict = renewalVerdict(at, current, instance);
        if (verdict.kind === 'adopt' && attempt < 3) {
          at = { ...at, revision: verdict.revision };
          continue;
        }
        this.logger.warn({ runId, reason, error: (e as Error).message }, 'could not release the lease (fenced or changed meanwhile)');
        return false;
      }
    }
  }

  /** A draining replica: leases are still renewed (a model request still finishing), but nothing is woken and no nudge is followed. */
  quieten(): void {
    this.quiet = true;
    this.nudges?.unsubscribe();
    this.nudges = null;
  }

  /** Stops renewing (the drain's bound passed, or shutdown): what is still held expires or is released by the caller. */
  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
    this.nudges?.unsubscribe();
    this.nudges = null;
  }

  /** How long a wake waiting for recovery to mark a lost holder's lease parked is held back, ms: a third of the TTL. */
  private retryWakeMs(): number {
    return Math.max(250, Math.floor(this.ttlMs / 3));
  }

  /**
   * Tells the runtime process `instance` (the holder of the Run's lease) that the Run was woken: best
   * effort, never awaited. The nudge carries the active trace context (`traceparent`, when tracing
   * is on), so the holder's wake continues the trace of the event that woke the Run here.
   */
  private nudge(instance: string, runId: string): void {
    try {
      const headers = traceHeaders();
      this.log.nc.publish(runtimeNudgeSubject(this.log.space, instance), runId, headers ? { headers } : undefined);
    } catch (e) {
      this.logger.warn({ runId, instance, error: (e as Error).message }, 'could not nudge the lease holder (its renewal tick wakes the Run)');
    }
  }

  /**
   * Follows this process's nudge subject: a peer that got a wake for a Run whose lease this process
   * holds says so at once, and the Run is decided again right away, exactly as the renewal tick's
   * wake does (nothing is decided from the nudge itself: the log is read again).
   */
  private followNudges(): Subscription | null {
    if (this.log.nc.isClosed()) return null;
    return this.log.nc.subscribe(runtimeNudgeSubject(this.log.space, this.log.writer.instance), {
      callback: (err, msg) => {
        if (err || this.quiet) return;
        const runId = msg.string();
        if (!this.held.has(runId)) return;
        this.lastWake.set(runId, Date.now());
        // the wake continues the trace of the event that woke the Run on the peer (its nudge's traceparent)
        traceContext.with(extractTraceContext(msg.headers), () => this.events?.wake(runId));
      },
    });
  }

  /**
   * Renews every held lease, all concurrently, and wakes a Run right after its own renewal when it
   * was not woken within a lease TTL (no read of the log on the hot path: each tick's wake used to
   * read the Run from the log). A lease whose previous renewal is still waiting on NATS is skipped
   * unless that renewal has waited a whole tick or `reconnected` is true (K10: a NATS restart is
   * not an expiry, so the holder renews as soon as NATS answers again): the one left waiting can
   * no longer change what is held, since a renewal only replaces the exact lease it renewed, and
   * whichever of the two lands first, the other's compare-and-set fails and adopts it
   * ({@link renewalVerdict}).
   */
  private renewAll(reconnected: boolean): void {
    if (this.stopped) return;
    const now = Date.now();
    for (const [runId, lease] of this.held) {
      const answered = this.renewing.begin(runId, reconnected, now);
      if (!answered) continue;
      void this.renewOne(runId, lease)
        .then((renewed) => {
          if (!renewed || this.quiet) return;
          if (Date.now() - (this.lastWake.get(runId) ?? 0) < this.ttlMs) return;
          this.lastWake.set(runId, Date.now());
          this.events?.wake(runId);
        })
        .finally(answered);
    }
  }

  /** Renews every held lease at once whenever the NATS connection is back (see {@link renewAll}). */
  private async followReconnections(): Promise<void> {
    try {
      for await (const s of this.log.nc.status()) {
        if (this.stopped) return;
        if (s.type !== 'reconnect') continue;
        this.logger.log({ leases: this.held.size }, 'NATS connection back: renewing every held lease now');
        this.renewAll(true);
      }
    } catch {
      // the connection closed: nothing left to renew on it
    }
  }

  /** Renews one held lease. @returns true when renewed. */
  private async renewOne(runId: string, lease: HeldLease): Promise<boolean> {
    if (this.held.get(runId) !== lease) return false;
    try {
      const next = await this.leases.renew(lease, this.log.writer);
      if (this.held.get(runId) === lease) this.held.set(runId, next);
      leaseRenewalsTotal.labels('ok').inc();
      return true;
    } catch (e) {
      const current = await this.leases.get(runId).catch(() => undefined);
      const verdict = renewalVerdict(lease, current, this.log.writer.instance);
      leaseRenewalsTotal.labels(verdict.kind === 'adopt' ? 'adopted' : verdict.kind).inc();
      if (verdict.kind === 'retry') return false; // NATS unreachable (or restarting): try again next tick
      // superseded meanwhile (a later renewal landed, or the lease was released): what is held now is not this lease's to judge
      if (this.held.get(runId) !== lease) return false;
      if (verdict.kind === 'adopt') {
        // Still ours: a renewal buffered or timed out during an outage was stored after all (its
        // revision moved on). Adopt the stored revision; only positive evidence is a loss.
        this.held.set(runId, { ...lease, revision: verdict.revision });
        return false;
      }
      this.logger.warn(
        { runId, epoch: lease.epoch, state: verdict.state, error: (e as Error).message },
        'lease lost (fenced): execution of this Run stops here',
      );
      this.held.delete(runId);
      this.lastWake.delete(runId);
      this.events?.lost(runId);
      return false;
    }
  }
}
