import { Controller, Inject, Logger } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { StoredEvent } from '@runplane/contracts';
import { EventLog, liveDeltaSubject, ResultStore } from '@runplane/eventlog';
import type { RunFacts } from '@runplane/run-facts';
import { RunCommandHandler } from '@runplane/service-kit';
import { decide, type ModelTurnResult } from './decide.js';
import { buildMessages, toolDefinitions } from './messages.js';
import type { ModelClient } from './model-client.js';

export const MODEL_CLIENT = Symbol('MODEL_CLIENT');
/** Upper bound on model turns taken in one wake (a guard against a decide loop). */
const MAX_TURNS_PER_WAKE = 64;

/**
 * Executes Runs: a thin adapter over {@link decide}. Woken by admission and by receipts, it
 * decides through the command handler; when its own `model.turn.requested` was appended it makes
 * that one model request (the activity) and decides the outcome into events. A request whose
 * `model.turn.requested` another writer stored is never made here (K5, K6).
 */
@Controller()
export class ExecutionController {
  private readonly logger = new Logger('runtime');
  private results: ResultStore | null = null;
  private readonly commands: RunCommandHandler;

  constructor(
    private readonly log: EventLog,
    @Inject(MODEL_CLIENT) private readonly model: ModelClient,
  ) {
    this.commands = new RunCommandHandler(log, 'runtime');
  }

  @EventPattern(['run.admitted', 'tool.call.receipt'])
  async onWake(@Payload() stored: StoredEvent): Promise<void> {
    const runId = stored.event.runId;
    for (let i = 0; i < MAX_TURNS_PER_WAKE; i++) {
      const { facts, appended } = await this.commands.handle(runId, (f, now) => decide(f, { type: 'Wake', model: this.model.model }, now));
      const requested = appended.find((e) => e.event.type === 'model.turn.requested');
      if (!requested || requested.event.type !== 'model.turn.requested') return;
      const turn = requested.event.data.turn;
      const result = await this.requestTurn(facts, turn);
      if (!result.ok) this.logger.warn({ runId, turn, error: result.error }, 'model turn failed');
      await this.commands.handle(runId, (f, now) => decide(f, { type: 'ModelTurnEnded', turn, result }, now));
    }
    this.logger.warn({ runId }, 'turn limit reached in one wake');
  }

  /** The activity: one streamed model request for `turn`, built from the Run's facts. Never throws for model-side failures. */
  private async requestTurn(facts: RunFacts, turn: number): Promise<ModelTurnResult> {
    const messages = buildMessages(facts, await this.resolveResults(facts));
    const tools = toolDefinitions(facts.admitted!.grant.tools);
    const delta = liveDeltaSubject(this.log.space, facts.runId);
    return this.model.turn(turn, messages, tools, (text) => this.log.nc.publish(delta, JSON.stringify({ turn, text })));
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
