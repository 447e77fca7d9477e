import { Module } from '@nestjs/common';
import { ContextConfig, DrainConfig, LeaseConfig, ModelConfig, WaitConfig } from '@runplane/contracts';
import { EventLog, LeaseStore } from '@runplane/eventlog';
import { EventLogModule } from '@runplane/eventlog/nest';
import { configToken, HealthModule } from '@runplane/service-kit';
import { ExecutionController, LEASES, MODEL_CLIENT, RUNTIME_SETTINGS, type RuntimeSettings } from './execution.controller.js';
import { ModelClient } from './model-client.js';

/** Wires the runtime: the event log, the lease bucket, the model client (ModelConfig), its settings (LeaseConfig, WaitConfig, ContextConfig), the execution controller. The process heartbeat (recovery's late-or-gone rule, K10) is the membership heartbeat every service beats (EventLogModule's PartitionOwnership). */
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
    { provide: LEASES, inject: [EventLog], useFactory: (log: EventLog) => LeaseStore.open(log) },
    {
      provide: RUNTIME_SETTINGS,
      inject: [configToken(LeaseConfig), configToken(WaitConfig), configToken(ContextConfig), configToken(ModelConfig), configToken(DrainConfig)],
      useFactory: (cfg: LeaseConfig, waits: WaitConfig, context: ContextConfig, model: ModelConfig, drain: DrainConfig): RuntimeSettings => ({
        leaseTtlMs: cfg.RUNPLANE_LEASE_TTL_MS,
        waitTtlMs: waits.RUNPLANE_WAIT_TTL_SECONDS * 1000,
        contextMaxChars: context.RUNPLANE_CONTEXT_MAX_CHARS,
        maxTokensPerRequest: model.RUNPLANE_MODEL_MAX_TOKENS,
        finalizationLeadMs: model.RUNPLANE_FINALIZATION_LEAD_SECONDS * 1000,
        retryBackoff: { minMs: model.RUNPLANE_MODEL_RETRY_MIN_MS, maxMs: model.RUNPLANE_MODEL_RETRY_MAX_MS },
        drainMs: drain.RUNPLANE_DRAIN_SECONDS * 1000,
        ...(waits.RUNPLANE_FAULT_PARK_PAUSE_FILE ? { faultParkPauseFile: waits.RUNPLANE_FAULT_PARK_PAUSE_FILE } : {}),
      }),
    },
  ],
})
export class RuntimeModule {}
