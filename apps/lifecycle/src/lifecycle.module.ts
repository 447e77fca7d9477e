import { Controller, Module } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { StoredEvent } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { EventLogModule } from '@runplane/eventlog/nest';
import { decideAndAppend, HealthModule } from '@runplane/service-kit';
import { decideSettlement } from './decide.js';

/** Reacts to the facts that can complete a Run: the runtime stopping, publication committing the answer. */
@Controller()
export class SettlementController {
  constructor(private readonly log: EventLog) {}

  @EventPattern(['run.execution.finished', 'answer.published'])
  async onRunFact(@Payload() stored: StoredEvent): Promise<void> {
    await decideAndAppend(this.log, stored.event.runId, 'lifecycle', decideSettlement);
  }
}

@Module({ imports: [EventLogModule.forService('lifecycle'), HealthModule], controllers: [SettlementController] })
export class LifecycleModule {}
