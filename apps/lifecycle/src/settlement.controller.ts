import { Controller, UseFilters } from '@nestjs/common';
import { PassThroughEventErrors } from '@runplane/eventlog/nest';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { StoredEvent } from '@runplane/contracts';
import { passagesInOrder } from '@runplane/run-facts';
import { runDurationSeconds, RunCommandHandler, settlementsTotal } from '@runplane/service-kit';
import { decide } from './decide.js';

/**
 * Reacts to the facts that can complete a Run: the runtime recording that the execution finished
 * (`run.execution.finished`: a Run that finished on its own, every tool call with its receipt,
 * closes itself and settles without a fence, recovery off the happy path), publication committing a passage or the
 * answer, recovery fencing the execution (a fault, or a finish with a tool call still in flight,
 * closed with `settling` fences): a thin adapter over {@link decide}. Recovery writes its fence on
 * the `tools` subject before the one on the `runtime` subject, so the lifecycle, woken by the
 * latter, sees both. K9, K10.
 * Once a child Run is settled (now, or already on a redelivery), its settlement is recorded on
 * its parent (`child.run.settled`, the parent's wake); the triggering event is acknowledged only
 * after that, so a crash in between is repaired by the redelivery, and the decider makes the
 * repeat a no-op (exactly once).
 */
@Controller()
@UseFilters(PassThroughEventErrors)
export class SettlementController {
  constructor(private readonly commands: RunCommandHandler) {}

  @EventPattern(['run.execution.finished', 'answer.published', 'run.fenced', 'passage.committed'])
  async onRunFact(@Payload() stored: StoredEvent): Promise<void> {
    const { facts: before, appended } = await this.commands.handle(stored.event.runId, (f, now) => decide(f, { type: 'Wake' }, now));
    // the handler returns the facts it decided from: after our own settlement, fold it in (a cheap catch-up)
    const facts = appended.length ? await this.commands.folds.read(stored.event.runId) : before;
    const link = facts.admitted?.link;
    if (facts.settled && link?.relation === 'child') {
      const answer = passagesInOrder(facts)
        .map((p) => p.text)
        .join('\n\n');
      const trigger = {
        type: 'ChildSettled',
        childRunId: facts.runId,
        outcome: facts.settled.outcome,
        reason: facts.settled.reason,
        answer,
      } as const;
      await this.commands.handle(link.parentRunId, (f, now) => decide(f, trigger, now));
    }
    for (const e of appended) {
      if (e.event.type !== 'run.settled') continue;
      settlementsTotal.inc({ outcome: e.event.data.outcome });
      // from the facts' own timestamps: the same wall time whichever replica settles, and after a restart
      if (facts.admitted)
        runDurationSeconds.labels(e.event.data.outcome).observe((Date.parse(e.event.occurredAt) - Date.parse(facts.admitted.at)) / 1000);
    }
    if (appended.some((e) => e.event.type === 'run.settled')) this.commands.folds.forget(stored.event.runId);
  }
}
