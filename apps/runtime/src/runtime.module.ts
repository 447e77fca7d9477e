import { Controller, Inject, Logger, Module } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { contextFrom, loadConfig, makeEvent, ModelConfig, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { AppendConflict, EventLog, liveDeltaSubject, ResultStore } from '@runplane/eventlog';
import { EventLogModule } from '@runplane/eventlog/nest';
import { foldRun, type RunFacts } from '@runplane/run-facts';
import { HealthModule } from '@runplane/service-kit';
import { decideRuntimeStep } from './decide.js';
import { buildMessages, toolDefinitions } from './messages.js';
import { ModelClient } from './model-client.js';

export const MODEL_CLIENT = Symbol('MODEL_CLIENT');
/** Upper bound on steps taken in one handler invocation (a guard against a decide loop). */
const MAX_STEPS_PER_WAKE = 64;

/**
 * Executes Runs. Woken by admission and by receipts; each wake folds the Run's log, decides the
 * next step, appends it on the `runtime` subject (fenced on its last sequence, K6) and repeats
 * until there is nothing to do.
 */
@Controller()
export class ExecutionController {
  private readonly logger = new Logger('runtime');
  private results: ResultStore | null = null;

  constructor(
    private readonly log: EventLog,
    @Inject(MODEL_CLIENT) private readonly model: ModelClient,
  ) {}

  @EventPattern(['run.admitted', 'tool.call.receipt'])
  async onWake(@Payload() stored: StoredEvent): Promise<void> {
    const runId = stored.event.runId;
    let conflicts = 0;
    for (let i = 0; i < MAX_STEPS_PER_WAKE; i++) {
      try {
        if (!(await this.step(runId))) return;
      } catch (e) {
        // another runtime recorded this step first: re-read and decide again (K6)
        if (!(e instanceof AppendConflict) || ++conflicts > 5) throw e;
      }
    }
    this.logger.warn(`run ${runId}: step limit reached in one wake`);
  }

  /** Takes the Run's next step; false when there is nothing to do. */
  private async step(runId: string): Promise<boolean> {
    const facts = foldRun(runId, await this.log.readRun(runId));
    const step = decideRuntimeStep(facts, new Date());
    if (step.kind === 'none') return false;
    const ctx = contextFrom(facts.lastEvent!);
    const append = (e: RunEvent) => this.log.append(e, facts.lastSeqByOwner.runtime);
    if (step.kind === 'finish') {
      await append(makeEvent('run.execution.finished', ctx, 'finished', { reason: step.reason, detail: step.detail, answerTurn: step.answerTurn }));
    } else if (step.kind === 'propose') {
      let expected = facts.lastSeqByOwner.runtime;
      for (const call of step.calls) {
        expected = (await this.log.append(makeEvent('tool.call.proposed', ctx, call.toolCallId, { ...call, turn: step.turn }), expected)).seq;
      }
    } else {
      await this.requestTurn(facts, step.turn);
    }
    return true;
  }

  /** Appends `model.turn.requested`, calls the model, appends the outcome and the proposals. */
  private async requestTurn(facts: RunFacts, turn: number): Promise<void> {
    const ctx = contextFrom(facts.lastEvent!);
    let expected = (await this.log.append(makeEvent('model.turn.requested', ctx, turn, { turn, model: this.model.model }), facts.lastSeqByOwner.runtime)).seq;
    const messages = buildMessages(facts, await this.resolveResults(facts));
    const tools = toolDefinitions(facts.admitted!.grant.tools);
    const delta = liveDeltaSubject(this.log.space, facts.runId);
    const outcome = await this.model.turn(turn, messages, tools, (text) => this.log.nc.publish(delta, JSON.stringify({ turn, text })));
    if (!outcome.ok) {
      this.logger.warn(`run ${facts.runId} turn ${turn} failed: ${outcome.error.message}`);
      await this.log.append(makeEvent('model.turn.failed', ctx, turn, { turn, error: outcome.error }), expected);
      return;
    }
    expected = (await this.log.append(makeEvent('model.turn.completed', ctx, turn, { turn, ...outcome.turn }), expected)).seq;
    for (const call of outcome.turn.toolCalls) {
      expected = (await this.log.append(makeEvent('tool.call.proposed', ctx, call.toolCallId, { ...call, turn }), expected)).seq;
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
}

@Module({
  imports: [EventLogModule.forService('runtime'), HealthModule],
  controllers: [ExecutionController],
  providers: [
    {
      provide: MODEL_CLIENT,
      useFactory: () => {
        const cfg = loadConfig(ModelConfig);
        return new ModelClient({ baseURL: cfg.OPENAI_BASE_URL, apiKey: cfg.OPENAI_API_KEY, model: cfg.RUNPLANE_MODEL, timeoutMs: cfg.RUNPLANE_MODEL_TIMEOUT_MS });
      },
    },
  ],
})
export class RuntimeModule {}
