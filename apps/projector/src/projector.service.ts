/**
 * Applies stored events to the projections, in each Run's stream order, exactly once (K11), in
 * batches: one PostgreSQL transaction for the deliveries of many Runs.
 */
import { Injectable, Logger, type BeforeApplicationShutdown } from '@nestjs/common';
import type { StoredEvent } from '@runplane/contracts';
import { EventLog, recordAnomaly } from '@runplane/eventlog';
import { OrphanEventError, RunEntity, applyStoredEvents, type ApplyResult } from '@runplane/projections';
import { ProjectionDatabase } from './projection-database.js';

/** Delay before retry `attempt` (1-based) of a failed projection step: 100 ms doubling, capped at 5 s. */
export function retryDelayMs(attempt: number): number {
  return Math.min(5_000, 100 * 2 ** Math.max(0, attempt - 1));
}

/** Most deliveries one flush takes, and most events one transaction applies. */
export const MAX_BATCH = 500;
/** Runs whose log one flush reads at the same time. */
const READ_CONCURRENCY = 32;

/** A queued delivery: settled once its Run's events up to (at least) the trigger are applied. */
interface Delivery {
  trigger: StoredEvent;
  resolve: (results: ApplyResult[]) => void;
  reject: (e: unknown) => void;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `fn` over `items`, at most `limit` at a time; settles every item (no early rejection). */
async function settleAll<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<PromiseSettledResult<R>[]> {
  const out = new Array<PromiseSettledResult<R>>(items.length);
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) {
      try {
        out[i] = { status: 'fulfilled', value: await fn(items[i]!) };
      } catch (reason) {
        out[i] = { status: 'rejected', reason };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/**
 * Every delivery is a wake-up for its Run, not the only event to apply: the projector reads the
 * Run's log after its checkpoint and applies every event there in stream order. A redelivery that
 * arrives after later events of its Run (a restart hands back unacknowledged messages ~30 s later,
 * behind newer ones) is therefore never lost: it was applied, in order, when the later event woke
 * the catch-up, and its own delivery finds nothing left to do (K11).
 *
 * Deliveries are batched: they are queued, and one flush at a time takes everything queued (up to
 * {@link MAX_BATCH} deliveries), reads each Run's events after its checkpoint (in parallel across
 * Runs), applies them all with one `applyStoredEvents` (one transaction per {@link MAX_BATCH}
 * events), then settles every delivery of the flush; the consumer acknowledges a message only
 * after that. Deliveries that arrive during a flush form the next one, so the batch grows with
 * the load and a lone delivery is applied at once.
 *
 * Why the projector retries in-process instead of letting the message redeliver: a failing
 * transaction (database down, serialization error) is retried here with backoff, holding the
 * flush's Runs' later events behind it, until it succeeds or the application shuts down; only
 * then does the error reach the consumer (nak, redelivery after restart). An
 * {@link OrphanEventError} is not retried (it cannot succeed by waiting): the orphan's Run is
 * dropped from the batch, its deliveries are acknowledged as skipped and logged as an anomaly
 * (an event of a Run that was never admitted is a forgery, not a fact), and the other Runs are
 * applied without it. A failed log read fails only its own Run's deliveries (they redeliver).
 */
@Injectable()
export class ProjectorService implements BeforeApplicationShutdown {
  private readonly logger = new Logger('Projector');
  private stopping = false;
  /** Since start: events applied; deliveries and events found already applied (redelivery); failed transactions retried. */
  readonly stats = { applied: 0, skipped: 0, retries: 0 };
  /** Last sequence this process applied (or found applied) per Run: a lower bound of the Run's checkpoint. */
  private readonly checkpoints = new Map<string, number>();
  private queue: Delivery[] = [];
  private draining = false;

  constructor(
    private readonly db: ProjectionDatabase,
    private readonly log: EventLog,
  ) {}

  /**
   * Brings the projection of `trigger`'s Run up to date with the Run's log: applies, in stream
   * order, every event after the Run's checkpoint (the trigger included when it is new), batched
   * with the other deliveries queued meanwhile. Resolves with the Run's results of that flush
   * (a single `skipped` result for the trigger when there was nothing left to apply); the caller
   * acknowledges the message only after this resolves.
   * @throws when the application is stopping, for an OrphanEventError of the Run, or when the
   *   Run's log cannot be read.
   */
  async catchUp(trigger: StoredEvent): Promise<ApplyResult[]> {
    // A checkpoint this process saw applied is a lower bound of the database's (checkpoints only
    // grow): a delivery at or below it is a repeat, skipped without asking PostgreSQL.
    const skipped = this.skipIfSeen(trigger);
    if (skipped) return skipped;
    if (this.stopping) throw this.stoppingError([trigger]);
    return new Promise<ApplyResult[]>((resolve, reject) => {
      this.queue.push({ trigger, resolve, reject });
      if (!this.draining) {
        this.draining = true;
        // the deliveries of the current consumer iteration join the first flush
        setImmediate(() => void this.drain());
      }
    });
  }

  /** Flushes the queue, one flush at a time, until it is empty. */
  private async drain(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, MAX_BATCH);
        try {
          await this.flush(batch);
        } catch (e) {
          for (const d of batch) d.reject(e); // settling twice is a no-op
        }
      }
    } finally {
      this.draining = false;
    }
  }

  private skipIfSeen(trigger: StoredEvent): ApplyResult[] | null {
    const runId = trigger.event.runId;
    const seen = this.checkpoints.get(runId) ?? 0;
    if (trigger.seq > seen) return null;
    this.stats.skipped++;
    return [{ status: 'skipped', runId, seq: trigger.seq, previousLastSeq: seen }];
  }

  private stoppingError(triggers: StoredEvent[]): Error {
    const what = triggers.map((t) => `${t.event.type} #${t.seq}`).join(', ');
    return new Error(`projector stopping: ${what} left for redelivery`);
  }

  /** One flush: checkpoints, log reads, one batched apply, then every delivery settled. */
  private async flush(batch: Delivery[]): Promise<void> {
    const byRun = new Map<string, Delivery[]>();
    for (const d of batch) {
      const skipped = this.skipIfSeen(d.trigger); // the cache may have moved while it was queued
      if (skipped) d.resolve(skipped);
      else byRun.set(d.trigger.event.runId, [...(byRun.get(d.trigger.event.runId) ?? []), d]);
    }
    if (byRun.size === 0) return;

    // where each Run's catch-up starts: the cached checkpoint, else the database's
    const from = new Map<string, number>();
    const unknown = [...byRun.keys()].filter((runId) => !this.checkpoints.has(runId));
    if (unknown.length > 0) {
      const stored = await this.withRetries(
        () => batch.map((d) => d.trigger),
        () => this.db.orm.em.fork().find(RunEntity, { runId: { $in: unknown } }, { fields: ['runId', 'lastSeq'] }),
      );
      for (const row of stored) from.set(row.runId, Number(row.lastSeq));
    }
    for (const [runId, deliveries] of byRun) {
      const checkpoint = this.checkpoints.get(runId) ?? from.get(runId) ?? 0;
      from.set(runId, checkpoint);
      const left = deliveries.filter((d) => {
        if (d.trigger.seq > checkpoint) return true;
        this.stats.skipped++;
        d.resolve([{ status: 'skipped', runId, seq: d.trigger.seq, previousLastSeq: checkpoint }]);
        return false;
      });
      if (left.length === 0) {
        this.remember(runId, checkpoint);
        byRun.delete(runId);
      } else byRun.set(runId, left);
    }
    if (byRun.size === 0) return;

    // each Run's events after its checkpoint, read in parallel; a failed read fails its Run only
    const runIds = [...byRun.keys()];
    const reads = await settleAll(runIds, READ_CONCURRENCY, (runId) => this.log.readRun(runId, from.get(runId)! + 1));
    let events: StoredEvent[] = [];
    runIds.forEach((runId, i) => {
      const read = reads[i]!;
      if (read.status === 'fulfilled') events.push(...read.value);
      else this.fail(byRun, runId, read.reason);
    });
    events.sort((a, b) => a.seq - b.seq);

    // apply in stream order, MAX_BATCH events per transaction
    const results = new Map<string, ApplyResult[]>();
    while (events.length > 0) {
      const chunk = events.slice(0, MAX_BATCH);
      try {
        for (const r of await this.project(chunk)) {
          results.set(r.runId, [...(results.get(r.runId) ?? []), r]);
          this.remember(r.runId, Math.max(r.seq, r.previousLastSeq, this.checkpoints.get(r.runId) ?? 0));
        }
        events = events.slice(chunk.length);
      } catch (e) {
        if (!(e instanceof OrphanEventError)) throw e;
        // the whole transaction was rolled back: drop the orphan's Run, apply the others without it.
        // A Run's admission is its first event in the log, which was just read: an event of a Run
        // without one can never apply (a forgery, K11); it is skipped as an anomaly, not redelivered
        const orphanRun = e.stored.event.runId;
        this.logger.error(
          {
            runId: orphanRun,
            eventType: e.stored.event.type,
            seq: e.stored.seq,
            anomaly: 'inapplicable-event',
            anomalies: recordAnomaly('inapplicable-event'),
            reason: e.message,
          },
          'skipping the events of a Run that was never admitted (an anomaly)',
        );
        this.skipAll(byRun, orphanRun);
        events = events.filter((s) => s.event.runId !== orphanRun);
      }
    }

    for (const [runId, deliveries] of byRun) {
      const [first, ...rest] = deliveries;
      const own = results.get(runId);
      if (own) first!.resolve(own);
      else rest.unshift(first!); // nothing was read after the checkpoint: the trigger is behind it
      for (const d of rest) {
        // a second delivery of the Run in the same flush: its event was read and applied above
        this.stats.skipped++;
        d.resolve([{ status: 'skipped', runId, seq: d.trigger.seq, previousLastSeq: this.checkpoints.get(runId) ?? 0 }]);
      }
    }
  }

  /** Fails the deliveries of one Run of the flush and drops it from `byRun`. */
  /** Acknowledges every delivery of a Run whose events cannot apply (skipped, nothing written). */
  private skipAll(byRun: Map<string, Delivery[]>, runId: string): void {
    for (const d of byRun.get(runId) ?? []) d.resolve([{ status: 'skipped', runId, seq: d.trigger.seq, previousLastSeq: 0 }]);
    byRun.delete(runId);
  }

  private fail(byRun: Map<string, Delivery[]>, runId: string, e: unknown): void {
    for (const d of byRun.get(runId) ?? []) d.reject(e);
    byRun.delete(runId);
  }

  /** Keeps the checkpoint of recently projected Runs (bounded: the oldest are dropped past 10,000). */
  private remember(runId: string, seq: number): void {
    this.checkpoints.delete(runId);
    this.checkpoints.set(runId, seq);
    if (this.checkpoints.size > 10_000) this.checkpoints.delete(this.checkpoints.keys().next().value!);
  }

  /**
   * Applies stored events in one transaction (see `applyStoredEvents`), retried in place with
   * backoff ({@link retryDelayMs}) on any error but an orphan: resolves with one `applied` or
   * `skipped` (already applied: redelivery) result per event, and counts them in `stats`.
   * @throws when the application is stopping, or an OrphanEventError (nothing of the batch written).
   */
  async project(events: StoredEvent[]): Promise<ApplyResult[]> {
    const results = await this.withRetries(
      () => events,
      () => applyStoredEvents(this.db.orm.em, events),
    );
    for (const r of results) this.stats[r.status]++;
    return results;
  }

  /** Runs a database step until it succeeds, the application stops, or it fails with an orphan. */
  private async withRetries<T>(events: () => StoredEvent[], step: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      if (this.stopping) throw this.stoppingError(events());
      try {
        return await step();
      } catch (e) {
        if (e instanceof OrphanEventError) throw e;
        this.stats.retries++;
        const delay = retryDelayMs(attempt);
        const reason = e instanceof Error ? e.message : JSON.stringify(e);
        const list = events();
        const runs = [...new Set(list.map((s) => s.event.runId))];
        this.logger.warn(
          {
            runId: runs.length === 1 ? runs[0] : undefined,
            runs: runs.length,
            events: list.length,
            firstSeq: list[0]?.seq,
            attempt,
            reason,
            retryInMs: delay,
          },
          'projection step failed; retrying',
        );
        await sleep(delay);
      }
    }
  }

  beforeApplicationShutdown(): void {
    this.stopping = true;
  }
}
