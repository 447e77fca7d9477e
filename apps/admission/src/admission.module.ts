import { Module } from '@nestjs/common';
import {
  GrantCeilingConfig,
  LimitsConfig,
  loadConfig,
  ModelConfig,
  ParkingToolNames,
  ParkingToolsConfig,
  QuotaConfig,
  TestToolNames,
  TestToolsConfig,
} from '@runplane/contracts';
import { ConversationIndex, EventLog, QuotaReservations } from '@runplane/eventlog';
import { EventLogModule } from '@runplane/eventlog/nest';
import { AuthModule, HealthModule } from '@runplane/service-kit';
import { AdmissionController } from './admission.controller.js';
import { ChildRunsController } from './child-runs.controller.js';
import { ADMISSION_SETTINGS, RunReader, type AdmissionSettings } from './run-reader.js';

@Module({
  imports: [EventLogModule.forService('admission'), HealthModule, AuthModule],
  controllers: [AdmissionController, ChildRunsController],
  providers: [
    RunReader,
    // the conversation index (K2), opened once the log is connected
    { provide: ConversationIndex, useFactory: (log: EventLog) => ConversationIndex.open(log), inject: [EventLog] },
    // the quotas' reservations of Runs the projections do not show yet
    { provide: QuotaReservations, useFactory: (log: EventLog) => QuotaReservations.open(log), inject: [EventLog] },
    {
      provide: ADMISSION_SETTINGS,
      useFactory: (): AdmissionSettings => {
        const limits = loadConfig(LimitsConfig);
        const quotas = loadConfig(QuotaConfig);
        const model = loadConfig(ModelConfig);
        const price = model.RUNPLANE_MODEL_PRICES[model.RUNPLANE_MODEL];
        return {
          model: model.RUNPLANE_MODEL,
          money: { ...(price ? { price } : {}), ceilingMicros: loadConfig(GrantCeilingConfig).RUNPLANE_GRANT_CEILING_COST_MICROS },
          testTools: loadConfig(TestToolsConfig)
            .RUNPLANE_TEST_TOOLS.split(',')
            .map((t) => t.trim())
            .filter((t) => (TestToolNames as string[]).includes(t)),
          parkingTools: loadConfig(ParkingToolsConfig)
            .RUNPLANE_PARKING_TOOLS.split(',')
            .map((t) => t.trim())
            .filter((t) => (ParkingToolNames as string[]).includes(t)),
          limits: {
            maxModelRequests: limits.RUNPLANE_MAX_MODEL_REQUESTS,
            maxToolCalls: limits.RUNPLANE_MAX_TOOL_CALLS,
            deadlineSeconds: limits.RUNPLANE_RUN_DEADLINE_SECONDS,
            maxInputTokens: limits.RUNPLANE_MAX_INPUT_TOKENS,
            maxOutputTokens: limits.RUNPLANE_MAX_OUTPUT_TOKENS,
            finalOutputReserve: {
              modelRequests: limits.RUNPLANE_FINAL_RESERVE_MODEL_REQUESTS,
              outputTokens: limits.RUNPLANE_FINAL_RESERVE_OUTPUT_TOKENS,
            },
            noProgressSeconds: limits.RUNPLANE_NO_PROGRESS_SECONDS,
          },
          quotas: {
            concurrentRuns: quotas.RUNPLANE_QUOTA_CONCURRENT_RUNS,
            runsPerHour: quotas.RUNPLANE_QUOTA_RUNS_PER_HOUR,
            costMicrosPerDay: quotas.RUNPLANE_QUOTA_COST_MICROS_PER_DAY,
          },
        };
      },
    },
  ],
})
export class AdmissionModule {}
