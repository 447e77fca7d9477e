import { Controller, Inject, Logger, type OnApplicationShutdown, type OnModuleDestroy, type OnModuleInit, UseFilters } from '@nestjs/common';
import { PassThroughEventErrors } from '@runplane/eventlog/nest';
import { EventPattern, Payload } from '@nestjs/microservices';
import { DrainConfig, loadConfig, ToolsConfig, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { EventLog, ResultStore, RetryLater } from '@runplane/eventlog';
import { RunCommandHandler } from '@runplane/service-kit';
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
  /** The drain bound on SIGTERM, ms (`RUNPLANE_DRAIN_SECONDS`): how long dispatched calls may still run and be recorded. */
  drainMs?: number;
}

/** Settings from the environment (validated at start-up). */
export function toolsSettingsFromEnv(): ToolsSettings {
  const cfg = loadConfig(ToolsConfig);
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
    drainMs: loadConfig(DrainConfig).RUNPLANE_DRAIN_SECONDS * 1000,
  };
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
 *   always has had a live claim); it executes exactly the calls whose dispatch it appended itself,
 *   in worker threads, renewing each claim meanwhile, and decides the outcome into a receipt (or,
 *   after `unknown`, a late observation), then releases the claim.
 */
@Controller()
@UseFilters(PassThroughEventErrors)
export class DispatchController implements OnModuleInit, OnModuleDestroy, OnApplicationShutdown {
  private readonly logger = new Logger('tools');
  private results: ResultStore | null = null;
  private claimsStore: Promise<ClaimStore> | null = null;
  private readonly commands: RunCommandHandler;
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
    @Inject(TOOLS_SETTINGS) private readonly settings: ToolsSettings,
  ) {
    this.commands = new RunCommandHandler(log, 'tools');
    this.executor = new ToolExecutor({ threads: settings.threads, timeoutMs: settings.timeoutMs, abandonMs: settings.abandonMs });
  }

  onModuleInit(): void {
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
    if (this.stopping) throw new RetryLater('the tools service is stopping', 200);
    await this.wake(stored.event.runId);
  }

  /**
   * Decides a Wake for the Run and executes what this call dispatched (awaits the executions within
   * their timeouts). A call is declared `unknown` for a lost executor only after its expired claim
   * was removed on the very revision the decision read; a claim renewed meanwhile means the
   * executor is alive, and the Wake is decided again on fresh claims.
   */
  private async wake(runId: string): Promise<void> {
    const claims = await this.claims();
    for (let attempt = 1; ; attempt++) {
      try {
        await this.wakeOnce(runId, claims);
        return;
      } catch (e) {
        if (!(e instanceof ClaimRenewed) || attempt >= 3) throw e;
      }
    }
  }

  private async wakeOnce(runId: string, claims: ClaimStore): Promise<void> {
    // Facts first, then claims: a dispatch seen in these facts had its claim taken before it was appended.
    const before = await this.commands.folds.read(runId);
    const { claims: looked, revisions } = await claims.lookup(
      runId,
      awaitingReceipt(before).map((c) => c.toolCallId),
    );
    const held = new Map<string, HeldClaim>();
    let result;
    try {
      result = await this.commands.handle(runId, (f, now) => decide(f, { type: 'Wake', claims: looked }, now), {
        beforeAppend: async (events) => {
          for (const e of events) {
            if (e.type === 'tool.call.dispatched' && !held.has(e.data.toolCallId))
              held.set(e.data.toolCallId, await claims.take(runId, e.data.toolCallId));
            if (e.type === 'tool.call.receipt' && e.data.status === 'unknown' && e.data.error?.code === 'executor_lost') {
              await claims.seize(runId, e.data.toolCallId, revisions[e.data.toolCallId] ?? 0);
            }
          }
        },
      });
    } catch (e) {
      for (const h of held.values()) await claims.release(h.key, h.revision);
      if (e instanceof ClaimTaken) return; // another live executor is dispatching these calls
      throw e;
    }
    const { facts, appended } = result;
    await Promise.all(
      appended.map(async ({ event }) => {
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
        const execution = this.executeClaimed(runId, call, held.get(call.toolCallId)!, claims);
        const tracked = execution.catch(() => undefined);
        this.running.add(tracked);
        void tracked.finally(() => this.running.delete(tracked));
        await execution;
      }),
    );
    // claims taken for dispatches that were not appended after all
    for (const [id, h] of held)
      if (!appended.some((s) => s.event.type === 'tool.call.dispatched' && s.event.data.toolCallId === id)) await claims.release(h.key, h.revision);
  }

  /** Executes one dispatched call under its claim, renewing the claim until the outcome is recorded. */
  private async executeClaimed(runId: string, call: ToolCallFacts, claim: HeldClaim, claims: ClaimStore): Promise<void> {
    let current: HeldClaim | null = claim;
    const renewEvery = Math.max(50, Math.floor(this.settings.claimTtlMs / 3));
    let renewing = Promise.resolve();
    let renewedAt = Date.now();
    const renewal = setInterval(() => {
      renewing = renewing.then(async () => {
        if (!current) return;
        const gapMs = Date.now() - renewedAt;
        // a renewal this late means this process was starved or NATS was slow: the claim may have expired meanwhile
        if (gapMs > this.settings.claimTtlMs / 2)
          this.logger.warn({ runId, toolCallId: call.toolCallId, gapMs, claimTtlMs: this.settings.claimTtlMs }, 'claim renewal late');
        current = await claims.renew(current, runId, call.toolCallId);
        renewedAt = Date.now();
        if (!current) this.logger.warn({ runId, toolCallId: call.toolCallId }, 'lost the claim of a running tool call');
      });
    }, renewEvery);
    const stopRenewing = async () => {
      clearInterval(renewal);
      await renewing;
    };
    try {
      const { outcome, durationMs, late } = await this.executor.run({
        name: call.name,
        argumentsText: call.argumentsText,
        runId,
        toolCallId: call.toolCallId,
        testTools: this.settings.testTools,
        recordEffectFile: this.settings.recordEffectFile,
      });
      if (outcome.kind === 'crashed')
        this.logger.error({ runId, toolCallId: call.toolCallId, tool: call.name, error: outcome.message }, 'tool crashed');
      // The claim is released only after the outcome is recorded: until then this executor is alive.
      await this.record(runId, call.toolCallId, outcome, durationMs);
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

  /** Decides an execution's outcome into a receipt or a late observation. */
  private async record(runId: string, toolCallId: string, outcome: ToolOutcome, durationMs: number): Promise<void> {
    const resultBucket = ResultStore.bucketFor(this.log);
    await this.commands.handle(
      runId,
      (f, now) => decide(f, { type: 'ToolExecuted', toolCallId, outcome, durationMs, resultBucket, executor: this.log.writer.instance }, now),
      { beforeAppend: (events) => this.storeLargeResults(events, outcome) },
    );
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
        await this.wake(claim.runId);
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
