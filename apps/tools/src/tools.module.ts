import { Module } from '@nestjs/common';
import { EventLogModule } from '@runplane/eventlog/nest';
import { HoldingsLibrary, resolveDataFolder } from '@runplane/holdings';
import { HealthModule } from '@runplane/service-kit';
import { DispatchController, HOLDINGS, TOOLS_SETTINGS, toolsSettingsFromEnv } from './dispatch.controller.js';

/** Wires the tools worker: the event log, the holdings library, its settings and the dispatch controller. */
@Module({
  imports: [EventLogModule.forService('tools'), HealthModule],
  controllers: [DispatchController],
  providers: [
    { provide: HOLDINGS, useFactory: () => new HoldingsLibrary(resolveDataFolder()) },
    { provide: TOOLS_SETTINGS, useFactory: () => toolsSettingsFromEnv() },
  ],
})
export class ToolsModule {}
