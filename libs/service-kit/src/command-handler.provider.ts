/**
 * The Nest wiring of {@link RunCommandHandler}: each service gets exactly one, built by Nest from
 * the service's {@link EventLog}, and every controller and watcher of the service receives that one
 * by injection. One handler means one fold cache ({@link RunFolds}) per process, kept from the
 * service's deliveries, instead of one per class that decides.
 */
import type { FactoryProvider } from '@nestjs/common';
import type { Owner } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { RunCommandHandler, RunFolds } from './command-handler.js';

/** Options of {@link provideRunCommandHandler}. */
export interface CommandHandlerProviderOptions {
  /** Most Runs whose folds the handler keeps (default {@link RunFolds}' 2,000). */
  foldCapacity?: number;
}

/**
 * The provider of the service's one {@link RunCommandHandler}, appending as `owner` (K6): put it in
 * the service module's `providers` and inject `RunCommandHandler` where a class decides.
 * @param owner the owner the service appends as; a decided event of another owner throws.
 */
export function provideRunCommandHandler(owner: Owner, opts: CommandHandlerProviderOptions = {}): FactoryProvider<RunCommandHandler> {
  return {
    provide: RunCommandHandler,
    inject: [EventLog],
    useFactory: (log: EventLog) => new RunCommandHandler(log, owner, () => new Date(), new RunFolds(log, opts.foldCapacity)),
  };
}
