import { Controller, Inject, type BeforeApplicationShutdown, type OnModuleDestroy, UseFilters } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { StoredEvent } from '@runplane/contracts';
import { PassThroughEventErrors } from '@runplane/eventlog/nest';
import { LeaseKeeper } from './lease-keeper.js';
import { RunExecutor, type DrainReport } from './run-executor.js';

/**
 * The runtime's thin adapter: the events that wake a Run (`run.admitted`, a receipt, a cancel, a
 * wait answered, a child settled, a handover) are handed to the {@link RunExecutor}; on SIGTERM the
 * executor drains (hands its Runs over, K10), and at shutdown the {@link LeaseKeeper} stops
 * renewing. The three parts of the runtime: the lease keeper (`./lease-keeper.ts`), the Run
 * executor (`./run-executor.ts`, one loop over the decider `./decide.ts`) and the model activity
 * (`./model-activity.ts`).
 */
@Controller()
@UseFilters(PassThroughEventErrors)
export class ExecutionController implements OnModuleDestroy, BeforeApplicationShutdown {
  constructor(
    @Inject(RunExecutor) private readonly executor: RunExecutor,
    @Inject(LeaseKeeper) private readonly keeper: LeaseKeeper,
  ) {}

  @EventPattern(['run.admitted', 'tool.call.receipt', 'run.cancel.requested', 'wait.answered', 'child.run.settled', 'run.handed_over'])
  onWake(@Payload() stored: StoredEvent): Promise<void> {
    return this.executor.wake(stored.event.runId, stored.event.type);
  }

  /** The drain (SIGTERM): see {@link RunExecutor.drain}. */
  onModuleDestroy(): Promise<DrainReport> {
    return this.executor.drain();
  }

  beforeApplicationShutdown(): void {
    this.keeper.stop();
  }
}
