import { Module } from '@nestjs/common';
import { EventLogModule } from '@runplane/eventlog/nest';
import { DrainConfig, ToolsConfig } from '@runplane/contracts';
import { configToken, HealthModule, provideRunCommandHandler } from '@runplane/service-kit';
import { checkedToolsSettings, DispatchController, TOOLS_SETTINGS } from './dispatch.controller.js';

/** Wires the tools worker: the event log, its settings and the dispatch controller (tools run in worker threads). */
@Module({
  imports: [EventLogModule.forService('tools'), HealthModule],
  controllers: [DispatchController],
  providers: [
    provideRunCommandHandler('tools'),
    { provide: TOOLS_SETTINGS, inject: [configToken(ToolsConfig), configToken(DrainConfig)], useFactory: checkedToolsSettings },
  ],
})
export class ToolsModule {}
