import { Module } from '@nestjs/common';
import { EventLogModule } from '@runplane/eventlog/nest';
import { HealthModule, provideRunCommandHandler } from '@runplane/service-kit';
import { SettlementController } from './settlement.controller.js';

/** Wires the lifecycle: the event log and the settlement controller. */
@Module({
  imports: [EventLogModule.forService('lifecycle'), HealthModule],
  controllers: [SettlementController],
  providers: [provideRunCommandHandler('lifecycle')],
})
export class LifecycleModule {}
