/**
 * Applies stored events to the projections, in each Run's stream order, exactly once (K11), in
 * batches: one PostgreSQL transaction for the deliveries of many Runs.
 */
import { Inject, Injectable, Logger, Optional, type BeforeApplicationShutdown } from '@nestjs/common';
import { Owner, type StoredEvent } from '@runplane/contracts';
import type { Context, Link } from '@opentelemetry/api';
import { EventLog, inSpan, linkTo, partitionOf, recordAnomaly, runSubject, traceContext } from '@runplane/eventlog';
import { AbortError, retry, retryPolicies } from '@runplane/kit';
import {
  OrphanEventError,
  applyStoredEvents,
  completeUpTo,
  continuityOf,
  reprojectRun,
  selectCheckpoints,
  subjectTokenOfStored,
  type ApplyResult,
  type ProjectionGap,
  type RunCheckpoint,
  type SubjectSeqs,
} from '@runplane/projections';
import { metricsRegistry } from '@runplane/service-kit';
import { Counter } from 'prom-client';
import { ProjectionDatabase } from './projection-database.js';

/**
 * Runs of a flush by how the projector got their events (`GET /metrics`): `deliveries` (applied
 * from the deliveries alone, no read of the log) or `read` (the Run's log read after its
 * checkpoint): no read of the log on the hot path.
 */
export const projectorRunsTotal = new Counter({
  name: 'runplane_projector_runs_total',
  help: "Runs of a projector flush by how their events were had: deliveries (no read of the log) or read (the Run's log read)",
  labelNames: ['path'] as const,
  registers: [metricsRegistry],
});

/** Delay before retry `attempt` (1-based) of a failed projection step, the `projectionStep` policy's: 100 ms doubling, capped at 5 s. */
export function retryDelayMs(attempt: number): number {
  const { minTimeout, factor, maxTimeout } = retryPolicies.projectionStep;
  return Math.min(maxTimeout, minTimeout * factor ** Math.max(0, attempt - 1));
}

/** Injection token of the projector's batch linger, ms (`PROJECTOR_BATCH_LINGER_MS`): see {@link ProjectorService}. */
export const PROJECTOR_BATCH_LINGER = Symbol('PROJECTOR_BATCH_LINGER');

/** Most deliveries one flush takes, and most events one transaction applies. */
export const MAX_BATCH = 500;
/** Runs whose log one flush reads at the same time. */
const READ_CONCURRENCY = 32;

/** Most links one `projector apply` span carries to the deliveries it applies for (beyond its parent). */
const MAX_TRACE_LINKS = 32;

/**
 * Where the SQL span of a flush's transaction belongs: in the trace of the first delivery whose
 * Run it applies, linked to the other deliveries' (other Runs' traces, when a flush batches them).
 */
function tracesOf(batch: readonly Delivery[], chunk: readonly StoredEvent[]): { parent?: Context; links?: Link[] } {
  const runs = new Set(chunk.map((s) => s.event.runId));
  const served = batch.filter((d) => runs.has(d.trigger.event.runId));
  if (served.length === 0) return {};
  const links = served
    .slice(1)
    .map((d) => linkTo(d.trace))
    .filter((l): l is Link => l !== null)
    .slice(0, MAX_TRACE_LINKS);
  return { parent: served[0]!.trace, ...(links.length ? { links } : {}) };
}

/** A queued delivery: settled once its Run's events up to (at least) the trigger are applied. */
interface Delivery {
  trigger: StoredEvent;
  /** When it was queued (`performance.now()`, ms): a flush waits until its oldest delivery has lingered. */
  queuedAt: number;
  resolve: (results: ApplyResult[]) => void;
  reject: (e: unknown) => void;
  /** The trace context of the delivery's handler: the flush's SQL span joins the Run's trace. */
  trace: Context;
}

/**
 * The Run's delivered events when, in stream order, each one continues its subject from
 * `checkpoint` (its back-link is the last sequence applied on its subject, and it comes after the
 * Run's last applied event: `continuityOf` says `next`); null when any does not (a gap, a repeat,
 * an event without back-link: the Run's log is read instead). Only for a checkpoint the caller
 * reached by following the Run in stream order: a whole-partition consumer delivers a Run's
 * events in stream order, so no event of another subject can be missing before them; after a
 * restart or a failed delivery, redeliveries may come behind later events, and those Runs are
 * read (no read of the log on the hot path). The database checks the same continuity
 * again when it applies them (`applyStoredEvents`), and a hole found there is repaired as before.
 */
export function chainedFrom(checkpoint: RunCheckpoint, deliveries: readonly { trigger: StoredEvent }[]): StoredEvent[] | null {
  const events = deliveries.map((d) => d.trigger).sort((a, b) => a.seq - b.seq);
  let at = checkpoint;
  for (const stored of events) {
    if (stored.event.prevSeq === undefined || continuityOf(at, stored).kind !== 'next') return null;
    const subject = subjectTokenOfStored(stored);
    at = { lastSeq: stored.seq, subjectSeqs: { ...at.subjectSeqs, [subject]: stored.seq } };
  }
  return events;
}

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
 * A Run this process follows (it applied the Run's events in stream order since its partition's
 * consumer started here, or the Run's admission was delivered here) is applied from its
 * deliveries alone when they chain from its checkpoint ({@link chainedFrom}): the happy path reads
 * no log (no read of the log on the hot path). Otherwise every delivery is a wake-up for its Run, not the only event to
 * apply: the projector reads the Run's log after its checkpoint and applies every event there in
 * stream order. A redelivery that
 * arrives after later events of its Run (a restart hands back unacknowledged messages ~30 s later,
 * behind newer ones) is therefore never lost: it was applied, in order, when the later event woke
 * the catch-up, and its own delivery finds nothing left to do (K11).
 *
 * A Run's log is read one subject at a time (its last message, then back-links), so the read is
 * not one snapshot: an event appended on one subject while the read runs can be missing from it
 * while a later event of another subject is there. Each subject's last sequence is therefore
 * looked up again after the read, and only the events up to where the read is known complete are
 * applied (`completeUpTo`); the rest are applied when their own deliveries wake the Run. Before
 * that check, such a read advanced the Run's checkpoint past the missing event, whose delivery
 * then found it "at or below the checkpoint" and skipped it for ever, silently.
 *
 * Every event is also checked against its subject's back-link (`continuityOf`, with the last
 * sequence applied per subject kept in `runs.subject_seqs`): an event that shows a hole in the
 * Run's projection is never skipped quietly. It is logged as an error ("projection gap", with the
 * Run, subject, the expected and seen back-links), counted as the anomaly `projection-gap`, and
 * the Run is re-projected from its whole log (`reprojectRun`, idempotent) before its deliveries
 * are acknowledged.
 *
 * Deliveries are batched: they are queued, and one flush at a time takes everything queued (up to
 * {@link MAX_BATCH} deliveries), reads each Run's events after its checkpoint (in parallel across
 * Runs), applies them all with one `applyStoredEvents` (one transaction per {@link MAX_BATCH}
 * events), then settles every delivery of the flush; the consumer acknowledges a message only
 * after that. Deliveries that arrive during a flush form the next one, so the batch grows with
 * the load. A batch shorter than {@link MAX_BATCH} waits until its oldest delivery has been queued
 * for the linger (`PROJECTOR_BATCH_LINGER_MS`, default 50): the partition consumers hand the
 * projector each delivery as it arrives, not after the Run's previous one was acknowledged
 * (`onArrival`), so a quiet projector writes a Run's events that arrive a few ms apart in one
 * transaction instead of one each.
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
  /**
   * Since start: events applied; deliveries and events found already applied (redelivery); failed
   * transactions retried; gaps found in a Run's projection (each repaired by re-projecting the Run);
   * Runs of a flush applied from their deliveries alone, and Runs whose log was read.
   */
  readonly stats = { applied: 0, skipped: 0, retries: 0, gaps: 0, fromDeliveries: 0, reads: 0 };
  /** The checkpoint this process last applied per Run (`lastSeq`, `subjectSeqs`): a lower bound of the Run's stored one. */
  private readonly checkpoints = new Map<string, RunCheckpoint>();
  /**
   * Runs whose cached checkpoint this process reached by applying their events in stream order (a
   * complete read, or deliveries that chained): their next deliveries, in order from the
   * partition's consumer, may be applied without reading the log ({@link chainedFrom}). Not a
   * checkpoint only read from the database (a restart's redeliveries may still be on their way).
   */
  private readonly inOrder = new Set<string>();
  private queue: Delivery[] = [];
  private draining = false;
  /** Ends the linger of the flush about to start (a full queue, or the application stopping): set while it waits. */
  private wake: (() => void) | null = null;

  /**
   * @param lingerMs longest a delivery waits for others to share its flush, ms
   *   (`PROJECTOR_BATCH_LINGER_MS`; 0, the default here, flushes at once)
   */
  constructor(
    private readonly db: ProjectionDatabase,
    private readonly log: EventLog,
    @Optional() @Inject(PROJECTOR_BATCH_LINGER) private readonly lingerMs: number = 0,
  ) {
    // a partition's consumer starting or stopping here: another replica may have applied its Runs meanwhile
    log.deliveries?.observe({
      delivered: () => undefined,
      partitionMoved: (partition) => {
        for (const runId of [...this.checkpoints.keys()]) if (partitionOf(runId, log.space.partitions) === partition) this.forget(runId);
      },
    });
  }

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
      this.queue.push({ trigger, queuedAt: performance.now(), resolve, reject, trace: traceContext.active() });
      if (this.queue.length >= MAX_BATCH) this.wake?.(); // a full batch does not wait
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
        // a short batch waits for its oldest delivery to have lingered: the next events of its
        // Runs (a few ms apart) join it instead of a transaction each
        const wait = this.queue.length < MAX_BATCH ? this.queue[0]!.queuedAt + this.lingerMs - performance.now() : 0;
        if (wait > 0 && !this.stopping) await this.linger(wait);
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

  /** Waits `ms`, or less when {@link wake} is called meanwhile. */
  private linger(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wake = done;
    });
  }

  private skipIfSeen(trigger: StoredEvent): ApplyResult[] | null {
    const runId = trigger.event.runId;
    const seen = this.checkpoints.get(runId);
    if (!seen || continuityOf(seen, trigger).kind !== 'applied') return null;
    this.stats.skipped++;
    return [{ status: 'skipped', runId, seq: trigger.seq, previousLastSeq: seen.lastSeq }];
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
    const followed = new Set([...byRun.keys()].filter((runId) => this.inOrder.has(runId)));

    // where each Run's catch-up starts: the cached checkpoint, else the database's
    const from = new Map<string, RunCheckpoint>();
    const unknown = [...byRun.keys()].filter((runId) => !this.checkpoints.has(runId));
    if (unknown.length > 0) {
      const stored = await this.withRetries(
        () => batch.map((d) => d.trigger),
        () => selectCheckpoints(this.db.orm.em.fork(), unknown),
      );
      for (const [runId, checkpoint] of stored) from.set(runId, checkpoint);
      // a Run the database does not know, delivered from its admission (its first event) on, is followed from there
      for (const runId of unknown)
        if (!from.has(runId) && byRun.get(runId)!.some((d) => d.trigger.event.type === 'run.admitted')) followed.add(runId);
    }
    /** Per Run: a sequence known to be stored before its log is read (its checkpoint, its deliveries). */
    const storedBefore = new Map<string, number>();
    for (const [runId, deliveries] of byRun) {
      const checkpoint = this.checkpoints.get(runId) ?? from.get(runId) ?? { lastSeq: 0, subjectSeqs: {} };
      from.set(runId, checkpoint);
      storedBefore.set(runId, Math.max(checkpoint.lastSeq, ...deliveries.map((d) => d.trigger.seq)));
      const left = deliveries.filter((d) => {
        if (continuityOf(checkpoint, d.trigger).kind !== 'applied') return true;
        this.stats.skipped++;
        d.resolve([{ status: 'skipped', runId, seq: d.trigger.seq, previousLastSeq: checkpoint.lastSeq }]);
        return false;
      });
      if (left.length === 0) {
        this.remember(runId, checkpoint);
        byRun.delete(runId);
      } else byRun.set(runId, left);
    }
    if (byRun.size === 0) return;

    // a Run whose deliveries chain from its checkpoint is applied from them alone (no
    // read of the log on the hot path); the others' events after their checkpoints are read, in
    // parallel, and a failed read fails its Run only
    let events: StoredEvent[] = [];
    const runIds: string[] = [];
    for (const [runId, deliveries] of byRun) {
      const chained = followed.has(runId) ? chainedFrom(from.get(runId)!, deliveries) : null;
      if (chained) {
        this.stats.fromDeliveries++;
        projectorRunsTotal.inc({ path: 'deliveries' });
        events.push(...chained);
      } else runIds.push(runId);
    }
    const reads = await settleAll(runIds, READ_CONCURRENCY, (runId) =>
      this.readComplete(runId, from.get(runId)!.subjectSeqs, storedBefore.get(runId)!),
    );
    this.stats.reads += runIds.length;
    if (runIds.length) projectorRunsTotal.inc({ path: 'read' }, runIds.length);
    runIds.forEach((runId, i) => {
      const read = reads[i]!;
      if (read.status === 'fulfilled') events.push(...read.value);
      else this.fail(byRun, runId, read.reason);
    });
    events.sort((a, b) => a.seq - b.seq);
    const bySeq = new Map(events.map((s) => [s.seq, s]));
    for (const s of events) storedBefore.set(s.event.runId, Math.max(storedBefore.get(s.event.runId)!, s.seq));

    // apply in stream order, MAX_BATCH events per transaction
    const results = new Map<string, ApplyResult[]>();
    const gaps = new Map<string, ProjectionGap>();
    while (events.length > 0) {
      const chunk = events.slice(0, MAX_BATCH);
      try {
        for (const r of await this.project(chunk, tracesOf(batch, chunk))) {
          if (r.status === 'gap') {
            if (!gaps.has(r.runId)) gaps.set(r.runId, r.gap!);
            continue;
          }
          results.set(r.runId, [...(results.get(r.runId) ?? []), r]);
          if (r.status === 'applied') this.advance(r.runId, from.get(r.runId)!, bySeq.get(r.seq)!);
          else this.forget(r.runId); // applied elsewhere: the stored checkpoint is ahead of this one
        }
        events = events.slice(chunk.length);
      } catch (e) {
        if (!(e instanceof OrphanEventError)) throw e;
        // the whole transaction was rolled back: drop the orphan's Run, apply the others without it.
        // A Run's admission is its first event in the log, which was just read: an event of a Run
        // without one can never apply (a forgery, K11); it is skipped as an anomaly, not redelivered
        this.skipOrphan(byRun, e);
        events = events.filter((s) => s.event.runId !== e.stored.event.runId);
      }
    }

    // a hole in a Run's projection: said loudly, then the Run is re-projected from its whole log
    for (const [runId, gap] of gaps) {
      if (!byRun.has(runId)) continue;
      this.reportGap(gap);
      try {
        results.set(runId, await this.repair(runId, storedBefore.get(runId)!));
      } catch (e) {
        if (e instanceof OrphanEventError) this.skipOrphan(byRun, e);
        else this.fail(byRun, runId, e);
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
        d.resolve([{ status: 'skipped', runId, seq: d.trigger.seq, previousLastSeq: this.checkpoints.get(runId)?.lastSeq ?? 0 }]);
      }
    }
  }

  /**
   * The Run's events after `known` (per subject), as far as the read is complete: each subject's
   * last sequence is looked up again after the read, and events past the lowest one that moved
   * meanwhile are left out (`completeUpTo`; they are applied when their deliveries arrive).
   * `storedBefore` is a sequence stored before the read began: everything up to it is kept.
   */
  private async readComplete(runId: string, known: SubjectSeqs, storedBefore: number): Promise<StoredEvent[]> {
    const read = await this.log.catchUp(runId, known);
    const bound = completeUpTo(read.lasts, await this.subjectLasts(runId), storedBefore);
    return bound === Infinity ? read.events : read.events.filter((s) => s.seq <= bound);
  }

  /** The last sequence of each subject of the Run now (0 = empty): one read per subject (EventLog.readMessage). */
  private async subjectLasts(runId: string): Promise<SubjectSeqs> {
    const lasts = await Promise.all(Owner.options.map((owner) => this.log.readMessage({ last_by_subj: runSubject(this.log.space, runId, owner) })));
    return Object.fromEntries(Owner.options.map((owner, i) => [owner, lasts[i]?.seq ?? 0]));
  }

  /** Logs a gap in a Run's projection as an error, counted as the anomaly `projection-gap` (K11). */
  private reportGap(gap: ProjectionGap): void {
    this.stats.gaps++;
    this.logger.error(
      {
        runId: gap.runId,
        subject: gap.subject,
        // not `seq` / `eventType`: those name the delivery being handled (the log context)
        gapSeq: gap.seq,
        gapEventType: gap.eventType,
        gap: gap.kind,
        expectedPrevSeq: gap.expectedPrevSeq,
        seenPrevSeq: gap.seenPrevSeq,
        lastSeq: gap.lastSeq,
        anomaly: 'projection-gap',
        anomalies: recordAnomaly('projection-gap'),
      },
      'projection gap: an event of the Run was not applied in stream order; re-projecting the Run from the log',
    );
  }

  /**
   * Re-projects a Run from its whole log (read as {@link readComplete} reads, with everything up
   * to `storedBefore` kept), in one transaction ({@link reprojectRun}); forgets the cached checkpoint.
   */
  private async repair(runId: string, storedBefore: number): Promise<ApplyResult[]> {
    this.forget(runId);
    const events = await this.readComplete(runId, {}, storedBefore);
    const results = await this.withRetries(
      () => events,
      () => reprojectRun(this.db.orm.em, runId, events),
    );
    this.stats.applied += results.length;
    this.logger.log(
      { runId, events: results.length, lastSeq: events.at(-1)?.seq ?? 0 },
      'projection gap repaired: the Run was re-projected from the log',
    );
    return results;
  }

  /** Logs an event of a Run that was never admitted as an anomaly and acknowledges that Run's deliveries as skipped. */
  private skipOrphan(byRun: Map<string, Delivery[]>, e: OrphanEventError): void {
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
  }

  /** Acknowledges every delivery of a Run whose events cannot apply (skipped, nothing written). */
  private skipAll(byRun: Map<string, Delivery[]>, runId: string): void {
    for (const d of byRun.get(runId) ?? []) d.resolve([{ status: 'skipped', runId, seq: d.trigger.seq, previousLastSeq: 0 }]);
    byRun.delete(runId);
  }

  /** Fails the deliveries of one Run of the flush (they redeliver) and drops it from `byRun`. */
  private fail(byRun: Map<string, Delivery[]>, runId: string, e: unknown): void {
    for (const d of byRun.get(runId) ?? []) d.reject(e);
    byRun.delete(runId);
    this.inOrder.delete(runId); // its deliveries redeliver, maybe behind later ones: its log is read next time
  }

  /** The Run's cached checkpoint advanced past an event this process applied. */
  private advance(runId: string, base: RunCheckpoint, stored: StoredEvent): void {
    const at = this.checkpoints.get(runId) ?? base;
    const subject = subjectTokenOfStored(stored);
    this.remember(runId, {
      lastSeq: Math.max(at.lastSeq, stored.seq),
      subjectSeqs: { ...at.subjectSeqs, [subject]: Math.max(at.subjectSeqs[subject] ?? 0, stored.seq) },
    });
    this.inOrder.add(runId);
  }

  /** Drops what this process keeps of a Run (its cached checkpoint): the database's is read next time. */
  private forget(runId: string): void {
    this.checkpoints.delete(runId);
    this.inOrder.delete(runId);
  }

  /** Keeps the checkpoint of recently projected Runs (bounded: the oldest are dropped past 10,000). */
  private remember(runId: string, checkpoint: RunCheckpoint): void {
    this.checkpoints.delete(runId);
    this.checkpoints.set(runId, checkpoint);
    if (this.checkpoints.size > 10_000) this.forget(this.checkpoints.keys().next().value!);
  }

  /**
   * Applies stored events in one transaction (see `applyStoredEvents`), retried in place with
   * backoff ({@link retryDelayMs}) on any error but an orphan: resolves with one `applied` or
   * `skipped` (already applied: redelivery) result per event, and counts them in `stats`.
   * @throws when the application is stopping, or an OrphanEventError (nothing of the batch written).
   */
  async project(events: StoredEvent[], traces: { parent?: Context; links?: Link[] } = {}): Promise<ApplyResult[]> {
    const runs = new Set(events.map((e) => e.event.runId));
    return inSpan(
      'projector apply',
      {
        ...traces,
        attributes: {
          'db.system.name': 'postgresql',
          'db.operation.name': 'apply',
          'runplane.events': events.length,
          'runplane.runs': runs.size,
          ...(runs.size === 1 ? { 'runplane.run_id': [...runs][0]! } : {}),
        },
      },
      async (span) => {
        const results = await this.withRetries(
          () => events,
          () => applyStoredEvents(this.db.orm.em, events),
        );
        for (const r of results) if (r.status !== 'gap') this.stats[r.status]++;
        span.setAttribute('runplane.applied', results.filter((r) => r.status === 'applied').length);
        return results;
      },
    );
  }

  /** Runs a database step until it succeeds, the application stops, or it fails with an orphan. */
  private withRetries<T>(events: () => StoredEvent[], step: () => Promise<T>): Promise<T> {
    return retry(
      'projectionStep',
      () => {
        if (this.stopping) throw new AbortError(this.stoppingError(events()));
        return step();
      },
      {
        shouldRetry: ({ error }) => !(error instanceof OrphanEventError),
        onFailedAttempt: ({ error, attemptNumber }) => {
          if (error instanceof OrphanEventError) return;
          this.stats.retries++;
          const list = events();
          const runs = [...new Set(list.map((s) => s.event.runId))];
          this.logger.warn(
            {
              runId: runs.length === 1 ? runs[0] : undefined,
              runs: runs.length,
              events: list.length,
              firstSeq: list[0]?.seq,
              attempt: attemptNumber,
              reason: error instanceof Error ? error.message : JSON.stringify(error),
              retryInMs: retryDelayMs(attemptNumber),
            },
            'projection step failed; retrying',
          );
        },
      },
    );
  }

  beforeApplicationShutdown(): void {
    this.stopping = true;
    this.wake?.(); // a flush waiting out its linger goes now (and fails fast: its deliveries redeliver)
  }
}
