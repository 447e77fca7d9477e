import { Inject, Injectable, Logger, Optional, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import type { KvWatchEntry } from '@nats-io/kv';
import { LeaseStore, PartitionOwnership, partitionOf } from '@runplane/eventlog';
import { RunCommandHandler } from '@runplane/service-kit';
import { InTurn, Periodic, retry, type KvWatch } from '@runplane/kit';
import { decide } from './decide.js';
import { nextProgressCheck } from './progress-checks.js';
import { DeadlineStore, type DeadlineEntry } from './deadlines.js';
import { RECOVERY_LEASES, RECOVERY_SETTINGS, type RecoverySettings } from './lease-watcher.service.js';

export const RECOVERY_DEADLINES = Symbol('RECOVERY_DEADLINES');

/** How often recorded deadlines, due or not, are checked against their Runs (to forget the entries of Runs that ended), ms. */
const CLEANUP_EVERY_MS = 30_000;
/**
 * Most deadlines one clean-up pass checks (each check reads its Run from the log), taken in turn:
 * a settled Run's entry is forgotten at its settlement ({@link DeadlineWatcher.settled}), so the
 * pass is only the safety net. Checking every one each pass read 10,000 Runs every 30 s with
 * 10,000 Runs parked, and recovery's heap rose past 180 MiB while nothing happened.
 */
const CLEANUP_BATCH = 200;

/**
 * Stops Runs whose deadline passed while nobody stopped them (K10). Recovery records each admitted
 * Run's deadline in the `<prefix>_deadlines` bucket ({@link DeadlineStore}, from
 * `CancelController.onAdmitted`); this watcher follows the bucket (so a restarted recovery knows
 * every deadline again) and on each sweep decides `DeadlinePassed` for every Run past its deadline
 * plus the lease TTL and whose lease no runtime holds: a holder wakes its Runs every third of a
 * TTL and stops them itself at their deadline (keeping the outcome of a model turn in flight),
 * and a holder that is gone loses its lease to the lease watcher. The decider fences the Run (`run.fenced`, reason `deadline`) unless it
 * finished, is settled or fenced; the lifecycle settles it `failed`. The entry is then forgotten,
 * as is a Run's at its delivered `run.settled` ({@link DeadlineWatcher.settled}) and, on a slower
 * pass that reads the Run, every entry whose Run already finished, was fenced or settled (one
 * whose settlement this replica did not see: it was down, or the partition was elsewhere).
 *
 * The same sweep keeps each Run's no-progress clock (K7): it reads a Run when its clock may have
 * run out (first when it is seen, then at its last progress plus `noProgressSeconds`, from the
 * Run's own log) and decides `NoProgress`, which fences it `no-progress` whoever holds its lease
 * (a runtime receiving only keep-alive chunks still renews it: renewals are not progress). So a
 * Run costs one read per limit, not one per sweep (a Run this process saw admitted is first read
 * one limit after its admission); a restarted recovery reads every Run once. A Run that parks (on
 * a human or a child, K10) before its first check is not read at all ({@link DeadlineWatcher.parked}),
 * and one found parked is not read again, until its wake is delivered
 * ({@link DeadlineWatcher.woken}) or its partition comes to this replica again
 * ({@link nextProgressCheck}): with 10,000 Runs parked for hours, re-reading each once per limit
 * (300 s by default) was 33 reads a second for nothing.
 *
 * With several recovery replicas each sweeps only the Runs of the partitions it owns
 * ({@link PartitionOwnership.owns}); every replica follows the whole bucket, so a partition that
 * moves to it is swept at its next sweep.
 */
@Injectable()
export class DeadlineWatcher implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger('recovery');
  private readonly deadlines = new Map<string, DeadlineEntry>();
  /** When each Run's no-progress clock may run out next (epoch ms; absent: read it on the next sweep; Infinity: nothing to judge until a wake). */
  private readonly progressDue = new Map<string, number>();
  /** Runs whose wake was delivered since their last no-progress check began (a check that read the log before the wake re-arms at once). */
  private readonly woke = new Set<string>();
  /** Runs this replica saw admitted and has neither read nor seen woken since: a park delivered for one of them is its first ({@link DeadlineWatcher.parked}). */
  private readonly unread = new Set<string>();
  private stopFollowingOwnership: (() => void) | null = null;
  private watch: KvWatch | null = null;
  private timer: NodeJS.Timeout | null = null;
  private sweeping: Promise<void> | null = null;
  private readonly cleanupPass = new Periodic(CLEANUP_EVERY_MS);
  /** The deadlines the next clean-up pass checks: at most {@link CLEANUP_BATCH}, in turn. */
  private readonly cleanupTurn = new InTurn(CLEANUP_BATCH);
  private stopped = false;

  constructor(
    /** Recovery's one command handler (its folds are shared with the other adapters of the service). */
    private readonly commands: RunCommandHandler,
    @Inject(RECOVERY_DEADLINES) private readonly store: DeadlineStore,
    @Inject(RECOVERY_SETTINGS) private readonly settings: RecoverySettings,
    @Inject(RECOVERY_LEASES) private readonly leases: LeaseStore,
    /** This replica's partitions; absent = it owns every Run (one recovery process). */
    @Optional() private readonly ownership?: PartitionOwnership,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    // follows the bucket for as long as recovery runs; a watch that ends (NATS restarted) is opened again
    this.watch = await this.store.watch((e) => this.take(e), {
      reopenAfterMs: this.settings.sweepMs,
      onError: (what, error) =>
        this.logger.warn({ error: error.message }, what === 'failed' ? 'deadline watch failed; watching again' : 'could not watch the deadlines yet'),
    });
    // a partition that comes (back) to this replica may hold parked Runs woken while it was elsewhere
    this.stopFollowingOwnership =
      this.ownership?.onChange(({ added }) => {
        if (added.length) this.recheckParked((runId) => added.includes(partitionOf(runId, this.ownership!.partitionCount)));
      }) ?? null;
    this.timer = setInterval(() => {
      this.sweeping ??= this.sweep().finally(() => (this.sweeping = null));
    }, this.settings.sweepMs);
  }

  /**
   * Records a Run's deadline (on `run.admitted`), durably first, then in memory, with when its
   * no-progress clock may first run out (admission + `noProgressSeconds`, epoch ms; null: no such
   * limit), so a new Run is not read before then.
   */
  async record(runId: string, deadlineAt: string, firstProgressDue: number | null = null): Promise<void> {
    await this.store.record(runId, deadlineAt);
    this.deadlines.set(runId, { runId, deadlineAt });
    if (!this.progressDue.has(runId)) {
      this.progressDue.set(runId, firstProgressDue ?? Infinity);
      this.unread.add(runId);
    }
  }

  /**
   * Notes a Run's first park (a delivered `wait.opened` or `child.run.requested`): a Run parked on
   * a human or a child has no no-progress clock until its wake, so it is not read at all
   * ({@link nextProgressCheck}). Only for a Run not read nor woken since its admission was seen: a
   * park delivered late, after its wake or a check, is left to the check (it reads the Run).
   */
  parked(runId: string): void {
    if (this.unread.delete(runId) && this.deadlines.has(runId)) this.progressDue.set(runId, Infinity);
  }

  /**
   * Forgets a settled Run's deadline (on its `run.settled`): the entry is purged from the bucket
   * (every replica's watch then forgets it too) and from memory, so the clean-up pass need not
   * read the Run's log to find that it ended. Idempotent (a redelivery purges nothing more).
   * @throws NATS errors of the purge (the delivery is retried).
   */
  async settled(runId: string): Promise<void> {
    if (!this.deadlines.has(runId)) return;
    await this.store.forget(runId);
    this.forgetRun(runId);
  }

  /**
   * Re-arms a Run's no-progress check at its wake (a delivered `wait.answered` or
   * `child.run.settled`, which restart its clock, K7): a parked Run is not read until then
   * ({@link nextProgressCheck}). The next sweep reads it; a check reading it at this moment re-arms
   * itself. Nothing for a Run this replica does not track.
   */
  woken(runId: string): void {
    this.unread.delete(runId);
    if (!this.deadlines.has(runId)) return;
    this.progressDue.delete(runId);
    this.woke.add(runId);
  }

  /** Forgets when the matching Runs with nothing to judge are due, so that the next sweep reads each of them once again. */
  private recheckParked(matches: (runId: string) => boolean): void {
    for (const [runId, due] of this.progressDue) if (due === Infinity && matches(runId)) this.progressDue.delete(runId);
  }

  /** Keeps one entry of the bucket: a deadline, or a Run whose deadline is gone (it ended). */
  private take(e: KvWatchEntry): void {
    if (e.operation !== 'PUT') {
      this.forgetRun(e.key);
      return;
    }
    const entry = DeadlineStore.parse(e);
    // a Run known only from the bucket (recovery restarted) has its no-progress clock read on the next sweep
    if (entry) this.deadlines.set(entry.runId, entry);
    else this.logger.warn({ key: e.key, revision: e.revision }, 'a deadline entry that is not a deadline value: ignored');
  }

  /**
   * Forgets a Run whose deadline entry is gone (the Run ended): its deadline, its progress clock
   * and its fold (kept by the command handler for up to 2,000 Runs: every Run the progress and
   * clean-up passes read stayed there for the life of the process).
   */
  private forgetRun(runId: string): void {
    this.deadlines.delete(runId);
    this.progressDue.delete(runId);
    this.woke.delete(runId);
    this.unread.delete(runId);
    this.commands.folds.forget(runId);
  }

  /** Decides every due deadline; now and then checks every entry to forget those of ended Runs. */
  private async sweep(): Promise<void> {
    if (this.stopped) return;
    const now = Date.now();
    const entries = [...this.deadlines.values()].filter((e) => !this.ownership || this.ownership.owns(e.runId));
    const toClean = this.cleanupPass.due(now) ? new Set(this.cleanupTurn.next(entries).map((e) => e.runId)) : null;
    for (const entry of entries) {
      if (this.stopped) return;
      const cleanup = toClean?.has(entry.runId) ?? false;
      const past = now > Date.parse(entry.deadlineAt) + this.settings.leaseTtlMs;
      if (!past && now >= (this.progressDue.get(entry.runId) ?? 0)) await this.checkProgress(entry.runId);
      if (!past && !cleanup) continue;
      try {
        // a Run whose lease is held is executed: its holder stops it at the deadline itself, or
        // loses the lease to the lease watcher (read from the bucket, not from a watch that may lag)
        const due = past && (await this.leases.get(entry.runId))?.value.state !== 'held';
        if (!due && !cleanup) continue;
        // only a due deadline is decided; the clean-up pass merely reads the Run (it never fences)
        const { facts, appended } = await this.commands.handle(entry.runId, (f, at) => (due ? decide(f, { type: 'DeadlinePassed' }, at) : []));
        if (appended.length) this.logger.warn({ runId: entry.runId, deadlineAt: entry.deadlineAt }, 'deadline passed: Run fenced');
        if (due || facts.settled || facts.fenced || facts.finished) {
          await this.store.forget(entry.runId);
          this.forgetRun(entry.runId);
        }
      } catch (e) {
        this.logger.warn({ runId: entry.runId, error: (e as Error).message }, 'deadline sweep step failed; retried on the next sweep');
      }
    }
  }

  /** Decides `NoProgress` for one Run and notes when its clock may run out next (see the class comment). */
  private async checkProgress(runId: string): Promise<void> {
    this.woke.delete(runId);
    this.unread.delete(runId);
    try {
      const { facts, appended } = await this.commands.handle(runId, (f, at) => decide(f, { type: 'NoProgress' }, at));
      if (appended.length) {
        this.logger.warn({ runId, lastProgressAt: facts.lastProgressAt, reason: 'no-progress' }, 'no progress within the limit: Run fenced');
        await this.stopHolder(runId);
      }
      const now = Date.now();
      // fenced now: nothing more to judge (a conflict that decided nothing is tried again: nextProgressCheck)
      const due = appended.length ? Infinity : nextProgressCheck(facts, now);
      // woken while the log was being read (the facts may predate the wake): read it again on the next sweep
      if (due === Infinity && this.woke.delete(runId) && !(facts.settled || facts.fenced || facts.finished)) return;
      if (this.deadlines.has(runId)) this.progressDue.set(runId, due);
    } catch (e) {
      this.logger.warn({ runId, error: (e as Error).message }, 'no-progress check failed; retried on the next sweep');
    }
  }

  /**
   * Marks a Run's held lease fenced (compare-and-set, retried while its holder renews it), so that
   * the holder's next renewal fails and it aborts the model request still streaming keep-alive
   * chunks at once, instead of holding it to its timeout. The fence in the log already refuses its
   * writes (K6); this only stops the work sooner. Nothing when no lease is held.
   */
  private async stopHolder(runId: string): Promise<void> {
    await retry('fenceRace', async () => {
      const entry = await this.leases.get(runId).catch(() => null);
      if (entry?.value.state !== 'held') return;
      await this.leases.fence(entry); // throws when renewed meanwhile: read it again
    }).catch(() => this.logger.warn({ runId }, 'could not mark the lease fenced (renewed every time); its holder stops at its next write'));
  }

  async onApplicationShutdown(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.stopFollowingOwnership?.();
    this.watch?.stop();
    await this.sweeping;
  }
}
