import { Module } from '@nestjs/common';
import { EventLogModule } from '@runplane/eventlog/nest';
import { AuthModule, HealthModule, provideRunCommandHandler } from '@runplane/service-kit';
import { ObserversController } from './observers.controller.js';
import { PassagesController } from './passages.controller.js';

/** Wires publication: the event log, passage commits and the observers' HTTP endpoints. */
@Module({
  imports: [EventLogModule.forService('publication'), HealthModule, AuthModule],
  controllers: [PassagesController, ObserversController],
  providers: [provideRunCommandHandler('publication')],
})
export class PublicationModule {}
