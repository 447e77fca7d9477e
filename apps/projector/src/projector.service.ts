/**
 * Applies stored events to the projections, in each Run's stream order, exactly once (K11).
 */
import { Injectable, Logger, type BeforeApplicationShutdown } from '@nestjs/common';
import type { StoredEvent } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { OrphanEventError, RunEntity, applyStoredEvent, type ApplyResult } from '@runplane/projections';
import { ProjectionDatabase } from './projection-database.js';

/** Delay before retry `attempt` (1-based) of a failed projection step: 100 ms doubling, capped at 5 s. */
export function retryDelayMs(attempt: number): number {
  return Math.min(5_000, 100 * 2 ** Math.max(0, attempt - 1));
}

/**
 * Every delivery is a wake-up for its Run, not the only event to apply: the projector reads the
 * Run's log after its checkpoint and applies every event there in stream order. A redelivery that
 * arrives after later events of its Run (a restart hands back unacknowledged messages ~30 s later,
 * behind newer ones) is therefore never lost: it was applied, in order, when the later event woke
 * the catch-up, and its own delivery finds nothing left to do (K11).
 *
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
  /** Last sequence this process applied (or found applied) per Run: a lower bound of the Run's checkpoint. */
  private readonly checkpoints = new Map<string, number>();

  constructor(
    private readonly db: ProjectionDatabase,
    private readonly log: EventLog,
  ) {}

  /**
   * Brings the projection of `trigger`'s Run up to date with the Run's log: applies, in stream
   * order, every event after the Run's checkpoint (the trigger included when it is new). Resolves
   * with the results; the caller acknowledges the message only after this resolves.
   * @throws when the application is stopping, or for an OrphanEventError.
   */
  async catchUp(trigger: StoredEvent): Promise<ApplyResult[]> {
    const runId = trigger.event.runId;
    // A checkpoint this process saw applied is a lower bound of the database's (checkpoints only
    // grow): a delivery at or below it is a repeat, skipped without asking PostgreSQL.
    const seen = this.checkpoints.get(runId) ?? 0;
    if (trigger.seq <= seen) {
      this.stats.skipped++;
      return [{ status: 'skipped', runId, seq: trigger.seq, previousLastSeq: seen }];
    }
    const row = await this.db.orm.em.fork().findOne(RunEntity, { runId });
    const checkpoint = row ? Number(row.lastSeq) : 0;
    if (trigger.seq <= checkpoint) {
      this.remember(runId, checkpoint);
      this.stats.skipped++;
      return [{ status: 'skipped', runId, seq: trigger.seq, previousLastSeq: checkpoint }];
    }
    const results: ApplyResult[] = [];
    for (const stored of await this.log.readRun(runId, checkpoint + 1)) {
      results.push(await this.project(stored));
      this.remember(runId, stored.seq);
    }
    return results;
  }

  /** Keeps the checkpoint of recently projected Runs (bounded: the oldest are dropped past 10,000). */
  private remember(runId: string, seq: number): void {
    this.checkpoints.delete(runId);
    this.checkpoints.set(runId, seq);
    if (this.checkpoints.size > 10_000) this.checkpoints.delete(this.checkpoints.keys().next().value!);
  }

  /**
   * Applies one stored event (see `applyStoredEvent`): resolves with `applied` or `skipped`
   * (already applied: redelivery).
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
        const reason = e instanceof Error ? e.message : JSON.stringify(e);
        this.logger.warn(
          { runId: stored.event.runId, eventType: stored.event.type, seq: stored.seq, attempt, reason, retryInMs: delay },
          'projection step failed; retrying',
        );
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  beforeApplicationShutdown(): void {
    this.stopping = true;
  }
}
