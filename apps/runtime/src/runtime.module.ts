import { Module } from '@nestjs/common';
import { ContextConfig, DrainConfig, GrantCeilingConfig, LeaseConfig, ModelConfig, WaitConfig } from '@runplane/contracts';
import { EventLog, LeaseStore } from '@runplane/eventlog';
import { EventLogModule } from '@runplane/eventlog/nest';
import { configToken, HealthModule, provideRunCommandHandler, RunCommandHandler } from '@runplane/service-kit';
import { ExecutionController } from './execution.controller.js';
import { LeaseKeeper } from './lease-keeper.js';
import { ModelActivity } from './model-activity.js';
import { ModelClient } from './model-client.js';
import { RunExecutor, type RuntimeSettings } from './run-executor.js';

const MODEL_CLIENT = Symbol('MODEL_CLIENT');
const LEASES = Symbol('LEASES');
const RUNTIME_SETTINGS = Symbol('RUNTIME_SETTINGS');

/** Wires the runtime: the event log, the lease bucket, the model client (ModelConfig), its settings (LeaseConfig, WaitConfig, ContextConfig), and the runtime's three parts: the lease keeper, the model activity and the Run executor (one command handler, whose kept folds are the Runs' facts), behind the thin execution controller. The process heartbeat (recovery's late-or-gone rule, K10) is the membership heartbeat every service beats (EventLogModule's PartitionOwnership). */
@Module({
  imports: [EventLogModule.forService('runtime'), HealthModule],
  controllers: [ExecutionController],
  providers: [
    {
      provide: MODEL_CLIENT,
      inject: [configToken(ModelConfig)],
      useFactory: (cfg: ModelConfig) =>
        new ModelClient({
          baseURL: cfg.OPENAI_BASE_URL,
          apiKey: cfg.OPENAI_API_KEY,
          model: cfg.RUNPLANE_MODEL,
          timeoutMs: cfg.RUNPLANE_MODEL_TIMEOUT_MS,
          maxConcurrent: cfg.RUNPLANE_MODEL_MAX_CONCURRENT,
          minIntervalMs: cfg.RUNPLANE_MODEL_MIN_INTERVAL_MS,
        }),
    },
    provideRunCommandHandler('runtime'),
    { provide: LEASES, inject: [EventLog], useFactory: (log: EventLog) => LeaseStore.open(log) },
    {
      provide: RUNTIME_SETTINGS,
      inject: [
        configToken(LeaseConfig),
        configToken(WaitConfig),
        configToken(ContextConfig),
        configToken(ModelConfig),
        configToken(DrainConfig),
        configToken(GrantCeilingConfig),
      ],
      useFactory: (
        cfg: LeaseConfig,
        waits: WaitConfig,
        context: ContextConfig,
        model: ModelConfig,
        drain: DrainConfig,
        ceiling: GrantCeilingConfig,
      ): RuntimeSettings => ({
        leaseTtlMs: cfg.RUNPLANE_LEASE_TTL_MS,
        waitTtlMs: waits.RUNPLANE_WAIT_TTL_SECONDS * 1000,
        contextMaxChars: context.RUNPLANE_CONTEXT_MAX_CHARS,
        maxTokensPerRequest: model.RUNPLANE_MODEL_MAX_TOKENS,
        finalizationLeadMs: model.RUNPLANE_FINALIZATION_LEAD_SECONDS * 1000,
        retryBackoff: { minMs: model.RUNPLANE_MODEL_RETRY_MIN_MS, maxMs: model.RUNPLANE_MODEL_RETRY_MAX_MS },
        drainMs: drain.RUNPLANE_DRAIN_SECONDS * 1000,
        ceiling: {
          modelRequests: ceiling.RUNPLANE_GRANT_CEILING_MODEL_REQUESTS,
          toolCalls: ceiling.RUNPLANE_GRANT_CEILING_TOOL_CALLS,
          deadlineSeconds: ceiling.RUNPLANE_GRANT_CEILING_DEADLINE_SECONDS,
          inputTokens: ceiling.RUNPLANE_GRANT_CEILING_INPUT_TOKENS,
          outputTokens: ceiling.RUNPLANE_GRANT_CEILING_OUTPUT_TOKENS,
          costMicros: ceiling.RUNPLANE_GRANT_CEILING_COST_MICROS,
        },
        prices: model.RUNPLANE_MODEL_PRICES,
        ...(waits.RUNPLANE_FAULT_PARK_PAUSE_FILE ? { faultParkPauseFile: waits.RUNPLANE_FAULT_PARK_PAUSE_FILE } : {}),
      }),
    },
    {
      provide: LeaseKeeper,
      inject: [EventLog, LEASES, RUNTIME_SETTINGS],
      useFactory: (log: EventLog, leases: LeaseStore, s: RuntimeSettings) => new LeaseKeeper(log, leases, s.leaseTtlMs),
    },
    {
      provide: ModelActivity,
      inject: [EventLog, MODEL_CLIENT, RUNTIME_SETTINGS],
      useFactory: (log: EventLog, model: ModelClient, s: RuntimeSettings) => new ModelActivity(log, model, s.contextMaxChars),
    },
    {
      provide: RunExecutor,
      inject: [EventLog, RunCommandHandler, LeaseKeeper, ModelActivity, RUNTIME_SETTINGS],
      useFactory: (log: EventLog, commands: RunCommandHandler, keeper: LeaseKeeper, activity: ModelActivity, s: RuntimeSettings) =>
        new RunExecutor(log, commands, keeper, activity, s),
    },
  ],
})
export class RuntimeModule {}
