import { existsSync } from 'node:fs';
import type { Subscription } from '@nats-io/transport-node';
import { Controller, Inject, Logger, type BeforeApplicationShutdown, type OnModuleDestroy, UseFilters } from '@nestjs/common';
import { PassThroughEventErrors } from '@runplane/eventlog/nest';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { EventData, RunEvent, StoredEvent } from '@runplane/contracts';
import {
  EventLog,
  isPermanentAppendError,
  isTransientNatsError,
  LeaseStore,
  liveDeltaSubject,
  renewalVerdict,
  ResultStore,
  RetryLater,
  runtimeNudgeSubject,
  type HeldLease,
} from '@runplane/eventlog';
import { epochSuperseded, handedOverAt, parkedOn, unansweredWaits, type RunFacts } from '@runplane/run-facts';
import { RunCommandHandler } from '@runplane/service-kit';
import { decide, withGrant, type ModelTurnResult } from './decide.js';
import { awaitingContext, decideCarry, earlierRunIds, type EarlierRun } from './context.js';
import { finalizationInstruction, retryWaitMs, type RetryBackoff } from './ledger.js';
import { buildMessages, toolDefinitions } from './messages.js';
import type { ModelClient } from './model-client.js';
import { ParagraphRecorder, progressIntervalMs } from './paragraphs.js';
import { wakeAwaitsRecovery } from './parking.js';

export const MODEL_CLIENT = Symbol('MODEL_CLIENT');
export const LEASES = Symbol('LEASES');
export const RUNTIME_SETTINGS = Symbol('RUNTIME_SETTINGS');

/** Settings of the runtime (from contracts' LeaseConfig). */
export interface RuntimeSettings {
  /** Lease time-to-live, ms; the lease is renewed every third of it. */
  leaseTtlMs: number;
  /** How long a question for a human stays answerable, ms (capped by the Run's deadline). */
  waitTtlMs: number;
  /** Upper bound on one model request's messages, characters of JSON (`RUNPLANE_CONTEXT_MAX_CHARS`, K3); unbounded when absent. */
  contextMaxChars?: number;
  /** The most `max_tokens` one model request asks for (`RUNPLANE_MODEL_MAX_TOKENS`), within the Run's budget (K7). */
  maxTokensPerRequest?: number;
  /** How long before a Run's deadline research stops for the finalization request, ms (`RUNPLANE_FINALIZATION_LEAD_SECONDS`; K9). */
  finalizationLeadMs?: number;
  /** The backoff before retrying a failed model request (`RUNPLANE_MODEL_RETRY_MIN_MS` / `_MAX_MS`, K7); the decider's default when absent. */
  retryBackoff?: RetryBackoff;
  /** FAULT INJECTION, tests only (`RUNPLANE_FAULT_PARK_PAUSE_FILE`): while this file exists, a park waits before releasing the lease. */
  faultParkPauseFile?: string;
  /** The drain bound on SIGTERM, ms (`RUNPLANE_DRAIN_SECONDS`): how long a model request in flight may still finish and be recorded; 0 when absent. */
  drainMs?: number;
}

/** What a drain did with the Runs its replica held (logged, and returned for tests). */
export interface DrainReport {
  handedOver: string[];
  /** Released `stopping` (something was still in flight at the bound, or the log showed no safe point): fenced and settled `interrupted`. */
  stopped: string[];
  /** Parked or finished during the drain (released `parked` / `finished` as usual). */
  other: string[];
}

/** Upper bound on model turns taken in one wake (a guard against a decide loop). */
const MAX_TURNS_PER_WAKE = 64;

/**
 * Executes Runs: a thin adapter over {@link decide}. A Run is executed only while this instance
 * holds its lease (K6): the first wake takes it (a Run whose lease was ever taken, released or
 * fenced is never taken again: no resume in place, K10, except a parked Run whose wake is
 * recorded, at the next epoch), a timer renews it every third of its TTL
 * and also wakes every held Run (so a receipt delivered to another runtime replica is not missed),
 * and it is released when execution finishes. A wake delivered to a replica that does not hold the
 * lease nudges the holder at once (core NATS, {@link runtimeNudgeSubject}), which decides again
 * right away. On SIGTERM the replica drains: it takes no new work, lets each model request in
 * flight finish and be recorded (within `drainMs`), then hands each Run over at that safe point
 * (`run.handed_over` under its epoch, lease released `handover`); another replica takes it at the
 * next epoch, woken by the handover itself. What is still in flight at the bound is aborted and
 * released `stopping` (recovery fences it, the lifecycle settles it `interrupted`). Every event is written under the
 * lease's epoch. When its own `model.turn.requested` was appended, it makes that one model request
 * (the activity) and decides the outcome into events; a request whose `model.turn.requested`
 * another writer stored is never made here (K5, K6). A Run parked on a wait or a child Run
 * (`wait.opened`, `child.run.requested`) has its lease released `parked`: this process keeps
 * nothing of it. Its wake (`wait.answered`, `child.run.settled`) is delivered here, and the
 * lease is taken again at the next epoch (K10).
 */
@Controller()
@UseFilters(PassThroughEventErrors)
export class ExecutionController implements OnModuleDestroy, BeforeApplicationShutdown {
  private readonly logger = new Logger('runtime');
  private results: ResultStore | null = null;
  private readonly commands: RunCommandHandler;
  /** Leases this instance holds, by Run. */
  private readonly held = new Map<string, HeldLease>();
  /** One execution at a time per Run, whatever woke it (a delivery or the renewal timer). */
  private readonly serial = new Map<string, Promise<void>>();
  /** Aborts the model request in flight per Run (when the process stops or the lease is lost). */
  private readonly inFlight = new Map<string, AbortController>();
  private readonly timer: NodeJS.Timeout;
  private stopping = false;
  /** The drain bound passed: what is still in flight is aborted, nothing more is retried. */
  private drainOver = false;
  /** Runs with a model request of their own in flight (the one thing a drain waits for). */
  private readonly modelRequests = new Set<string>();
  private nudges: Subscription | null = null;
  /** Runs whose lease renewal is waiting on NATS (one renewal per lease at a time). */
  private readonly renewing = new Set<string>();
  /** When each held Run was last woken by a delivery or a nudge (ms since the epoch): the renewal tick wakes only Runs idle for a lease TTL. */
  private readonly lastWake = new Map<string, number>();

  constructor(
    private readonly log: EventLog,
    @Inject(MODEL_CLIENT) private readonly model: ModelClient,
    @Inject(LEASES) private readonly leases: LeaseStore,
    @Inject(RUNTIME_SETTINGS) private readonly settings: RuntimeSettings,
  ) {
    this.commands = new RunCommandHandler(log, 'runtime');
    this.timer = setInterval(() => this.renewAll(), Math.max(100, Math.floor(settings.leaseTtlMs / 3)));
    this.nudges = this.followNudges();
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
        if (err || this.stopping) return;
        const runId = msg.string();
        if (!this.held.has(runId)) return;
        this.lastWake.set(runId, Date.now());
        void this.exclusive(runId, () => this.execute(runId)).catch((e: unknown) => {
          this.logger.warn({ runId, error: (e as Error).message }, 'wake from a nudge failed');
        });
      },
    });
  }

  @EventPattern(['run.admitted', 'tool.call.receipt', 'run.cancel.requested', 'wait.answered', 'child.run.settled', 'run.handed_over'])
  async onWake(@Payload() stored: StoredEvent): Promise<void> {
    // a cancel stops the model request in flight at once (K4): it does not wait behind it
    if (stored.event.type === 'run.cancel.requested') this.inFlight.get(stored.event.runId)?.abort();
    this.lastWake.set(stored.event.runId, Date.now());
    await this.exclusive(stored.event.runId, () => {
      // a stopping runtime starts nothing, and must not acknowledge a wake it did not act on: it is
      // redelivered to another (or the restarted) runtime instead of being swallowed (K10)
      if (this.stopping) throw new RetryLater('the runtime is stopping', 200);
      return this.execute(stored.event.runId);
    });
  }

  /** Runs `step` after every earlier step of the same Run in this process. */
  private exclusive(runId: string, step: () => Promise<void>): Promise<void> {
    const next = (this.serial.get(runId) ?? Promise.resolve()).then(step, step);
    this.serial.set(runId, next);
    const done = () => {
      if (this.serial.get(runId) === next) this.serial.delete(runId);
    };
    next.then(done, done);
    return next;
  }

  /** Takes the Run's next steps while this instance holds (or can take) its lease. */
  private async execute(runId: string): Promise<void> {
    if (this.stopping) return; // its Runs are released to recovery; nothing new starts here
    let lease = this.held.get(runId);
    if (!lease) {
      const facts = await this.commands.folds.read(runId);
      if (!facts.admitted || facts.finished || facts.settled || facts.fenced || facts.cancelRequested) return;
      if (parkedOn(facts)) return; // parked: nothing to do until its wake is recorded (K10)
      let taken = await this.leases.acquire(runId, this.log.writer, this.settings.leaseTtlMs);
      // a parked Run whose wake is recorded (the log says it is no longer parked) is taken again, at the next epoch
      if ('held' in taken && taken.by.value.state === 'released' && taken.by.value.reason === 'parked') {
        taken = await this.leases.resume(taken.by, this.log.writer, this.settings.leaseTtlMs);
        if (!('held' in taken)) this.logger.log({ runId, epoch: taken.epoch }, 'parked Run woken: lease taken again');
      }
      // a Run its draining holder handed over at this very epoch (the log says so: the handover is the wake) is taken at the next
      const handed = handedOverAt(facts);
      if ('held' in taken && taken.by.value.state === 'released' && taken.by.value.reason === 'handover' && handed === taken.by.value.epoch) {
        taken = await this.leases.resume(taken.by, this.log.writer, this.settings.leaseTtlMs);
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
        if (wakeAwaitsRecovery(facts, taken.by.value)) {
          throw new RetryLater(`lease ${taken.by.value.state} at epoch ${taken.by.value.epoch} after the Run parked`, this.retryWakeMs());
        }
        return; // another instance executes it, or it was released or fenced: never resumed here
      }
      lease = taken;
      this.held.set(runId, lease);
    }
    const epoch = lease.epoch;
    await this.carryContext(runId, epoch);
    const wake = {
      type: 'Wake',
      model: this.model.model,
      waitTtlMs: this.settings.waitTtlMs,
      ...(this.settings.maxTokensPerRequest ? { maxTokensPerRequest: this.settings.maxTokensPerRequest } : {}),
      ...(this.settings.finalizationLeadMs ? { finalizationLeadMs: this.settings.finalizationLeadMs } : {}),
    } as const;
    const deadlineAt = (await this.commands.folds.read(runId)).admitted?.limits.deadlineAt;
    for (let i = 0; i < MAX_TURNS_PER_WAKE; i++) {
      // the provider's rate-limit pause is waited out BEFORE a turn is recorded as requested (F4): a Run
      // queued behind a Retry-After has no request "in flight" (a pause ending after the deadline is not
      // waited: the request is then recorded `not-sent`); a draining process starts no request to wait for
      if (!this.stopping && !(await this.waitOutRateLimit(runId, deadlineAt))) return;
      // a holder whose epoch recovery closed (it was taken for lost after parking) writes nothing more (K6);
      // a draining one is at a safe point here: it still records what needs no model request (an answer's
      // finish, a park), but starts no new request: the drain hands the Run over instead
      const { facts, appended } = await this.commands.handle(
        runId,
        this.underLease(runId, epoch, (f, now) => {
          if (epochSuperseded(f, epoch)) return [];
          const events = decide(f, wake, now);
          return this.stopping && events.some((e) => e.type === 'model.turn.requested') ? [] : events;
        }),
        { epoch },
      );
      if (epochSuperseded(facts, epoch)) {
        await this.park(runId, facts);
        return;
      }
      if (
        facts.finished ||
        facts.settled ||
        facts.fenced ||
        facts.cancelRequested ||
        appended.some((e) => e.event.type === 'run.execution.finished')
      ) {
        await this.release(runId, 'finished');
        return;
      }
      if (parkedOn(facts)) {
        await this.park(runId, facts);
        return;
      }
      // a request recorded by a decision made just before the drain began is made all the same (the log
      // says it is in flight; the drain waits for it within its bound)
      const requested = appended.find((e) => e.event.type === 'model.turn.requested');
      if (!requested || requested.event.type !== 'model.turn.requested') {
        if (this.stopping) return; // draining, at a safe point: the drain hands the Run over
        // the last request failed and its recorded backoff has not ended (K7): wait it out, then decide again
        const backoffMs = appended.length === 0 ? retryWaitMs(facts, new Date()) : 0;
        if (backoffMs > 0 && (await this.waitOutRetryBackoff(runId, backoffMs))) continue;
        return;
      }
      const request = requested.event.data;
      const turn = request.turn;
      const abort = new AbortController();
      this.inFlight.set(runId, abort);
      this.modelRequests.add(runId);
      let result: ModelTurnResult;
      try {
        result = await this.requestTurn(facts, request, epoch, abort.signal);
      } finally {
        this.inFlight.delete(runId);
        this.modelRequests.delete(runId);
      }
      // Aborted because this process stops or lost the lease: the turn's outcome is not known here,
      // so nothing is decided; recovery records it as uncertain.
      if (abort.signal.aborted) return;
      if (!result.ok) this.logger.warn({ runId, turn, error: result.error }, 'model turn failed');
      await this.recordTurn(runId, turn, result, epoch);
    }
    this.logger.warn({ runId }, 'turn limit reached in one wake');
  }

  /**
   * Waits out the shared limiter's rate-limit pause (within the deadline), abortable like a model
   * request (a cancel, a lost lease, the process stopping). @returns false when execution must
   * stop here (the process stops or the lease was lost meanwhile).
   */
  private async waitOutRateLimit(runId: string, deadlineAt: string | undefined): Promise<boolean> {
    const abort = new AbortController();
    this.inFlight.set(runId, abort);
    try {
      if (await this.model.waitForPause(deadlineAt, abort.signal))
        this.logger.log({ runId }, 'waited out the model rate-limit pause before the next request');
    } finally {
      if (this.inFlight.get(runId) === abort) this.inFlight.delete(runId);
    }
    return !this.stopping && this.held.has(runId);
  }

  /**
   * Sleeps `ms` (the backoff recorded on the Run's failed turn, K7), abortable like a model request
   * (a cancel, a lost lease, the process stopping). The wait is on the log, not only here: a wake
   * that comes earlier decides nothing. @returns false when execution must stop here.
   */
  private async waitOutRetryBackoff(runId: string, ms: number): Promise<boolean> {
    const abort = new AbortController();
    this.inFlight.set(runId, abort);
    try {
      this.logger.log({ runId, ms }, 'model request failed: backing off before the retry');
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, ms);
        abort.signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
      });
    } finally {
      if (this.inFlight.get(runId) === abort) this.inFlight.delete(runId);
    }
    return !this.stopping && this.held.has(runId);
  }

  /**
   * Records what the Run carries from earlier Runs (`context.carried`, or a refusal), once, before
   * its first model request (K2, K3): reads the history Runs and the continuation parent from the
   * log (and the parent's stored results), and decides with `decideCarry`. The Run's requests are
   * then built from that record alone, so a restart sends the same material.
   */
  private async carryContext(runId: string, epoch: number): Promise<void> {
    const facts = await this.commands.folds.read(runId);
    if (!awaitingContext(facts)) return;
    const { history, parent } = earlierRunIds(facts);
    const earlier = new Map<string, EarlierRun>();
    for (const id of [...history, ...(parent ? [parent] : [])]) {
      const f = await this.commands.folds.read(id);
      this.commands.folds.forget(id);
      earlier.set(id, { facts: f, results: id === parent ? await this.resolveResults(f) : new Map() });
    }
    const max = this.settings.contextMaxChars ?? Number.POSITIVE_INFINITY;
    await this.commands.handle(
      runId,
      this.underLease(runId, epoch, (f, now) => decideCarry(f, earlier, max, now)),
      { epoch },
    );
  }

  /**
   * Decides a finished model turn into its events, retrying through NATS outages for as long as
   * this instance still holds the lease: the paid answer is never dropped without a record (a
   * dropped outcome would leave the turn "in flight" for good, since a redelivered wake never
   * calls the model again). The retry decides again from a fresh read, and the events' ids are
   * deterministic, so an attempt that was stored counts once; it ends when the log says stored
   * (or decided elsewhere: a fence, a conflict), or when the lease is lost or the process stops
   * (recovery then records the turn as uncertain). A record the log refuses for a permanent reason
   * (its size, its schema: `isPermanentAppendError`) is never retried: the turn is recorded
   * `unrecordable` with the reason at once, so the Run stops and settles saying so (K9, K11), not
   * at the no-progress limit.
   */
  private async recordTurn(runId: string, turn: number, result: ModelTurnResult, epoch: number): Promise<void> {
    // the retry backoff's jitter (K7), drawn once: a decision taken again after a NATS outage backs off as long
    const retry = { ...(this.settings.retryBackoff ? { retryBackoff: this.settings.retryBackoff } : {}), random: Math.random() };
    for (let attempt = 1; ; attempt++) {
      try {
        await this.commands.handle(
          runId,
          this.underLease(runId, epoch, (f, now) =>
            decide(f, { type: 'ModelTurnEnded', turn, result, waitTtlMs: this.settings.waitTtlMs, ...retry }, now),
          ),
          { epoch },
        );
        return;
      } catch (e) {
        if (isPermanentAppendError(e) && !(!result.ok && result.error.kind === 'unrecordable') && this.held.get(runId)?.epoch === epoch) {
          this.logger.error(
            { runId, turn, error: (e as Error).message },
            'the outcome of a model turn was refused by the log; recording it as unrecordable',
          );
          result = {
            ok: false,
            error: { kind: 'unrecordable', status: null, message: `the reply of turn ${turn} could not be recorded: ${(e as Error).message}` },
          };
          continue;
        }
        if (!isTransientNatsError(e) || this.drainOver || this.held.get(runId)?.epoch !== epoch) throw e;
        this.logger.warn(
          { runId, turn, attempt, error: (e as Error).message },
          'outcome of a model turn not recorded yet (NATS unreachable); retrying',
        );
        await new Promise((r) => setTimeout(r, Math.min(2_000, 100 * 2 ** Math.min(attempt, 5))));
      }
    }
  }

  /**
   * A decision made under the lease this process holds at `epoch`: its events are preceded by the
   * grant (`lease.granted`, this process as holder) when the log does not hold that epoch yet
   * ({@link withGrant}), so the runtime records its own grant with its first event under the
   * lease, in one decision, and recovery is not on the happy path (K6, issue [9]).
   */
  private underLease(runId: string, epoch: number, decision: (f: RunFacts, now: Date) => RunEvent[]): (f: RunFacts, now: Date) => RunEvent[] {
    const holder = { service: this.log.writer.service, instance: this.log.writer.instance };
    const ttlMs = this.held.get(runId)?.ttlMs ?? this.settings.leaseTtlMs;
    return (f, now) => withGrant(f, { epoch, holder, ttlMs }, decision(f, now), now);
  }

  /** Gives the Run's lease up (if held). @returns true when released. */
  private async release(runId: string, reason: 'finished' | 'stopping' | 'parked' | 'handover', wakeBy?: string): Promise<boolean> {
    const lease = this.held.get(runId);
    if (!lease) return false;
    this.held.delete(runId);
    this.lastWake.delete(runId);
    return this.leases.release(lease, this.log.writer, reason, wakeBy).then(
      () => true,
      (e: unknown) => {
        this.logger.warn({ runId, reason, error: (e as Error).message }, 'could not release the lease (fenced or changed meanwhile)');
        return false;
      },
    );
  }

  /**
   * Parks the Run (K10): releases its lease `parked` (with its wait's expiry, which recovery
   * keeps) and forgets it. A wake recorded while the lease was still held was refused by this
   * process's own lease (another replica could not take it): so the log is read once more, and a
   * Run no longer parked is taken again at once.
   */
  private async park(runId: string, facts: RunFacts): Promise<void> {
    const expiries = unansweredWaits(facts)
      .map((w) => w.expiresAt)
      .sort();
    await this.faultPauseBeforePark(runId);
    if (!(await this.release(runId, 'parked', expiries[0]))) return;
    this.commands.folds.forget(runId);
    this.logger.log({ runId, on: parkedOn(facts) }, 'Run parked: lease released');
    const now = await this.commands.folds.read(runId);
    if (!parkedOn(now) && !now.finished && !now.settled && !now.fenced) await this.execute(runId);
  }

  /** FAULT INJECTION (tests only, off unless `faultParkPauseFile` is set): waits while that file exists. */
  private async faultPauseBeforePark(runId: string): Promise<void> {
    const file = this.settings.faultParkPauseFile;
    if (!file || !existsSync(file)) return;
    this.logger.warn({ runId, file }, 'FAULT INJECTION: pausing between the park and the lease release');
    while (existsSync(file)) await new Promise((r) => setTimeout(r, 50));
  }

  /** Tells the runtime process `instance` (the holder of the Run's lease) that the Run was woken: best effort, never awaited. */
  private nudge(instance: string, runId: string): void {
    try {
      this.log.nc.publish(runtimeNudgeSubject(this.log.space, instance), runId);
    } catch (e) {
      this.logger.warn({ runId, instance, error: (e as Error).message }, 'could not nudge the lease holder (its renewal tick wakes the Run)');
    }
  }

  /** How long a wake waiting for recovery to mark a lost holder's lease parked is held back, ms: a third of the TTL. */
  private retryWakeMs(): number {
    return Math.max(250, Math.floor(this.settings.leaseTtlMs / 3));
  }

  /**
   * Renews every held lease (compare-and-set) and wakes its Run when it was not woken within a lease TTL. A lease that changed meanwhile was
   * fenced: this instance stops executing that Run at once (its model request is aborted, and the
   * fence on its subject refuses any write it still attempts). A renewal that fails because NATS is
   * unreachable is retried on the next tick; recovery does not count that time as an expiry.
   *
   * Each lease is renewed on its own (K8, K10): every tick starts the renewal of every held lease
   * whose previous renewal is not still waiting on NATS (never two on one revision), all
   * concurrently, and a Run is woken right after its own renewal. So one slow round trip, a Run
   * taken while others' renewals were in flight, or a wake and the per-Run execution chain
   * behind it never delay another lease's renewal.
   */
  private renewAll(): void {
    if (this.drainOver) return;
    for (const [runId, lease] of this.held) {
      if (this.renewing.has(runId)) continue;
      this.renewing.add(runId);
      void this.renewOne(runId, lease)
        .then((renewed) => {
          // a draining process keeps its leases (a model request still finishing) but starts nothing
          if (!renewed || this.stopping) return;
          // a Run woken within the last lease TTL (a delivery, a nudge) has what it needs; the tick
          // wakes only the others: the safety net for a wake that reached another replica and whose
          // nudge was lost (issue [9]: each tick's wake read the Run from the log, every few seconds)
          if (Date.now() - (this.lastWake.get(runId) ?? 0) < this.settings.leaseTtlMs) return;
          this.lastWake.set(runId, Date.now());
          void this.exclusive(runId, () => this.execute(runId)).catch((e: unknown) => {
            this.logger.warn({ runId, error: (e as Error).message }, 'wake from the renewal timer failed');
          });
        })
        .finally(() => this.renewing.delete(runId));
    }
  }

  /** Renews one held lease. @returns true when renewed (the Run is then woken after the round). */
  private async renewOne(runId: string, lease: HeldLease): Promise<boolean> {
    if (this.held.get(runId) !== lease) return false;
    try {
      const next = await this.leases.renew(lease, this.log.writer);
      if (this.held.get(runId) === lease) this.held.set(runId, next);
      return true;
    } catch (e) {
      const current = await this.leases.get(runId).catch(() => undefined);
      const verdict = renewalVerdict(lease, current, this.log.writer.instance);
      if (verdict.kind === 'retry') return false; // NATS unreachable (or restarting): try again next tick
      if (verdict.kind === 'adopt') {
        // Still ours: a renewal buffered or timed out during an outage was stored after all (its
        // revision moved on). Adopt the stored revision; only positive evidence is a loss.
        if (this.held.get(runId) === lease) this.held.set(runId, { ...lease, revision: verdict.revision });
        return false;
      }
      this.logger.warn(
        { runId, epoch: lease.epoch, state: verdict.state, error: (e as Error).message },
        'lease lost (fenced): execution of this Run stops here',
      );
      this.held.delete(runId);
      this.lastWake.delete(runId);
      this.inFlight.get(runId)?.abort();
      return false;
    }
  }

  /**
   * The activity: one streamed model request for `turn`, built from the Run's facts. Never throws
   * for model-side failures. Deltas go live to observers; each paragraph finished while the turn
   * streams is recorded (`model.output.paragraph`, under the lease epoch) so that publication
   * commits it at once, and text streaming inside one long paragraph is recorded as progress at
   * a bounded rate (`model.output.progress`, K7); all recording is over before this returns, so the turn's own record never
   * races it.
   */
  private async requestTurn(
    facts: RunFacts,
    request: EventData<'model.turn.requested'>,
    epoch: number,
    signal: AbortSignal,
  ): Promise<ModelTurnResult> {
    const runId = facts.runId;
    const turn = request.turn;
    const finalization = request.purpose === 'finalization';
    const messages = buildMessages(facts, await this.resolveResults(facts), this.settings.contextMaxChars);
    // the finalization request: no tools, told to answer the original question from what it has (K9)
    if (finalization) messages.push(finalizationInstruction(facts));
    const tools = finalization ? [] : toolDefinitions(facts.admitted!.grant.tools);
    const delta = liveDeltaSubject(this.log.space, runId);
    const paragraphs = new ParagraphRecorder(
      async (finished, progress) => {
        await this.commands.handle(
          runId,
          this.underLease(runId, epoch, (f, now) => decide(f, { type: 'ParagraphsStreamed', turn, paragraphs: finished, progress }, now)),
          { epoch },
        );
      },
      (e) => this.logger.warn({ runId, turn, error: (e as Error).message }, 'a streamed paragraph was not recorded (the turn record keeps its text)'),
      // text streaming inside one long paragraph is recorded as progress well within the no-progress limit (K7)
      { progressIntervalMs: progressIntervalMs(facts.admitted!.limits.noProgressSeconds) },
    );
    try {
      return await this.model.turn(
        turn,
        messages,
        tools,
        (text) => {
          this.log.nc.publish(delta, JSON.stringify({ turn, text }));
          paragraphs.push(text);
        },
        signal,
        {
          ...(request.maxTokens ? { maxTokens: request.maxTokens } : {}),
          deadlineAt: facts.admitted!.limits.deadlineAt,
          noTools: finalization,
        },
      );
    } finally {
      // a stream that ended keeps every paragraph it finished; an aborted one (stop, lost lease, cancel) records nothing more
      await paragraphs.close({ flush: !signal.aborted });
    }
  }

  /** Succeeded results by toolCallId: inline ones as recorded, large ones from the result store. */
  private async resolveResults(facts: RunFacts): Promise<Map<string, unknown>> {
    const out = new Map<string, unknown>();
    for (const call of facts.toolCalls.values()) {
      const r = call.receipt;
      if (r?.status !== 'succeeded') continue;
      if (r.resultRef) {
        this.results ??= await ResultStore.open(this.log);
        out.set(call.toolCallId, await this.results.get(r.resultRef));
      } else out.set(call.toolCallId, r.result);
    }
    return out;
  }

  /**
   * The drain (SIGTERM, a rollout): this replica takes no new work (wakes are redelivered to
   * others, `RetryLater`), lets each model request in flight finish and be recorded, and hands each
   * Run over at that safe point ({@link handOver}), its leases renewed meanwhile. Past `drainMs`
   * what is still in flight is aborted and those Runs are released `stopping` (recovery fences
   * them, the lifecycle settles them `interrupted`, K10), as before drains existed. Runs under
   * another wait (a rate-limit pause, a retry backoff) are at a safe point already: their wait is
   * cut short. Runs its consumers are still handling are awaited the same way.
   */
  async onModuleDestroy(): Promise<DrainReport> {
    this.stopping = true;
    this.nudges?.unsubscribe();
    const drainMs = this.settings.drainMs ?? 0;
    const startedAt = Date.now();
    // waits that are not a model request end now: those Runs are at a safe point
    for (const [runId, abort] of this.inFlight) if (!this.modelRequests.has(runId)) abort.abort();
    const report: DrainReport = { handedOver: [], stopped: [], other: [] };
    if (this.held.size)
      this.logger.log(
        { runs: this.held.size, inFlight: this.modelRequests.size, drainMs },
        'draining: handing the Runs over at their next safe point',
      );
    let boundPassed = false;
    const bound = new Promise<'bound'>((r) => {
      const timer = setTimeout(() => ((boundPassed = true), r('bound')), drainMs);
      timer.unref();
    });
    // a Run taken by an execution that began just before the drain is held a moment later: each pass takes the new ones
    // (the Runs held, and those with an execution under way)
    const seen = new Set<string>();
    const pending = () => [...new Set([...this.held.keys(), ...this.serial.keys()])].filter((r) => !seen.has(r));
    for (let todo = pending(); todo.length > 0 && !boundPassed; todo = pending()) {
      for (const runId of todo) seen.add(runId);
      await Promise.all(
        todo.map(async (runId) => {
          // each Run's execution chain ends at its next safe point (the loop starts no new request)
          const chain = (this.serial.get(runId) ?? Promise.resolve()).then(
            () => 'done' as const,
            () => 'done' as const,
          );
          if ((await Promise.race([chain, bound])) === 'bound') return;
          await this.exclusive(runId, () => this.handOver(runId, report)).catch((e: unknown) => {
            this.logger.warn({ runId, error: (e as Error).message }, 'handover failed');
          });
        }),
      );
    }
    this.drainOver = true;
    clearInterval(this.timer);
    for (const abort of this.inFlight.values()) abort.abort();
    const left = [...this.held.keys()];
    await Promise.all(left.map((runId) => this.release(runId, 'stopping')));
    report.stopped.push(...left);
    this.logger.log(
      { handedOver: report.handedOver.length, interrupted: report.stopped.length, other: report.other.length, tookMs: Date.now() - startedAt },
      'drain ended',
    );
    return report;
  }

  /**
   * Hands one held Run over at a safe point: records `run.handed_over` under its epoch (the decider
   * refuses while the log shows a model turn without its outcome), then releases the lease
   * `handover`. A Run that parked or finished meanwhile is released as such; one that cannot be
   * handed over is left held (released `stopping` at the end of the drain).
   */
  private async handOver(runId: string, report: DrainReport): Promise<void> {
    const lease = this.held.get(runId);
    if (!lease) return; // released meanwhile (finished, parked, lost), or an execution that took nothing
    const holder = { service: this.log.writer.service, instance: this.log.writer.instance };
    const { facts, appended } = await this.commands.handle(
      runId,
      this.underLease(runId, lease.epoch, (f, now) =>
        epochSuperseded(f, lease.epoch) ? [] : decide(f, { type: 'HandOver', epoch: lease.epoch, holder, reason: 'drain' }, now),
      ),
      { epoch: lease.epoch },
    );
    if (facts.finished || facts.settled || facts.fenced) {
      await this.release(runId, 'finished');
      report.other.push(runId);
      return;
    }
    if (parkedOn(facts)) {
      const wakeBy = unansweredWaits(facts)
        .map((w) => w.expiresAt)
        .sort()[0];
      await this.release(runId, 'parked', wakeBy);
      report.other.push(runId);
      return;
    }
    if (!appended.some((e) => e.event.type === 'run.handed_over') && facts.handedOver?.epoch !== lease.epoch) return;
    if (await this.release(runId, 'handover')) {
      this.commands.folds.forget(runId);
      report.handedOver.push(runId);
      this.logger.log({ runId, epoch: lease.epoch }, 'Run handed over (drain): lease released');
    }
  }

  beforeApplicationShutdown(): void {
    clearInterval(this.timer);
  }
}
