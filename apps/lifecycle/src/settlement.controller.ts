import { Controller, UseFilters } from '@nestjs/common';
import { PassThroughEventErrors } from '@runplane/eventlog/nest';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { StoredEvent } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { RunCommandHandler } from '@runplane/service-kit';
import { decide } from './decide.js';

/** Reacts to the facts that can complete a Run (the runtime stopping, publication committing the answer, recovery fencing the execution): a thin adapter over {@link decide}. K9, K10. */
@Controller()
@UseFilters(PassThroughEventErrors)
export class SettlementController {
  private readonly commands: RunCommandHandler;

  constructor(log: EventLog) {
    this.commands = new RunCommandHandler(log, 'lifecycle');
  }

  @EventPattern(['run.execution.finished', 'answer.published', 'run.fenced'])
  async onRunFact(@Payload() stored: StoredEvent): Promise<void> {
    const { appended } = await this.commands.handle(stored.event.runId, (f, now) => decide(f, { type: 'Wake' }, now));
    if (appended.some((e) => e.event.type === 'run.settled')) this.commands.folds.forget(stored.event.runId);
  }
}
