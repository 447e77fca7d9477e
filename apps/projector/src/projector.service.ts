/**
 * Applies stored events to the projections, in each Run's stream order, exactly once (K11).
 */
import { Injectable, Logger, type BeforeApplicationShutdown } from '@nestjs/common';
import type { StoredEvent } from '@runplane/contracts';
import { OrphanEventError, applyStoredEvent, type ApplyResult } from '@runplane/projections';
import { ProjectionDatabase } from './projection-database.js';

/** Delay before retry `attempt` (1-based) of a failed projection step: 100 ms doubling, capped at 5 s. */
export function retryDelayMs(attempt: number): number {
  return Math.min(5_000, 100 * 2 ** Math.max(0, attempt - 1));
}

/**
 * Why the projector retries in-process instead of letting the message redeliver: the consumer
 * goes on with a Run's next message after a failed one, and the Run's checkpoint would then skip
 * the failed event when it comes back. So a failing step (database down, serialization error) is
 * retried here, holding the Run's later events behind it, until it succeeds or the application
 * shuts down; only then does the error reach the consumer (nak, redelivery after restart).
 * An {@link OrphanEventError} is not retried: it cannot succeed by waiting.
 */
@Injectable()
export class ProjectorService implements BeforeApplicationShutdown {
  private readonly logger = new Logger('Projector');
  private stopping = false;
  /** Steps since start: applied, skipped as already applied (redelivery), retried after a failure. */
  readonly stats = { applied: 0, skipped: 0, retries: 0 };

  constructor(private readonly db: ProjectionDatabase) {}

  /**
   * Applies one stored event (see `applyStoredEvent`): resolves with `applied` or `skipped`
   * (already applied: redelivery). The caller acknowledges only after this resolves.
   * @throws when the application is stopping, or for an OrphanEventError.
   */
  async project(stored: StoredEvent): Promise<ApplyResult> {
    for (let attempt = 1; ; attempt++) {
      if (this.stopping) throw new Error(`projector stopping: ${stored.event.type} #${stored.seq} left for redelivery`);
      try {
        const result = await applyStoredEvent(this.db.orm.em, stored);
        this.stats[result.status]++;
        return result;
      } catch (e) {
        if (e instanceof OrphanEventError) throw e;
        this.stats.retries++;
        const delay = retryDelayMs(attempt);
        this.logger.warn(`${stored.event.type} #${stored.seq} of run ${stored.event.runId}: attempt ${attempt} failed (${(e as Error).message}); retrying in ${delay} ms`);
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  beforeApplicationShutdown(): void {
    this.stopping = true;
  }
}
