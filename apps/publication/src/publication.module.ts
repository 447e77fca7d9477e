import { Controller, Module } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { StoredEvent } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { EventLogModule } from '@runplane/eventlog/nest';
import { decideAndAppend, HealthModule } from '@runplane/service-kit';
import { decidePublication } from './decide.js';
import { ObserversController } from './observers.controller.js';

/** Commits passages once the runtime has stopped with an answer. */
@Controller()
export class PassagesController {
  constructor(private readonly log: EventLog) {}

  @EventPattern('run.execution.finished')
  async onExecutionFinished(@Payload() stored: StoredEvent): Promise<void> {
    await decideAndAppend(this.log, stored.event.runId, 'publication', decidePublication);
  }
}

@Module({
  imports: [EventLogModule.forService('publication'), HealthModule],
  controllers: [PassagesController, ObserversController],
})
export class PublicationModule {}
