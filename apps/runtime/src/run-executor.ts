import { existsSync } from 'node:fs';
import { Logger } from '@nestjs/common';
import type { RunEvent, StoredEvent, TokenPrice } from '@runplane/contracts';
import { DRAIN_REDELIVERY_MS, EventLog, isPermanentAppendError, isTransientNatsError, RetryLater } from '@runplane/eventlog';
import { retry } from '@runplane/kit';
import { epochSuperseded, parkedOn, unansweredWaits, type RunFacts } from '@runplane/run-facts';
import { modelCostMicrosTotal, RunCommandHandler } from '@runplane/service-kit';
import { awaitingContext, earlierRunIds, type EarlierRun } from './context.js';
import { decide, withGrant, type ModelTurnResult, type RuntimeTrigger } from './decide.js';
import type { GrantCeiling } from './grant-ceiling.js';
import type { LeaseKeeper } from './lease-keeper.js';
import { asDecided, retryWaitMs, type RetryBackoff } from './ledger.js';
import type { ModelActivity } from './model-activity.js';

/** Settings of the runtime (from contracts' LeaseConfig, WaitConfig, ContextConfig, ModelConfig, DrainConfig). */
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
  /** The most a Run's grant may hold (`GrantCeilingConfig`): a Run over it is never executed (a forged or corrupt admission); unchecked when absent. */
  ceiling?: GrantCeiling;
  /** Token prices per model (`RUNPLANE_MODEL_PRICES`, K7); a model absent here is unpriced. */
  prices?: Record<string, TokenPrice>;
}

/** What a drain did with the Runs its replica held (logged, and returned for tests). */
export interface DrainReport {
  handedOver: string[];
  /** Released `stopping` (something was still in flight at the bound, or the log showed no safe point): fenced and settled `interrupted`. */
  stopped: string[];
  /** Parked or finished during the drain (released `parked` / `finished` as usual). */
  other: string[];
}

/**
 * Adds the cost recorded on a turn's outcome this process appended (K7) to
 * `runplane_model_cost_micros_total`: its measured part, and the upper bound of an unknown one.
 */
function countCost(principal: string | undefined, model: string | undefined, appended: StoredEvent[]): void {
  for (const { event: e } of appended) {
    if ((e.type !== 'model.turn.completed' && e.type !== 'model.turn.failed') || !e.data.cost) continue;
    const labels = { principal: principal ?? '', model: model ?? '', currency: e.data.cost.currency };
    if (e.data.cost.measuredMicros) modelCostMicrosTotal.inc({ ...labels, bound: 'measured' }, e.data.cost.measuredMicros);
    if (e.data.cost.unknownMaxMicros) modelCostMicrosTotal.inc({ ...labels, bound: 'unknown_max' }, e.data.cost.unknownMaxMicros);
  }
}

/** Upper bound on model turns taken in one wake (a guard against a decide loop). */
const MAX_TURNS_PER_WAKE = 64;

/**
 * The Run executor: the runtime's hot path, one loop over the decider {@link decide}. A Run is
 * executed only while this replica's {@link LeaseKeeper} holds its lease (K6), one execution at a
 * time per Run whatever woke it (a delivery, the keeper's tick or a nudge). Each step decides from
 * the Run's kept fold (the command handler reads the log only on a conflict or after a partition
 * moved: no read of the log on the hot path) and appends the decision's events under the lease's epoch, preceded by the
 * grant when the log does not hold that epoch yet ({@link withGrant}). Once its own
 * `model.turn.requested` was appended, it makes that one request through the {@link ModelActivity}
 * and decides the outcome; a request another writer stored is never made here (K5, K6). A Run
 * parked on a wait or a child is released `parked` and forgotten (K10); a finished one is released
 * `finished`. On SIGTERM it drains ({@link drain}): a Run at a safe point is handed over
 * (`run.handed_over`), one still in flight at the bound released `stopping`.
 */
export class RunExecutor {
  private readonly logger = new Logger('runtime');
  /** One execution at a time per Run, whatever woke it. */
  private readonly serial = new Map<string, Promise<void>>();
  /** Aborts the wait or model request in flight per Run (a cancel, a lost lease, the process stopping). */
  private readonly inFlight = new Map<string, AbortController>();
  /** Runs whose cancel has arrived and not yet been handled in order ({@link wake}): a model request of theirs is aborted at once (K4). */
  private readonly cancelArrived = new Set<string>();
  /** Runs with a model request of their own in flight (the one thing a drain waits for). */
  private readonly modelRequests = new Set<string>();
  private stopping = false;
  /** The drain bound passed: what is still in flight is aborted, nothing more is retried. */
  private drainOver = false;

  /**
   * @param commands the runtime's command handler (its kept folds are the Run's facts).
   * @param keeper the lease keeper (it tells this executor about tick wakes, nudges and lost leases).
   * @param activity the model activity.
   */
  constructor(
    private readonly log: EventLog,
    private readonly commands: RunCommandHandler,
    private readonly keeper: LeaseKeeper,
    private readonly activity: ModelActivity,
    private readonly settings: RuntimeSettings,
  ) {
    keeper.bind({
      wake: (runId) => {
        if (this.stopping) return;
        void this.exclusive(runId, () => this.execute(runId)).catch((e: unknown) => {
          this.logger.warn({ runId, error: (e as Error).message }, 'wake from the lease keeper failed');
        });
      },
      lost: (runId) => this.inFlight.get(runId)?.abort(),
    });
    // a cancel aborts the model request in flight as it arrives (K4): its ordered handling waits
    // behind the delivery whose handler awaits that very request, so it would come only after the
    // whole reply (a trial cancelled 7 s into a 25 s reply and the request ran to its end)
    log.deliveries.onArrival((stored) => {
      if (stored.event.type !== 'run.cancel.requested') return;
      // also for a request not yet under way: a decision taken before the cancel is handled in
      // order may still ask the model, and that request is aborted as it starts
      this.cancelArrived.add(stored.event.runId);
      this.inFlight.get(stored.event.runId)?.abort();
    });
  }

  /**
   * A wake delivered for the Run (its admission, a receipt, a cancel, a wait answered, a child
   * settled, a handover): decides it now. A cancel aborts the model request in flight at once (K4).
   * @throws RetryLater while this replica stops: a wake it did not act on is redelivered to another (or the restarted) runtime, never swallowed (K10).
   */
  async wake(runId: string, type: RunEvent['type']): Promise<void> {
    if (type === 'run.cancel.requested') this.inFlight.get(runId)?.abort();
    this.keeper.woken(runId);
    try {
      await this.exclusive(runId, () => {
        if (this.stopping) throw new RetryLater('the runtime is stopping', DRAIN_REDELIVERY_MS);
        return this.execute(runId);
      });
    } finally {
      // decided with the cancel in its facts (no later decision asks the model for this Run), or
      // handed back: its redelivery marks it again as it arrives
      if (type === 'run.cancel.requested') this.cancelArrived.delete(runId);
    }
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

  /** Takes the Run's next steps while this replica holds (or can take) its lease. */
  private async execute(runId: string): Promise<void> {
    if (this.stopping) return; // its Runs are handed over or released; nothing new starts here
    let lease = this.keeper.holding(runId);
    if (!lease) {
      const facts = await this.commands.folds.read(runId);
      if (!facts.admitted || facts.finished || facts.settled || facts.fenced || facts.cancelRequested) return;
      if (parkedOn(facts)) return; // parked: nothing to do until its wake is recorded (K10)
      const taken = await this.keeper.take(runId, facts);
      if (!taken) return;
      lease = taken;
    }
    const epoch = lease.epoch;
    await this.carryContext(runId, epoch);
    const wake: RuntimeTrigger = {
      type: 'Wake',
      model: this.activity.model.model,
      waitTtlMs: this.settings.waitTtlMs,
      ...(this.settings.maxTokensPerRequest ? { maxTokensPerRequest: this.settings.maxTokensPerRequest } : {}),
      ...(this.settings.finalizationLeadMs ? { finalizationLeadMs: this.settings.finalizationLeadMs } : {}),
      ...(this.settings.ceiling ? { ceiling: this.settings.ceiling } : {}),
      ...(this.settings.prices?.[this.activity.model.model] ? { price: this.settings.prices[this.activity.model.model] } : {}),
    };
    const deadlineAt = (await this.commands.folds.read(runId)).admitted?.limits.deadlineAt;
    for (let i = 0; i < MAX_TURNS_PER_WAKE; i++) {
      // the provider's rate-limit pause is waited out BEFORE a turn is recorded as requested: a Run
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
        await this.keeper.release(runId, 'finished');
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
      // a cancel that arrived before this request was under way (K4)
      if (this.cancelArrived.has(runId)) abort.abort();
      this.modelRequests.add(runId);
      let result: ModelTurnResult;
      try {
        result = await this.activity.request(asDecided(facts, appended), request, abort.signal, async (paragraphs, progress) => {
          await this.commands.handle(
            runId,
            this.underLease(runId, epoch, (f, now) => decide(f, { type: 'ParagraphsStreamed', turn, paragraphs, progress }, now)),
            { epoch },
          );
        });
      } catch (e) {
        // stopped before or while it was made (its stored results still being read): as an abort below
        if (abort.signal.aborted) return;
        throw e;
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
      if (await this.activity.waitForPause(deadlineAt, abort.signal))
        this.logger.log({ runId }, 'waited out the model rate-limit pause before the next request');
    } finally {
      if (this.inFlight.get(runId) === abort) this.inFlight.delete(runId);
    }
    return !this.stopping && this.keeper.holding(runId) !== undefined;
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
    return !this.stopping && this.keeper.holding(runId) !== undefined;
  }

  /**
   * Records what the Run carries from earlier Runs (`context.carried`, or a refusal), once, before
   * its first model request (K2, K3): reads the history Runs and the continuation parent from the
   * log (and the parent's stored results), and decides them with the `CarryContext` trigger. The
   * Run's requests are then built from that record alone, so a restart sends the same material.
   */
  private async carryContext(runId: string, epoch: number): Promise<void> {
    const facts = await this.commands.folds.read(runId);
    if (!awaitingContext(facts)) return;
    const { history, parent } = earlierRunIds(facts);
    const earlier = new Map<string, EarlierRun>();
    for (const id of [...history, ...(parent ? [parent] : [])]) {
      const f = await this.commands.folds.read(id);
      this.commands.folds.forget(id);
      earlier.set(id, { facts: f, results: id === parent ? await this.activity.resolveResults(f) : new Map() });
    }
    const maxChars = this.settings.contextMaxChars ?? Number.POSITIVE_INFINITY;
    await this.commands.handle(
      runId,
      this.underLease(runId, epoch, (f, now) => decide(f, { type: 'CarryContext', earlier, maxChars }, now)),
      { epoch },
    );
  }

  /**
   * Decides a finished model turn into its events, retrying through NATS outages for as long as
   * this replica still holds the lease: the paid answer is never dropped without a record (a
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
    const backoff = { ...(this.settings.retryBackoff ? { retryBackoff: this.settings.retryBackoff } : {}), random: Math.random() };
    const stillHeld = () => this.keeper.holding(runId)?.epoch === epoch;
    const record = async () => {
      const { facts, appended } = await this.commands.handle(
        runId,
        this.underLease(runId, epoch, (f, now) =>
          decide(f, { type: 'ModelTurnEnded', turn, result, waitTtlMs: this.settings.waitTtlMs, ...backoff }, now),
        ),
        { epoch },
      );
      countCost(facts.admitted?.principal, facts.turns.find((t) => t.turn === turn)?.request.model, appended);
    };
    await retry(
      'recordOutcome',
      async () => {
        try {
          await record();
        } catch (e) {
          if (!(isPermanentAppendError(e) && !(!result.ok && result.error.kind === 'unrecordable') && stillHeld())) throw e;
          this.logger.error(
            { runId, turn, error: (e as Error).message },
            'the outcome of a model turn was refused by the log; recording it as unrecordable',
          );
          result = {
            ok: false,
            error: { kind: 'unrecordable', status: null, message: `the reply of turn ${turn} could not be recorded: ${(e as Error).message}` },
          };
          await record();
        }
      },
      {
        shouldRetry: ({ error }) => isTransientNatsError(error) && !this.drainOver && stillHeld(),
        onFailedAttempt: ({ error, attemptNumber }) => {
          if (isTransientNatsError(error) && !this.drainOver && stillHeld()) {
            this.logger.warn(
              { runId, turn, attempt: attemptNumber, error: error.message },
              'outcome of a model turn not recorded yet (NATS unreachable); retrying',
            );
          }
        },
      },
    );
  }

  /**
   * A decision made under the lease this replica holds at `epoch`: its events are preceded by the
   * grant (`lease.granted`, this replica as holder) when the log does not hold that epoch yet
   * ({@link withGrant}), so the runtime records its own grant with its first event under the
   * lease, in one decision, and recovery is not on the happy path (K6; docs/architecture.md "Recovery off the happy path").
   */
  private underLease(runId: string, epoch: number, decision: (f: RunFacts, now: Date) => RunEvent[]): (f: RunFacts, now: Date) => RunEvent[] {
    const holder = { service: this.log.writer.service, instance: this.log.writer.instance };
    const ttlMs = this.keeper.holding(runId)?.ttlMs ?? this.settings.leaseTtlMs;
    return (f, now) => withGrant(f, { epoch, holder, ttlMs }, decision(f, now), now);
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
    if (!(await this.keeper.release(runId, 'parked', expiries[0]))) return;
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

  /**
   * The drain (SIGTERM, a rollout): this replica takes no new work (wakes are redelivered to
   * others, `RetryLater`), lets each model request in flight finish and be recorded, and hands each
   * Run over at that safe point ({@link handOver}), its leases renewed meanwhile. Past `drainMs`
   * what is still in flight is aborted and those Runs are released `stopping` (recovery fences
   * them, the lifecycle settles them `interrupted`, K10), as before drains existed. Runs under
   * another wait (a rate-limit pause, a retry backoff) are at a safe point already: their wait is
   * cut short. Runs its consumers are still handling are awaited the same way.
   */
  async drain(): Promise<DrainReport> {
    this.stopping = true;
    this.keeper.quieten();
    const drainMs = this.settings.drainMs ?? 0;
    const startedAt = Date.now();
    // waits that are not a model request end now: those Runs are at a safe point
    for (const [runId, abort] of this.inFlight) if (!this.modelRequests.has(runId)) abort.abort();
    const report: DrainReport = { handedOver: [], stopped: [], other: [] };
    const held = this.keeper.heldRuns();
    if (held.length)
      this.logger.log({ runs: held.length, inFlight: this.modelRequests.size, drainMs }, 'draining: handing the Runs over at their next safe point');
    let boundPassed = false;
    const bound = new Promise<'bound'>((r) => {
      const timer = setTimeout(() => ((boundPassed = true), r('bound')), drainMs);
      timer.unref();
    });
    // a Run taken by an execution that began just before the drain is held a moment later: each pass takes the new ones
    // (the Runs held, and those with an execution under way)
    const seen = new Set<string>();
    const pending = () => [...new Set([...this.keeper.heldRuns(), ...this.serial.keys()])].filter((r) => !seen.has(r));
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
    this.keeper.stop();
    for (const abort of this.inFlight.values()) abort.abort();
    const left = this.keeper.heldRuns();
    await Promise.all(left.map((runId) => this.keeper.release(runId, 'stopping')));
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
    const lease = this.keeper.holding(runId);
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
      await this.keeper.release(runId, 'finished');
      report.other.push(runId);
      return;
    }
    if (parkedOn(facts)) {
      const wakeBy = unansweredWaits(facts)
        .map((w) => w.expiresAt)
        .sort()[0];
      await this.keeper.release(runId, 'parked', wakeBy);
      report.other.push(runId);
      return;
    }
    if (!appended.some((e) => e.event.type === 'run.handed_over') && facts.handedOver?.epoch !== lease.epoch) return;
    if (await this.keeper.release(runId, 'handover')) {
      this.commands.folds.forget(runId);
      report.handedOver.push(runId);
      this.logger.log({ runId, epoch: lease.epoch }, 'Run handed over (drain): lease released');
    }
  }
}
