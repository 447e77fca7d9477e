/**
 * The projector's check, at start-up, that its database was built from the log it consumes (K11,
 * libs/projections source.ts): a database holding another log's Runs (a replaced store, a
 * projector pointed at the wrong database) stops the start with a reason, before any event is applied.
 */
import { Injectable, type OnModuleInit } from '@nestjs/common';
import { EventLog } from '@runplane/eventlog';
import { retry } from '@runplane/kit';
import { latestProjectedRun, projectionsFromAnotherLog } from '@runplane/projections';
import { ProjectionDatabase } from './projection-database.js';

/** How long the check reads the log through a passing NATS failure before the start fails, ms. */
const SOURCE_CHECK_PATIENCE_MS = 30_000;

/** Refuses to start on a projection database built from another log. */
@Injectable()
export class ProjectionSourceCheck implements OnModuleInit {
  constructor(
    private readonly log: EventLog,
    private readonly db: ProjectionDatabase,
  ) {}

  /**
   * @throws Error saying which Run and sequence do not match the log, and what to do, when the
   *   database holds Runs of another log; the error of the last read when the log cannot be read
   *   for 30 s.
   */
  async onModuleInit(): Promise<void> {
    const latest = await latestProjectedRun(this.db.orm.em.fork());
    const found = await retry('transientRead', () => projectionsFromAnotherLog(latest, this.log), { maxRetryTime: SOURCE_CHECK_PATIENCE_MS });
    if (found)
      throw new Error(
        `${found}. Point DATABASE_URL at the projection database of this log, or build it anew from the log (docs/operations.md, "Rebuilding projections")`,
      );
  }
}
