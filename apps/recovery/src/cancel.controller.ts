import { Controller, UseFilters } from '@nestjs/common';
import { PassThroughEventErrors } from '@runplane/eventlog/nest';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { StoredEvent } from '@runplane/contracts';
import { RunCommandHandler } from '@runplane/service-kit';
import { DeadlineWatcher } from './deadline-watcher.service.js';
import { LeaseWatcher } from './lease-watcher.service.js';
import { decide } from './decide.js';

/**
 * Recovery's adapter on the admission subjects: fences a Run's execution when its user's cancel
 * intent is recorded (K4, through {@link decide}), and records every admitted Run's deadline
 * durably so that the {@link DeadlineWatcher} stops it if nobody else does (K10), re-arms its
 * no-progress check when a parked Run is woken, and forgets it and the Run's released lease
 * ({@link LeaseWatcher.settled}) when the Run settles.
 */
@Controller()
@UseFilters(PassThroughEventErrors)
export class CancelController {
  constructor(
    private readonly commands: RunCommandHandler,
    private readonly deadlines: DeadlineWatcher,
    private readonly leases: LeaseWatcher,
  ) {}

  @EventPattern('run.admitted')
  async onAdmitted(@Payload() stored: StoredEvent): Promise<void> {
    if (stored.event.type !== 'run.admitted') return;
    const { deadlineAt, noProgressSeconds } = stored.event.data.limits;
    await this.deadlines.record(
      stored.event.runId,
      deadlineAt,
      noProgressSeconds === undefined ? null : Date.parse(stored.event.occurredAt) + noProgressSeconds * 1000,
    );
  }

  /** A settled Run's deadline and released lease are forgotten at once (no clean-up pass has to read its log to find it ended). */
  @EventPattern('run.settled')
  async onSettled(@Payload() stored: StoredEvent): Promise<void> {
    await this.deadlines.settled(stored.event.runId);
    await this.leases.settled(stored.event.runId);
  }

  /** A Run parked on a question for a human is not read for its no-progress clock until its wake (K7; {@link DeadlineWatcher.parked}). */
  @EventPattern('wait.opened')
  onWaitOpened(@Payload() stored: StoredEvent): void {
    this.deadlines.parked(stored.event.runId);
  }

  /** A Run parked on a child Run is not read for its no-progress clock until its wake (K7; {@link DeadlineWatcher.parked}). */
  @EventPattern('child.run.requested')
  onChildRequested(@Payload() stored: StoredEvent): void {
    this.deadlines.parked(stored.event.runId);
  }

  /** A parked Run's wake (an answer to its question for a human) re-arms its no-progress check (K7; {@link DeadlineWatcher.woken}). */
  @EventPattern('wait.answered')
  onWaitAnswered(@Payload() stored: StoredEvent): void {
    this.deadlines.woken(stored.event.runId);
  }

  /** A parked Run's wake (a child it waits for settled) re-arms its no-progress check (K7; {@link DeadlineWatcher.woken}). */
  @EventPattern('child.run.settled')
  onChildSettled(@Payload() stored: StoredEvent): void {
    this.deadlines.woken(stored.event.runId);
  }

  @EventPattern('run.cancel.requested')
  async onCancel(@Payload() stored: StoredEvent): Promise<void> {
    await this.commands.handle(stored.event.runId, (f, now) => decide(f, { type: 'CancelRequested' }, now));
  }
}
