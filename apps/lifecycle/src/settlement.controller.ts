import { Controller, UseFilters } from '@nestjs/common';
import { PassThroughEventErrors } from '@runplane/eventlog/nest';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { StoredEvent } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { RunCommandHandler } from '@runplane/service-kit';
import { decide } from './decide.js';

/**
 * Reacts to the facts that can complete a Run (publication committing a passage or the answer,
 * recovery fencing the execution or closing the executors' subjects after it finished): a thin
 * adapter over {@link decide}. `run.execution.finished` alone never completes a Run (recovery's
 * closing fence follows it), so it does not wake the lifecycle. Recovery writes the fence on the
 * `tools` subject before the one on the `runtime` subject, so the lifecycle, woken by the latter,
 * sees both. K9, K10.
 */
@Controller()
@UseFilters(PassThroughEventErrors)
export class SettlementController {
  private readonly commands: RunCommandHandler;

  constructor(log: EventLog) {
    this.commands = new RunCommandHandler(log, 'lifecycle');
  }

  @EventPattern(['answer.published', 'run.fenced', 'passage.committed'])
  async onRunFact(@Payload() stored: StoredEvent): Promise<void> {
    const { appended } = await this.commands.handle(stored.event.runId, (f, now) => decide(f, { type: 'Wake' }, now));
    if (appended.some((e) => e.event.type === 'run.settled')) this.commands.folds.forget(stored.event.runId);
  }
}
