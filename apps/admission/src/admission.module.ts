import { Module } from '@nestjs/common';
import type { z } from 'zod';
import {
  configToken,
  GrantCeilingConfig,
  LimitsConfig,
  ModelConfig,
  ParkingToolNames,
  ParkingToolsConfig,
  QuotaConfig,
  TestToolNames,
  TestToolsConfig,
} from '@runplane/contracts';
import { ConversationIndex, EventLog, QuotaReservations } from '@runplane/eventlog';
import { EventLogModule } from '@runplane/eventlog/nest';
import { AuthModule, provideRunCommandHandler } from '@runplane/service-kit';
import { AdmissionController } from './admission.controller.js';
import { ChildRunsController } from './child-runs.controller.js';
import { ADMISSION_SETTINGS, AdmissionHealthModule, RunReaderModule, type AdmissionSettings } from './run-reader.js';

@Module({
  imports: [EventLogModule.forService('admission'), AdmissionHealthModule, RunReaderModule, AuthModule],
  controllers: [AdmissionController, ChildRunsController],
  providers: [
    // one handler for the HTTP routes and the child-Run adapter; admission keeps at most 1,000 Runs' folds
    provideRunCommandHandler('admission', { foldCapacity: 1_000 }),
    // the conversation index (K2), opened once the log is connected
    { provide: ConversationIndex, useFactory: (log: EventLog) => ConversationIndex.open(log), inject: [EventLog] },
    // the quotas' reservations of Runs the projections do not show yet
    { provide: QuotaReservations, useFactory: (log: EventLog) => QuotaReservations.open(log), inject: [EventLog] },
    {
      provide: ADMISSION_SETTINGS,
      inject: [
        configToken(LimitsConfig),
        configToken(QuotaConfig),
        configToken(ModelConfig),
        configToken(GrantCeilingConfig),
        configToken(TestToolsConfig),
        configToken(ParkingToolsConfig),
      ],
      useFactory: (
        limits: z.infer<typeof LimitsConfig>,
        quotas: QuotaConfig,
        model: ModelConfig,
        ceiling: GrantCeilingConfig,
        testTools: z.infer<typeof TestToolsConfig>,
        parkingTools: z.infer<typeof ParkingToolsConfig>,
      ): AdmissionSettings => {
        const price = model.RUNPLANE_MODEL_PRICES[model.RUNPLANE_MODEL];
        return {
          model: model.RUNPLANE_MODEL,
          money: { ...(price ? { price } : {}), ceilingMicros: ceiling.RUNPLANE_GRANT_CEILING_COST_MICROS },
          testTools: testTools.RUNPLANE_TEST_TOOLS.split(',')
            .map((t) => t.trim())
            .filter((t) => (TestToolNames as string[]).includes(t)),
          parkingTools: parkingTools.RUNPLANE_PARKING_TOOLS.split(',')
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
