import { Controller, Logger, UseFilters } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { StoredEvent } from '@runplane/contracts';
import { PassThroughEventErrors } from '@runplane/eventlog/nest';
import { pendingChildren } from '@runplane/run-facts';
import { RunCommandHandler } from '@runplane/service-kit';
import { decide, RunAlreadySettled, RunNotFound } from './decide.js';

/**
 * Admission's adapter for child Runs (K7, K10): admits the child a parent's runtime requested
 * (`child.run.requested` -> the child's `run.admitted`, once, by its derived id, linked to the
 * parent), unless the parent already settled or was fenced; and when a parent settles while
 * children still run (canceled, fenced, past its deadline), records a cancel on each of them,
 * since nothing would ever read their result.
 */
@Controller()
@UseFilters(PassThroughEventErrors)
export class ChildRunsController {
  private readonly logger = new Logger('admission');
  constructor(private readonly commands: RunCommandHandler) {}

  @EventPattern('child.run.requested')
  async onChildRequested(@Payload() stored: StoredEvent): Promise<void> {
    const e = stored.event;
    if (e.type !== 'child.run.requested') return;
    const parent = await this.commands.folds.read(e.runId);
    const parentActive = !parent.settled && !parent.fenced && !parent.cancelRequested;
    const trigger = {
      type: 'AdmitChild',
      parentRunId: e.runId,
      conversationId: e.conversationId,
      request: e.data,
      causationId: e.eventId,
      parentActive,
      ...(parent.admitted?.principal ? { principal: parent.admitted.principal } : {}),
    } as const;
    const { appended } = await this.commands.handle(e.data.childRunId, (f, now) => decide(f, trigger, now));
    if (appended.length) this.logger.log({ runId: e.runId, childRunId: e.data.childRunId }, 'child Run admitted');
  }

  /**
   * A parent settled: each child Run still running is canceled. The settlement lists them
   * (`pendingChildRunIds`, from the lifecycle's fold of the whole Run), so most settlements (no
   * child) cost no read of the log; one written before the field existed is read to find them.
   */
  @EventPattern('run.settled')
  async onSettled(@Payload() stored: StoredEvent): Promise<void> {
    const e = stored.event;
    if (e.type !== 'run.settled') return;
    const children = e.data.pendingChildRunIds ?? pendingChildren(await this.commands.folds.read(e.runId)).map((c) => c.childRunId);
    for (const childRunId of children) {
      const reason = `its parent Run ${e.runId} settled ${e.data.outcome}`;
      const cmd = { type: 'CancelRun', principal: null, requestedBy: 'runplane', reason, requestId: `parent-settled/${e.runId}` } as const;
      await this.commands
        .handle(childRunId, (f, now) => decide(f, cmd, now))
        .catch((err: unknown) => {
          if (!(err instanceof RunAlreadySettled) && !(err instanceof RunNotFound)) throw err; // settled already, or never admitted
        });
    }
    this.commands.folds.forget(stored.event.runId);
  }
}
