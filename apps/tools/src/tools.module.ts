import { Module } from '@nestjs/common';
import { EventLogModule } from '@runplane/eventlog/nest';
import { DrainConfig, ToolsConfig } from '@runplane/contracts';
import { configToken, HealthModule, provideRunCommandHandler } from '@runplane/service-kit';
import { DispatchController, TOOLS_SETTINGS, toolsSettings } from './dispatch.controller.js';

/** Wires the tools worker: the event log, its settings and the dispatch controller (tools run in worker threads). */
@Module({
  imports: [EventLogModule.forService('tools'), HealthModule],
  controllers: [DispatchController],
  providers: [
    provideRunCommandHandler('tools'),
    { provide: TOOLS_SETTINGS, inject: [configToken(ToolsConfig), configToken(DrainConfig)], useFactory: toolsSettings },
  ],
})
export class ToolsModule {}
