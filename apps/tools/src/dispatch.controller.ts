import { statSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { Controller, Inject, Logger, type OnApplicationShutdown, type OnModuleDestroy, type OnModuleInit, UseFilters } from '@nestjs/common';
import { PassThroughEventErrors } from '@runplane/eventlog/nest';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { z } from 'zod';
import type { DrainConfig, ToolsConfig, RunEvent, StoredEvent } from '@runplane/contracts';
import { AppendConflict, DRAIN_REDELIVERY_MS, EventLog, isTransientNatsError, ResultStore, RetryLater } from '@runplane/eventlog';
import { privateStoreFolder } from '@runplane/holdings/inspection-store';
import { RenewalSlots, retry, retryPolicies } from '@runplane/kit';
import { RunCommandHandler, toolClaimMetTotal as claimMetTotal, toolDurationSeconds } from '@runplane/service-kit';
import type { RunFacts, ToolCallFacts } from '@runplane/run-facts';
import { ClaimRenewed, ClaimStore, ClaimTaken, type HeldClaim } from './claims.js';
import { decide, type ToolOutcome } from './decide.js';
import { ToolExecutor } from './executor.js';

export const TOOLS_SETTINGS = Symbol('TOOLS_SETTINGS');

/** Settings of the tools worker (from {@link ToolsConfig}). */
export interface ToolsSettings {
  /** Wall time after which a call's outcome is recorded `unknown`, ms. */
  timeoutMs: number;
  /** A claim's lifetime unless renewed (renewed every third of it), ms. */
  claimTtlMs: number;
  /** Interval of the sweep for expired claims, ms. */
  sweepMs: number;
  /** How long a timed-out call may still run for a late observation, ms. */
  abandonMs: number;
  /** Worker threads running tools. */
  threads: number;
  /** Test tools this worker runs (`RUNPLANE_TEST_TOOLS`). */
  testTools: string[];
  /** File `record_effect` appends to. */
  recordEffectFile: string;
  /** The holdings folder the research tools read (`RUNPLANE_DATA_DIR`; empty or absent: the default folder). */
  dataDir?: string;
  /** Where the tool threads keep data-file inspections for each other (`RUNPLANE_TOOLS_INSPECTION_CACHE_DIR`; empty: nowhere). */
  inspectionCacheDir?: string;
  /** FAULT INJECTION, tests only (`RUNPLANE_FAULT_TOOLS_DISPATCH_PAUSE_FILE`): while this file exists, a wake pauses between taking its claims and appending its dispatches. */
  faultDispatchPauseFile?: string;
  /** The drain bound on SIGTERM, ms (`RUNPLANE_DRAIN_SECONDS`): how long dispatched calls may still run and be recorded. */
  drainMs?: number;
}

/** The tools worker's settings from its validated configuration (injected: `TOOLS_SETTINGS` in tools.module.ts). */
export function toolsSettings(cfg: z.infer<typeof ToolsConfig>, drain: DrainConfig): ToolsSettings {
  return {
    timeoutMs: cfg.RUNPLANE_TOOL_TIMEOUT_MS,
    claimTtlMs: cfg.RUNPLANE_TOOL_CLAIM_TTL_MS,
    sweepMs: cfg.RUNPLANE_TOOL_CLAIM_SWEEP_MS,
    abandonMs: cfg.RUNPLANE_TOOL_ABANDON_MS,
    threads: cfg.RUNPLANE_TOOL_THREADS,
    testTools: cfg.RUNPLANE_TEST_TOOLS.split(',')
      .map((s) => s.trim())
      .filter(Boolean),
    recordEffectFile: cfg.RUNPLANE_RECORD_EFFECT_FILE,
    ...(cfg.RUNPLANE_FAULT_TOOLS_DISPATCH_PAUSE_FILE ? { faultDispatchPauseFile: cfg.RUNPLANE_FAULT_TOOLS_DISPATCH_PAUSE_FILE } : {}),
    dataDir: cfg.RUNPLANE_DATA_DIR,
    inspectionCacheDir: cfg.RUNPLANE_TOOLS_INSPECTION_CACHE_DIR,
    drainMs: drain.RUNPLANE_DRAIN_SECONDS * 1000,
  };
}

/**
 * {@link toolsSettings}, with the holdings folder checked at start-up: a `RUNPLANE_DATA_DIR` that is
 * set but not a directory stops the service before it takes any call (docs/operations.md). So does
 * a `RUNPLANE_TOOLS_INSPECTION_CACHE_DIR` that cannot be made (it is created with mode 0700 when
 * missing) or that is not private (holdings `unsafeStoreFolder`: a symbolic link, another user's,
 * open to others, or movable by others through a folder above it): whoever writes it decides what
 * the tools answer.
 * @throws Error `RUNPLANE_DATA_DIR=<path> is not a directory.`, or
 *   `RUNPLANE_TOOLS_INSPECTION_CACHE_DIR=<path> cannot be used: <why>.`
 */
export function checkedToolsSettings(cfg: z.infer<typeof ToolsConfig>, drain: DrainConfig): ToolsSettings {
  const settings = toolsSettings(cfg, drain);
  // checked here with fs alone: the holdings library (exceljs) loads in the tool threads, on first use
  if (settings.dataDir && !statSync(resolvePath(settings.dataDir), { throwIfNoEntry: false })?.isDirectory())
    throw new Error(`RUNPLANE_DATA_DIR=${settings.dataDir} is not a directory.`);
  const unsafe = settings.inspectionCacheDir ? privateStoreFolder(settings.inspectionCacheDir) : null;
  if (unsafe) throw new Error(`RUNPLANE_TOOLS_INSPECTION_CACHE_DIR=${settings.inspectionCacheDir} cannot be used: ${unsafe}.`);
  return settings;
}

/** Dispatched calls of a Run that have no receipt yet: the ones whose executor must be looked up. */
function awaitingReceipt(facts: RunFacts): ToolCallFacts[] {
  return [...facts.toolCalls.values()].filter((c) => c.dispatched && !c.receipt);
}

/**
 * Executes proposed tool calls: a thin adapter over {@link decide} (K5, K8).
 * - On each proposal (and for each expired claim the sweep finds) it reads the Run, then the
 *   claims of its dispatched calls without a receipt, and decides a `Wake` with them: a call is
 *   declared `unknown` only when its executor's claim is gone or expired.
 * - Before a `tool.call.dispatched` is appended it takes the call's claim (so a dispatched call
 *   always has had a live claim). A wake that meets a claim held by another executor (which
 *   decided from a read that may not include this wake's proposal) is never dropped: it reads the
 *   Run again after a short pause (the holder's dispatch is then in the log, and only the calls
 *   still undispatched are decided), and past the `claimMet` retry policy's pauses it is handed back to the
 *   consumer for redelivery ({@link RetryLater}) until the holder's dispatch is appended or its
 *   claim expires and is taken over (no wake lost to a claim). It executes exactly the calls whose dispatch it appended itself,
 *   in worker threads, renewing each claim meanwhile, and decides the outcome into a receipt (or,
 *   after `unknown`, a late observation), then releases the claim.
 */
@Controller()
@UseFilters(PassThroughEventErrors)
export class DispatchController implements OnModuleInit, OnModuleDestroy, OnApplicationShutdown {
  private readonly logger = new Logger('tools');
  private results: ResultStore | null = null;
  private claimsStore: Promise<ClaimStore> | null = null;
  private readonly executor: ToolExecutor;
  private sweeper: NodeJS.Timeout | null = null;
  private sweeping = false;
  /** Late observations still awaited (timed-out calls whose thread still runs). */
  private readonly lateWork = new Set<Promise<void>>();
  /** Executions this process dispatched and runs now (until their receipt is recorded and claim released). */
  private readonly running = new Set<Promise<void>>();
  /** SIGTERM: no new dispatch starts here; proposals are redelivered to another replica. */
  private stopping = false;

  constructor(
    private readonly log: EventLog,
    private readonly commands: RunCommandHandler,
    @Inject(TOOLS_SETTINGS) private readonly settings: ToolsSettings,
  ) {
    this.executor = new ToolExecutor({ threads: settings.threads, timeoutMs: settings.timeoutMs, abandonMs: settings.abandonMs });
  }

  /** Waits for the tool threads (the service reports ready only after), then starts the claims sweep. */
  async onModuleInit(): Promise<void> {
    const startedAt = Date.now();
    await this.executor.ready;
    this.logger.log({ threads: this.settings.threads, ms: Date.now() - startedAt }, 'tool threads started');
    this.sweeper = setInterval(() => void this.sweep(), this.settings.sweepMs);
  }

  /**
   * The drain (SIGTERM, a rollout): nothing new is dispatched here (proposals are redelivered to
   * another replica), and the calls this process dispatched finish and get their receipts within
   * `drainMs` (K5: a call in flight is never dropped without a record). Past the bound the process
   * stops anyway: a call still running keeps its claim until it expires, and a peer then records it
   * `unknown` (executor lost), never as a success and never run twice.
   */
  async onModuleDestroy(): Promise<void> {
    this.stopping = true;
    if (this.sweeper) clearInterval(this.sweeper);
    if (this.running.size === 0) return;
    const drainMs = this.settings.drainMs ?? 0;
    this.logger.log({ executions: this.running.size, drainMs }, 'draining: finishing the dispatched tool calls');
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<'bound'>((r) => (timer = setTimeout(() => r('bound'), drainMs)));
    const outcome = await Promise.race([Promise.allSettled([...this.running]).then(() => 'done' as const), bound]);
    clearTimeout(timer);
    if (outcome === 'bound') this.logger.warn({ executions: this.running.size, drainMs }, 'drain bound passed with tool calls still running');
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.sweeper) clearInterval(this.sweeper);
    // Calls already recorded unknown are not waited for (that could take the abandon period): their late results are simply not observed.
    await this.executor.close();
  }

  private claims(): Promise<ClaimStore> {
    if (!this.claimsStore) {
      const opening = ClaimStore.open(this.log, this.settings.claimTtlMs);
      opening.catch(() => {
        if (this.claimsStore === opening) this.claimsStore = null;
      });
      this.claimsStore = opening;
    }
    return this.claimsStore;
  }

  @EventPattern('tool.call.proposed')
  async onProposed(@Payload() stored: StoredEvent): Promise<void> {
    if (this.stopping) throw new RetryLater('the tools service is stopping', DRAIN_REDELIVERY_MS);
    await this.wake(stored.event.runId, `${stored.event.type} ${stored.seq}`);
  }

  /**
   * Decides a Wake for the Run and executes what this call dispatched (awaits the executions within
   * their timeouts). A call is declared `unknown` for a lost executor only after its expired claim
   * was removed on the very revision the decision read; a claim renewed meanwhile means the
   * executor is alive, and the Wake is decided again on fresh claims.
   * A wake ends only with a read of the Run that leaves it nothing more to dispatch (no wake lost to a claim):
   * - after appending dispatches it reads the Run again and decides again before waiting for the
   *   executions (proposals appended after its read, whose own wakes may have gone to a peer that
   *   met this wake's claims, or wait behind this one, are dispatched at once);
   * - a claim held by another executor on a call it decided to dispatch is never a reason to stop:
   *   the Run is read and decided again after each pause of the `claimMet` policy (@runplane/kit).
   * @param cause what woke it (for the log).
   * @throws RetryLater when the claim is still held after those pauses: the consumer redelivers
   *   the wake (the holder has not appended its dispatch yet, or died before it; its claim expires).
   */
  private async wake(runId: string, cause: string): Promise<void> {
    const claims = await this.claims();
    const executions: Promise<void>[] = [];
    let renewed = 0;
    let lookUp = true;
    /** Read the Run from the log for the next decision (see wakeOnce's `fresh`). */
    let fresh = false;
    // one decision, read again under the claimMet policy while it meets a claim held by another
    // executor, at once (and without using up a pause) while a claim it judged expired is renewed
    const decideOnce = () =>
      retry(
        'claimMet',
        async (attempt) => {
          const decided = await this.wakeOnce(runId, claims, lookUp, executions, fresh);
          if (attempt > 1) this.logger.debug({ runId, cause, attempts: attempt }, 'wake decided after meeting a claim');
          return decided;
        },
        {
          shouldConsumeRetry: ({ error }) => !(error instanceof ClaimRenewed),
          shouldRetry: ({ error }) => (error instanceof ClaimRenewed ? ++renewed < 3 : error instanceof ClaimTaken),
          onFailedAttempt: ({ error, attemptNumber, retriesLeft }) => {
            if (!(error instanceof ClaimTaken) || retriesLeft === 0) return;
            claimMetTotal.inc({ outcome: 'retried' });
            this.logger.debug(
              { runId, cause, claim: error.key, holder: error.holder, self: error.holder === claims.holder, retry: attemptNumber },
              'wake met a claim; reading the Run again',
            );
          },
        },
      ).catch((e: unknown) => {
        if (!(e instanceof ClaimTaken)) throw e;
        claimMetTotal.inc({ outcome: 'redelivered' });
        this.logger.warn(
          { runId, cause, claim: e.key, holder: e.holder, self: e.holder === claims.holder, retries: retryPolicies.claimMet.retries },
          'wake met a claim still held; redelivering the wake',
        );
        throw new RetryLater(`the claim ${e.key} is held by ${e.holder}`, Math.max(250, Math.floor(this.settings.claimTtlMs / 6)));
      });
    try {
      // decide again after dispatching: proposals appended after this read are dispatched now, not
      // after these executions; read from the log when the turn's other proposals may not have been
      // delivered yet (the fold kept from deliveries is the Run as of the delivered proposal), and,
      // on a single-replica stream, whose runtime appends a decision's events one after another,
      // when they are not even stored yet: a few times more, 25 to 200 ms apart
      const turns = new Set<number>();
      let waits = 0;
      for (;;) {
        const { dispatched, facts } = await decideOnce();
        for (const id of dispatched) turns.add(facts.toolCalls.get(id)!.turn);
        const behind = proposalsBehind(facts, turns);
        if (dispatched.size > 0) {
          lookUp = false;
          fresh = behind;
          waits = 0;
          continue;
        }
        if (!behind || ++waits > PROPOSAL_WAITS) break;
        await new Promise((r) => setTimeout(r, 25 * 2 ** (waits - 1)));
        fresh = true;
      }
    } finally {
      // the executions this wake started end (with their receipts) before it does, whatever happened after
      await Promise.all(executions);
    }
  }

  /**
   * One read, decision and append of a Wake. Claims of dispatched calls without a receipt are
   * looked up only when `lookUp` (the first decision of a wake); the decisions after it only
   * dispatch what is new. Claims taken for dispatches that were not appended are released before
   * anything executes. The executions of the dispatches it appended are started and pushed onto
   * `executions` (not awaited), also when the decision was appended only in part before it failed:
   * a dispatch in the log is always executed by the worker that appended it, never left claimless.
   * `fresh`: the Run is read from the log, not taken from the fold kept from deliveries. Inside a
   * proposal's delivery that fold is the Run as of that proposal: the turn's later proposals,
   * appended with it in one decision, are delivered after this wake, which would then wait for its
   * executions before they are dispatched (a trial's three 3 s calls ran one after another).
   * @returns the calls whose dispatches this call appended, and the facts it decided from.
   * @throws ClaimTaken when another executor holds the claim of a call it decided to dispatch (the
   *   claims it took for dispatches it did not append are released); any error of the decision.
   */
  private async wakeOnce(
    runId: string,
    claims: ClaimStore,
    lookUp: boolean,
    executions: Promise<void>[],
    fresh: boolean,
  ): Promise<{ dispatched: Set<string>; facts: RunFacts }> {
    // Facts first, then claims: a dispatch seen in these facts had its claim taken before it was appended.
    const before = await this.commands.folds.read(runId, { fresh });
    const { claims: looked, revisions } = await claims.lookup(runId, lookUp ? awaitingReceipt(before).map((c) => c.toolCallId) : []);
    const held = new Map<string, HeldClaim>();
    const stored: StoredEvent[] = [];
    const execute = (facts: RunFacts, events: readonly StoredEvent[]) => {
      const work = Promise.all(
        events.map(async ({ event }) => {
          if (event.type === 'tool.call.receipt' && event.data.status === 'unknown') {
            this.logger.warn(
              {
                runId,
                toolCallId: event.data.toolCallId,
                code: event.data.error?.code,
                claimSeen: looked[event.data.toolCallId] ?? null,
                at: new Date().toISOString(),
              },
              'tool call outcome unknown',
            );
            await claims.release(ClaimStore.keyOf(runId, event.data.toolCallId));
          }
          if (event.type !== 'tool.call.dispatched') return;
          const call = facts.toolCalls.get(event.data.toolCallId)!;
          await this.executeClaimed(runId, call, held.get(call.toolCallId)!, claims);
        }),
      ).then(() => undefined);
      // an execution's failure is the wake's failure (awaited in wake), never an unhandled rejection meanwhile
      const tracked = work.catch(() => undefined);
      // a draining process waits for these (onModuleDestroy, within the drain bound)
      this.running.add(tracked);
      void tracked.finally(() => this.running.delete(tracked));
      executions.push(work);
    };
    const dispatchedIn = (events: readonly StoredEvent[]) =>
      new Set(events.flatMap((s) => (s.event.type === 'tool.call.dispatched' ? [s.event.data.toolCallId] : [])));
    let result;
    try {
      result = await this.commands.handle(runId, (f, now) => decide(f, { type: 'Wake', claims: looked }, now), {
        onAppended: (e) => stored.push(e),
        beforeAppend: async (events) => {
          for (const e of events) {
            if (e.type === 'tool.call.dispatched' && !held.has(e.data.toolCallId))
              held.set(e.data.toolCallId, await claims.take(runId, e.data.toolCallId));
            if (e.type === 'tool.call.receipt' && e.data.status === 'unknown' && e.data.error?.code === 'executor_lost') {
              await claims.seize(runId, e.data.toolCallId, revisions[e.data.toolCallId] ?? 0, looked[e.data.toolCallId] ?? null);
            }
          }
          if (held.size > 0) await this.faultPauseBeforeDispatch(runId);
        },
      });
    } catch (e) {
      // a decision appended in part (an attempt stored some events, then conflicted, and the next
      // attempt failed): what it dispatched is executed here under the claims taken for it
      const mine = dispatchedIn(stored);
      for (const [id, h] of held) if (!mine.has(id)) await claims.release(h.key, h.revision);
      if (stored.length > 0) {
        this.logger.warn({ runId, appended: stored.map((x) => x.event.type), error: (e as Error).message }, 'wake decision appended in part');
        try {
          execute(await this.commands.folds.read(runId), stored);
        } catch (readError) {
          // not executed: their claims expire unrenewed and the sweep records them unknown (never run twice, K5)
          this.logger.error({ runId, err: (readError as Error).message }, 'dispatches appended in part not executed');
        }
      }
      // ClaimTaken included: another executor is dispatching some of these calls, perhaps not all (see wake)
      throw e;
    }
    const { facts, appended } = result;
    const dispatchedIds = dispatchedIn(appended);
    // claims taken for dispatches that were not appended after all: released now, not after the executions
    for (const [id, h] of held) if (!dispatchedIds.has(id)) await claims.release(h.key, h.revision);
    execute(facts, appended);
    return { dispatched: dispatchedIds, facts };
  }

  /**
   * Executes one dispatched call under its claim, renewing the claim until the outcome is recorded
   * (K5). One renewal at a time, unless it has waited a whole interval or NATS reconnected since:
   * a renewal written just before a NATS restart gets no answer and would hold the claim's
   * renewals back for the client's request timeout (5 s), past a short TTL's grace, and a peer's
   * sweep would record the call `unknown` while it still runs. A renewal that lands never undoes a
   * newer one (the higher revision stands), and only the renewal of the claim as held now may find
   * it lost.
   */
  private async executeClaimed(runId: string, call: ToolCallFacts, claim: HeldClaim, claims: ClaimStore): Promise<void> {
    let current: HeldClaim | null = claim;
    const renewEvery = Math.max(50, Math.floor(this.settings.claimTtlMs / 3));
    const inFlight = new Set<Promise<void>>();
    const slot = new RenewalSlots<string>(renewEvery);
    let renewedAt = Date.now();
    const renew = (reconnected: boolean) => {
      if (!current) return;
      const answered = slot.begin(claim.key, reconnected);
      if (!answered) return;
      const gapMs = Date.now() - renewedAt;
      // a renewal this late means this process was starved or NATS was slow: the claim may have expired meanwhile
      if (gapMs > this.settings.claimTtlMs / 2)
        this.logger.warn({ runId, toolCallId: call.toolCallId, gapMs, claimTtlMs: this.settings.claimTtlMs }, 'claim renewal late');
      const from = current;
      const done: Promise<void> = claims
        .renew(from, runId, call.toolCallId)
        .then((next) => {
          renewedAt = Date.now();
          if (!current) return; // lost already
          if (next && next.revision >= current.revision) current = next;
          else if (!next && current === from) {
            current = null;
            this.logger.warn({ runId, toolCallId: call.toolCallId }, 'lost the claim of a running tool call');
          }
        })
        .catch((e: unknown) =>
          this.logger.warn({ runId, toolCallId: call.toolCallId, err: (e as Error).message }, 'claim renewal failed; renewed again next interval'),
        )
        .finally(() => {
          inFlight.delete(done);
          answered();
        });
      inFlight.add(done);
    };
    const renewal = setInterval(() => renew(false), renewEvery);
    const stopFollowing = claims.onReconnect(() => renew(true));
    const stopRenewing = async () => {
      clearInterval(renewal);
      stopFollowing();
      while (inFlight.size > 0) await Promise.all([...inFlight]);
    };
    try {
      const { outcome, durationMs, late } = await this.executor.run({
        name: call.name,
        argumentsText: call.argumentsText,
        runId,
        toolCallId: call.toolCallId,
        testTools: this.settings.testTools,
        recordEffectFile: this.settings.recordEffectFile,
        dataDir: this.settings.dataDir ?? '',
        inspectionCacheDir: this.settings.inspectionCacheDir ?? '',
      });
      if (outcome.kind === 'crashed')
        this.logger.error({ runId, toolCallId: call.toolCallId, tool: call.name, error: outcome.message }, 'tool crashed');
      // The claim is released only after the outcome is recorded: until then this executor is alive.
      // The outcome is in hand: it is recorded however long NATS takes to take it, as long as this
      // executor still holds the claim (renewed meanwhile); once the claim is lost, a sweep records
      // the call `unknown` (K5). Given up on the first failure, a NATS hiccup turned a result this
      // process held into an `unknown` receipt.
      await retry('recordOutcome', () => this.record(runId, call.toolCallId, outcome, durationMs), {
        shouldRetry: ({ error }) => (isTransientNatsError(error) || error instanceof AppendConflict) && current !== null,
        onFailedAttempt: ({ error, attemptNumber }) => {
          if ((isTransientNatsError(error) || error instanceof AppendConflict) && current !== null)
            this.logger.warn(
              { runId, toolCallId: call.toolCallId, tool: call.name, attempt: attemptNumber, error: error.message },
              'outcome of a tool call not recorded yet; retrying while its claim is held',
            );
        },
      });
      await stopRenewing();
      if (current) await claims.release(current.key, current.revision);
      if (late) {
        const work = late.then(async (observed) => {
          if (observed) await this.record(runId, call.toolCallId, observed.outcome, observed.durationMs);
        });
        const tracked = work.catch((e: unknown) =>
          this.logger.error({ runId, toolCallId: call.toolCallId, err: e }, 'late observation not recorded'),
        );
        this.lateWork.add(tracked);
        void tracked.finally(() => this.lateWork.delete(tracked));
      }
    } finally {
      await stopRenewing();
      claims.executionEnded(claim.key);
    }
  }

  /** FAULT INJECTION (tests only, off unless `faultDispatchPauseFile` is set): waits while that file exists. */
  private async faultPauseBeforeDispatch(runId: string): Promise<void> {
    const file = this.settings.faultDispatchPauseFile;
    if (!file || !existsSync(file)) return;
    this.logger.warn({ runId, file }, 'FAULT INJECTION: pausing between taking claims and appending the dispatch');
    while (existsSync(file)) await sleep(50);
  }

  /** Decides an execution's outcome into a receipt or a late observation. */
  private async record(runId: string, toolCallId: string, outcome: ToolOutcome, durationMs: number): Promise<void> {
    const resultBucket = ResultStore.bucketFor(this.log);
    const { appended } = await this.commands.handle(
      runId,
      (f, now) => decide(f, { type: 'ToolExecuted', toolCallId, outcome, durationMs, resultBucket, executor: this.log.writer.instance }, now),
      { beforeAppend: (events) => this.storeLargeResults(events, outcome) },
    );
    // the execution this process ran, once its receipt is recorded (not a late observation, not a repeat)
    for (const { event: e } of appended) {
      if (e.type === 'tool.call.receipt') toolDurationSeconds.labels(e.data.name, e.data.status).observe(e.data.durationMs / 1000);
    }
  }

  /**
   * Wakes the Runs of expired claims (their executor died or froze with nobody left to notice):
   * deciding again records `unknown` for their calls; claims whose calls have their receipt are removed.
   */
  private async sweep(): Promise<void> {
    if (this.sweeping) return;
    this.sweeping = true;
    try {
      const claims = await this.claims();
      for await (const { key, claim, revision } of claims.all()) {
        if (!claims.expired(key, claim)) continue; // alive, or judged alive through a NATS outage
        try {
          await this.wake(claim.runId, `expired claim ${key}`);
        } catch (e) {
          if (!(e instanceof RetryLater)) throw e;
          continue; // another executor is dispatching there: the next sweep looks again
        }
        const facts = await this.commands.folds.read(claim.runId);
        const call = facts.toolCalls.get(claim.toolCallId);
        if (!call || call.receipt) await claims.release(key, revision);
      }
    } catch (e) {
      this.logger.warn({ err: e instanceof Error ? e.message : String(e) }, 'claims sweep failed; trying again next interval');
    } finally {
      this.sweeping = false;
    }
  }

  /** Stores the bytes a decided receipt or late observation refers to (content-addressed, idempotent) before it is appended. */
  private async storeLargeResults(events: RunEvent[], outcome: ToolOutcome): Promise<void> {
    for (const e of events) {
      if ((e.type !== 'tool.call.receipt' && e.type !== 'tool.call.late_observed') || !e.data.resultRef || outcome.kind !== 'returned') continue;
      this.results ??= await ResultStore.open(this.log);
      await this.results.put(outcome.json);
    }
  }
}

/** How many more times a wake reads the Run for a turn's proposals not stored yet (25, 50, 100, 200 ms apart). */
export const PROPOSAL_WAITS = 4;

/**
 * Whether one of `turns` asked the model for calls the facts hold nothing of: no proposal, and no
 * wait, child Run or clarification the runtime records instead of one. The runtime records a
 * turn's calls in the decision that completes it, after its `model.turn.completed`: stored with the
 * proposal being handled, or just after it, and delivered after it.
 */
export function proposalsBehind(facts: RunFacts, turns: ReadonlySet<number>): boolean {
  const recorded = (id: string) =>
    facts.toolCalls.has(id) ||
    [...facts.waits.values()].some((w) => w.toolCallId === id) ||
    [...facts.children.values()].some((c) => c.toolCallId === id) ||
    [...facts.clarifications.values()].some((c) => c.toolCallId === id);
  return facts.turns.some((t) => turns.has(t.turn) && (t.completed?.toolCalls ?? []).some((c) => !recorded(c.toolCallId)));
}
