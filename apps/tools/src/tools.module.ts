import { Module } from '@nestjs/common';
import { EventLogModule } from '@runplane/eventlog/nest';
import { HealthModule, provideRunCommandHandler } from '@runplane/service-kit';
import { DispatchController, TOOLS_SETTINGS, toolsSettingsFromEnv } from './dispatch.controller.js';

/** Wires the tools worker: the event log, its settings and the dispatch controller (tools run in worker threads). */
@Module({
  imports: [EventLogModule.forService('tools'), HealthModule],
  controllers: [DispatchController],
  providers: [provideRunCommandHandler('tools'), { provide: TOOLS_SETTINGS, useFactory: () => toolsSettingsFromEnv() }],
})
export class ToolsModule {}
