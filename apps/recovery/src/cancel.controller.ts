import { Controller, UseFilters } from '@nestjs/common';
import { PassThroughEventErrors } from '@runplane/eventlog/nest';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { StoredEvent } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { RunCommandHandler } from '@runplane/service-kit';
import { decide } from './decide.js';

/** Fences a Run's execution when its user's cancel intent is recorded (K4): a thin adapter over {@link decide}. */
@Controller()
@UseFilters(PassThroughEventErrors)
export class CancelController {
  private readonly commands: RunCommandHandler;

  constructor(log: EventLog) {
    this.commands = new RunCommandHandler(log, 'recovery');
  }

  @EventPattern('run.cancel.requested')
  async onCancel(@Payload() stored: StoredEvent): Promise<void> {
    await this.commands.handle(stored.event.runId, (f, now) => decide(f, { type: 'CancelRequested' }, now));
  }
}
