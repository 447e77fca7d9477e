import { Module } from '@nestjs/common';
import { loadConfig, ModelConfig } from '@runplane/contracts';
import { EventLogModule } from '@runplane/eventlog/nest';
import { HealthModule } from '@runplane/service-kit';
import { ExecutionController, MODEL_CLIENT } from './execution.controller.js';
import { ModelClient } from './model-client.js';

/** Wires the runtime: the event log, the model client (from ModelConfig) and the execution controller. */
@Module({
  imports: [EventLogModule.forService('runtime'), HealthModule],
  controllers: [ExecutionController],
  providers: [
    {
      provide: MODEL_CLIENT,
      useFactory: () => {
        const cfg = loadConfig(ModelConfig);
        return new ModelClient({
          baseURL: cfg.OPENAI_BASE_URL,
          apiKey: cfg.OPENAI_API_KEY,
          model: cfg.RUNPLANE_MODEL,
          timeoutMs: cfg.RUNPLANE_MODEL_TIMEOUT_MS,
        });
      },
    },
  ],
})
export class RuntimeModule {}
