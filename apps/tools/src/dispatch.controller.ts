import { Controller, Inject, Logger } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { loadConfig, ToolsConfig, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { EventLog, ResultStore } from '@runplane/eventlog';
import { executeTool, ToolFailure, type HoldingsLibrary } from '@runplane/holdings';
import { RunCommandHandler } from '@runplane/service-kit';
import { decide, type ToolOutcome } from './decide.js';

export const HOLDINGS = Symbol('HOLDINGS');
export const TOOLS_SETTINGS = Symbol('TOOLS_SETTINGS');

/** Settings of the tools worker (from {@link ToolsConfig}). */
export interface ToolsSettings {
  /** Wall time after which a call's outcome is recorded `unknown`, ms. */
  timeoutMs: number;
}

class ToolTimeout extends Error {}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new ToolTimeout(`no outcome within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** Settings from the environment (validated at start-up). */
export function toolsSettingsFromEnv(): ToolsSettings {
  const cfg = loadConfig(ToolsConfig);
  return { timeoutMs: cfg.RUNPLANE_TOOL_TIMEOUT_MS };
}

/**
 * Executes proposed tool calls: a thin adapter over {@link decide}. On each proposal it decides
 * through the command handler; it executes exactly the calls whose `tool.call.dispatched` it
 * appended itself (concurrently), and decides each outcome into a receipt. K5, K8.
 */
@Controller()
export class DispatchController {
  private readonly logger = new Logger('tools');
  private results: ResultStore | null = null;
  private readonly commands: RunCommandHandler;

  constructor(
    private readonly log: EventLog,
    @Inject(HOLDINGS) private readonly holdings: HoldingsLibrary,
    @Inject(TOOLS_SETTINGS) private readonly settings: ToolsSettings,
  ) {
    this.commands = new RunCommandHandler(log, 'tools');
  }

  @EventPattern('tool.call.proposed')
  async onProposed(@Payload() stored: StoredEvent): Promise<void> {
    const runId = stored.event.runId;
    const { facts, appended } = await this.commands.handle(runId, (f, now) => decide(f, { type: 'Wake' }, now));
    const resultBucket = ResultStore.bucketFor(this.log);
    await Promise.all(
      appended.map(async ({ event }) => {
        if (event.type !== 'tool.call.dispatched') return;
        const call = facts.toolCalls.get(event.data.toolCallId)!;
        const started = performance.now();
        const outcome = await this.execute(call.name, call.argumentsText);
        const durationMs = Math.round(performance.now() - started);
        if (outcome.kind === 'crashed')
          this.logger.error({ runId, toolCallId: call.toolCallId, tool: call.name, error: outcome.message }, 'tool crashed');
        await this.commands.handle(
          runId,
          (f, now) => decide(f, { type: 'ToolExecuted', toolCallId: call.toolCallId, outcome, durationMs, resultBucket }, now),
          { beforeAppend: (events) => this.storeLargeResults(events, outcome) },
        );
      }),
    );
  }

  /** The activity: runs one tool call under the timeout. Never throws: every ending is an outcome. */
  private async execute(name: string, argumentsText: string): Promise<ToolOutcome> {
    try {
      const args: unknown = argumentsText.trim() === '' ? {} : JSON.parse(argumentsText);
      const result = await withTimeout(executeTool(this.holdings, name, args), this.settings.timeoutMs);
      return { kind: 'returned', json: JSON.stringify(result) };
    } catch (e) {
      if (e instanceof ToolFailure) return { kind: 'failed', code: e.code, message: e.message };
      if (e instanceof ToolTimeout) return { kind: 'timed-out', timeoutMs: this.settings.timeoutMs };
      return { kind: 'crashed', message: e instanceof Error ? e.message : String(e) };
    }
  }

  /** Stores the bytes a decided receipt refers to (content-addressed, idempotent) before it is appended. */
  private async storeLargeResults(events: RunEvent[], outcome: ToolOutcome): Promise<void> {
    for (const e of events) {
      if (e.type !== 'tool.call.receipt' || !e.data.resultRef || outcome.kind !== 'returned') continue;
      this.results ??= await ResultStore.open(this.log);
      await this.results.put(outcome.json);
    }
  }
}
