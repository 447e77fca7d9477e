import { Controller, UseFilters } from '@nestjs/common';
import { PassThroughEventErrors } from '@runplane/eventlog/nest';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { StoredEvent } from '@runplane/contracts';
import { RunCommandHandler } from '@runplane/service-kit';
import { decide } from './decide.js';

/**
 * Commits passages as the runtime records paragraphs while the answer streams, and the rest of the
 * answer once the runtime has stopped with it: a thin adapter over {@link decide}.
 */
@Controller()
@UseFilters(PassThroughEventErrors)
export class PassagesController {
  constructor(private readonly commands: RunCommandHandler) {}

  @EventPattern(['model.output.paragraph', 'run.execution.finished'])
  async onRuntimeFact(@Payload() stored: StoredEvent): Promise<void> {
    await this.commands.handle(stored.event.runId, (f, now) => decide(f, { type: 'Wake' }, now));
    if (stored.event.type === 'run.execution.finished') this.commands.folds.forget(stored.event.runId);
  }
}
