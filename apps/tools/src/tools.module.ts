import { Controller, Inject, Logger, Module } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { contextFrom, loadConfig, makeEvent, ToolsConfig, type EventContext, type EventData, type StoredEvent } from '@runplane/contracts';
import { EventLog, INLINE_RESULT_LIMIT, ResultStore } from '@runplane/eventlog';
import { EventLogModule } from '@runplane/eventlog/nest';
import { executeTool, HoldingsLibrary, resolveDataFolder, ToolFailure } from '@runplane/holdings';
import { foldRun } from '@runplane/run-facts';
import { HealthModule, retryOnConflict } from '@runplane/service-kit';
import { planToolSteps } from './decide.js';

export const HOLDINGS = Symbol('HOLDINGS');

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

/** Executes proposed tool calls and records dispatch and receipts on the Run's `tools` subject. */
@Controller()
export class DispatchController {
  private readonly logger = new Logger('tools');
  private results: ResultStore | null = null;
  private readonly timeoutMs = loadConfig(ToolsConfig).RUNPLANE_TOOL_TIMEOUT_MS;

  constructor(
    private readonly log: EventLog,
    @Inject(HOLDINGS) private readonly holdings: HoldingsLibrary,
  ) {}

  @EventPattern('tool.call.proposed')
  async onProposed(@Payload() stored: StoredEvent): Promise<void> {
    // a conflict means another writer recorded a step first: re-read and plan again (K5, K6)
    await retryOnConflict(() => this.dispatchOwed(stored));
  }

  private async dispatchOwed(stored: StoredEvent): Promise<void> {
    const runId = stored.event.runId;
    const facts = foldRun(runId, await this.log.readRun(runId));
    let expected = facts.lastSeqByOwner.tools;
    const ctx: EventContext = { ...contextFrom(stored.event), causationId: stored.event.eventId };
    const append = async (event: Parameters<EventLog['append']>[0]) => {
      expected = (await this.log.append(event, expected)).seq;
    };
    const receipt = (data: EventData<'tool.call.receipt'>) => makeEvent('tool.call.receipt', ctx, data.toolCallId, data);
    for (const step of planToolSteps(facts)) {
      const { toolCallId, name } = step.call;
      if (step.kind === 'deny') {
        await append(receipt({ toolCallId, name, status: 'denied', error: { code: step.code, message: step.message }, durationMs: 0 }));
      } else if (step.kind === 'mark-unknown') {
        await append(receipt({ toolCallId, name, status: 'unknown', error: { code: 'outcome_unknown', message: step.message }, durationMs: 0 }));
      } else {
        await append(makeEvent('tool.call.dispatched', ctx, toolCallId, { toolCallId, name }));
        await append(receipt(await this.execute(toolCallId, name, step.call.argumentsText)));
      }
    }
  }

  /** Runs one tool call; every outcome becomes a receipt (never an exception). */
  private async execute(toolCallId: string, name: string, argumentsText: string): Promise<EventData<'tool.call.receipt'>> {
    const started = Date.now();
    const base = { toolCallId, name };
    let args: unknown;
    try {
      args = argumentsText.trim() === '' ? {} : JSON.parse(argumentsText);
    } catch (e) {
      return { ...base, status: 'failed', error: { code: 'bad_arguments', message: `arguments are not JSON: ${(e as Error).message}` }, durationMs: 0 };
    }
    try {
      const result = await withTimeout(executeTool(this.holdings, name, args), this.timeoutMs);
      const json = JSON.stringify(result);
      const durationMs = Date.now() - started;
      if (Buffer.byteLength(json) <= INLINE_RESULT_LIMIT) return { ...base, status: 'succeeded', result, durationMs };
      this.results ??= await ResultStore.open(this.log);
      return { ...base, status: 'succeeded', resultRef: await this.results.put(json), durationMs };
    } catch (e) {
      const durationMs = Date.now() - started;
      if (e instanceof ToolFailure) return { ...base, status: 'failed', error: { code: e.code, message: e.message }, durationMs };
      if (e instanceof ToolTimeout) return { ...base, status: 'unknown', error: { code: 'timeout', message: e.message }, durationMs };
      this.logger.error(`tool ${name} (${toolCallId}) crashed: ${(e as Error).stack}`);
      return { ...base, status: 'failed', error: { code: 'tool_error', message: (e as Error).message }, durationMs };
    }
  }
}

@Module({
  imports: [EventLogModule.forService('tools'), HealthModule],
  controllers: [DispatchController],
  providers: [{ provide: HOLDINGS, useFactory: () => new HoldingsLibrary(resolveDataFolder()) }],
})
export class ToolsModule {}
