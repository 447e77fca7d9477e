import { Controller, UseFilters } from '@nestjs/common';
import { PassThroughEventErrors } from '@runplane/eventlog/nest';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { StoredEvent } from '@runplane/contracts';
import { RunCommandHandler } from '@runplane/service-kit';
import { decide } from './decide.js';

/**
 * Recovery's adapter on the runtime subjects: when an execution finished on its own
 * (`run.execution.finished`), it closes the executors' subjects with `settling` fences (through
 * {@link decide}), which the lifecycle waits for before it settles: after a settlement, no
 * executor append decided before it can land (K6, K9; docs/recovery.md, "Closing the log at the
 * settlement").
 */
@Controller()
@UseFilters(PassThroughEventErrors)
export class ClosingController {
  constructor(private readonly commands: RunCommandHandler) {}

  @EventPattern('run.execution.finished')
  async onExecutionFinished(@Payload() stored: StoredEvent): Promise<void> {
    await this.commands.handle(stored.event.runId, (f, now) => decide(f, { type: 'ExecutionFinished' }, now));
    this.commands.folds.forget(stored.event.runId);
  }
}
