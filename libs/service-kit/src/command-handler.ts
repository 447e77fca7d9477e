/**
 * The one command handler every owner uses (docs/architecture.md, "Deciding"): read the Run,
 * fold it, decide with the owner's pure `decide(facts, trigger, now)`, append the decided events
 * conditionally on the owner's subject, and on a conflict re-read and decide again, under one
 * retry and backoff policy. Side effects (a model call, a tool execution) never run in here: an
 * adapter runs them only for events this handler reports as appended by this call.
 */
import { AbortError, retry } from '@runplane/kit';
import { subjectTokenOf, type Owner, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { AppendConflict, isTransientNatsError, MAX_EARLIER_SEQS, partitionOf, runFilter, type BatchItem, type EventLog } from '@runplane/eventlog';
import { evolve, foldRun, parkedOn, type RunFacts } from '@runplane/run-facts';

interface Entry {
  /** Every known event of the Run, in stream order. */
  events: StoredEvent[];
  /** Last known sequence of each owner's subject. */
  lasts: Partial<Record<Owner, number>>;
  /** The fold of `events` (kept in step with them). */
  facts: RunFacts;
  /** Ids of the events folded (a copy of one stored again is not folded twice). */
  eventIds: Set<string>;
  /**
   * True while the entry holds every event of the Run up to the last one delivered: it was read
   * from the log, and every delivery since followed on from what it knew (no gap on the delivered
   * event's subject). False after a gap: the next read goes to the log.
   */
  current: boolean;
  /**
   * For a fold started at a delivered `run.admitted`: the Run's last sequence when it was
   * delivered (one direct get). A delivery at or below it may be old (a consumer delivering the log
   * again from the start), so a decision on it reads the log; one above it was stored after this
   * process saw the Run begin. 0 for a fold read from the log.
   */
  liveAfter: number;
}

/**
 * The facts with each subject's last sequence as the log reported it: a message on a subject
 * that is not a valid event still moves that subject on, and the next append there must expect it.
 */
function withLasts(facts: RunFacts, lasts: Partial<Record<Owner, number>>): RunFacts {
  const lastSeqByOwner = { ...facts.lastSeqByOwner };
  for (const [token, seq] of Object.entries(lasts) as [Owner, number][]) lastSeqByOwner[token] = Math.max(lastSeqByOwner[token] ?? 0, seq);
  return { ...facts, lastSeqByOwner };
}

/** Where the Run facts a service decided from came from, counted per process (`GET /metrics`, `runplane_run_reads_total`). */
export const runReads = { log: 0, kept: 0 };

/** Options of {@link RunFolds.read}. */
export interface ReadOptions {
  /** Read the log even when the kept fold would do (after a conflict: the fold is known to be behind). */
  fresh?: boolean;
}

/**
 * The folds of the Runs a service is working on, kept between wakes (no read of the log
 * on the hot path: a Run that runs normally is never read from the log by a service whose
 * partition consumers take every subject of their Runs).
 *
 * - **Started at `run.admitted`.** A service whose partition consumers take every subject of their
 *   Runs (bus.ts `SERVICE_CONSUMERS` `'all'`) is told of each delivery before its handler runs
 *   (`EventLog.deliveries`, deliveries.ts). At the delivery of a Run's `run.admitted` with
 *   `prevSeq` 0 (the first event of a Run: nothing of it precedes it), the fold starts from it
 *   alone, and one direct get of the Run's last message (`last_by_subj` `<prefix>.run.<runId>.>`)
 *   records how far the Run went then (`liveAfter`). Every later event of the Run is on one of its
 *   subjects, all in this consumer's partition, so it is delivered here after `run.admitted`, in
 *   stream order, and folded in (below).
 * - **Proven current, or read.** A decision on a delivery above `liveAfter` is taken from the fold:
 *   that event was stored after this process saw the Run begin, and the fold holds every event of
 *   the Run up to it (no gap seen), so it is the Run as of that event, as on any live delivery. A
 *   decision on a delivery at or below `liveAfter` reads the log: it may be a replay. A consumer
 *   that delivers the log again from the start (a new durable, a redelivery after a restart) hands
 *   out `run.admitted` long after the rest was stored; the get then names the Run's real last
 *   message, every old event (an old `tool.call.proposed` long executed) is at or below it, and
 *   its decision is taken from the log, which holds the dispatch and the receipt (K5: the tool is
 *   not run again). Even a decision from a stale fold could not run it again: the dispatch's
 *   append expects the `tools` subject as that fold knows it, and the log refuses it (K6).
 *   On a normal Run every event a service decides on comes after the Run's first steps: no read.
 * - **Kept from deliveries.** A delivered event that follows on from what the fold knows of its
 *   subject (its `prevSeq`, the back-link the server verified, is the subject's last known
 *   sequence) is folded in; one that does not (a gap: the partition was elsewhere, a message that
 *   is not a fact, a fold dropped) marks the fold behind, and the next read goes to the log.
 * - **Read while handling a delivery: no request.** Inside a delivery's handler, for that
 *   delivery's Run, a fold that is current and holds the delivered event is the answer: the Run as
 *   of that event, which is what the decision the event triggers is about. Anything it lacks is
 *   delivered next and decided then.
 * - **Otherwise from the log.** A read outside a delivery (an HTTP request, a timer, a watch), of
 *   another Run, of a fold behind or never started, or `fresh` brings the fold up to date from the
 *   log by following each subject's back-links from its last event down to what is known
 *   ({@link EventLog.catchUp}: one direct get per owner subject plus one per new event).
 *
 * A kept fold is only a hint: every decision made from it is still checked by the conditional
 * append on the owner's subject (K6), and a conflict makes the caller read the log again
 * ({@link RunCommandHandler.handle}). A fold is dropped at the Run's settlement (delivered), when
 * the Run parks (K10: waiting on a human or a child, it has nothing to decide until its wake, whose
 * delivery reads the log once; 10,000 parked Runs would otherwise fill the cache and grow every
 * service by its folds), when its partition starts here again, and past `capacity` (least
 * recently used first).
 */
export class RunFolds {
  private readonly entries = new Map<string, Entry>();
  /** Partition moves seen: a fold whose proof was under way while one happened is not started. */
  private moves = 0;

  /**
   * @param log the event log to read from (and whose whole-Run deliveries keep the folds).
   * @param capacity most Runs kept (default 2,000).
   */
  constructor(
    private readonly log: EventLog,
    private readonly capacity = 2_000,
  ) {
    log.deliveries?.observe({ delivered: (stored) => this.delivered(stored), partitionMoved: (p) => this.partitionMoved(p) });
  }

  /**
   * The Run's facts: inside the handler of a delivery of that Run, as of that delivery (from the
   * kept fold when it is current); anywhere else as of now (every event stored before the call).
   * @throws NATS errors from the reads.
   */
  async read(runId: string, opts: ReadOptions = {}): Promise<RunFacts> {
    const entry = this.entries.get(runId);
    const scope = this.log.deliveries?.current();
    if (
      !opts.fresh &&
      entry?.current &&
      scope?.runId === runId &&
      scope.seq > entry.liveAfter &&
      Object.values(entry.lasts).some((seq) => seq >= scope.seq)
    ) {
      runReads.kept++;
      this.keep(runId, entry);
      return entry.facts;
    }
    runReads.log++;
    const found = await this.log.catchUp(runId, entry?.lasts ?? {});
    const next = found.full || !entry ? this.fresh(runId, found.events, found.lasts) : this.merge(runId, entry, found.events, found.lasts);
    next.current = true;
    next.liveAfter = 0; // read from the log: it holds the Run as of now
    this.keep(runId, next);
    return next.facts;
  }

  /**
   * Starts a Run's fold at a delivered `run.admitted` (the first event of a Run: `prevSeq` 0), with
   * `liveAfter` the Run's last sequence now (one direct get, `last_by_subj`
   * `<prefix>.run.<runId>.>`): a decision on a delivery at or below it reads the log (see the class).
   * When the get fails, or the partition moved meanwhile, nothing starts and the first decision
   * reads the log. Never throws.
   */
  private async startAt(admitted: StoredEvent): Promise<void> {
    const runId = admitted.event.runId;
    const moves = this.moves;
    let last;
    try {
      last = await this.log.readMessage({ last_by_subj: runFilter(this.log.space, runId) });
    } catch {
      return;
    }
    if (!last || last.seq < admitted.seq || moves !== this.moves || this.entries.has(runId)) return;
    // the event is the Run's last message: the fold is the Run as of now, and a decision on run.admitted itself is taken from it
    const liveAfter = last.seq === admitted.seq ? admitted.seq - 1 : last.seq;
    this.keep(runId, { ...this.fresh(runId, [admitted], { admission: admitted.seq }), liveAfter });
  }

  /** Adds an event this service appended itself (its sequence is known), so the next read need not fetch it. */
  remember(stored: StoredEvent): void {
    const entry = this.entries.get(stored.event.runId);
    if (!entry) return;
    const owner = subjectTokenOf(stored.event);
    // Only when it directly follows what is known of its subject: otherwise a gap would be hidden.
    if ((entry.lasts[owner] ?? 0) !== (stored.event.prevSeq ?? -1)) return;
    this.keep(stored.event.runId, this.merge(stored.event.runId, entry, [stored], { [owner]: stored.seq }));
  }

  /**
   * A delivery of a whole-Run consumer (before its handler): a Run's `run.admitted` without a
   * fold starts one ({@link startAt}, awaited before the handler); a later event is folded in
   * when it follows on from what is known of its subject, ignored when already known, else the
   * fold is marked behind. A settlement drops the fold (a later wake reads the log).
   */
  private delivered(stored: StoredEvent): void | Promise<void> {
    const runId = stored.event.runId;
    const entry = this.entries.get(runId);
    if (!entry) return stored.event.type === 'run.admitted' && stored.event.prevSeq === 0 ? this.startAt(stored) : undefined;
    if (stored.event.type === 'run.settled') {
      this.entries.delete(runId);
      return;
    }
    const token = subjectTokenOf(stored.event);
    const known = entry.lasts[token] ?? 0;
    if (stored.seq <= known) return;
    if ((stored.event.prevSeq ?? -1) !== known) {
      entry.current = false;
      return;
    }
    this.keep(runId, this.merge(runId, entry, [stored], { [token]: stored.seq }));
  }

  /** The partition's consumer starts or stops here: folds of its Runs may lack what another process handles. */
  private partitionMoved(partition: number): void {
    this.moves++;
    const partitions = this.log.space.partitions;
    for (const runId of [...this.entries.keys()]) if (partitionOf(runId, partitions) === partition) this.entries.delete(runId);
  }

  /** Sequences of the known events on one of a Run's subjects, newest first (read-ahead hints for the next append). */
  seqsOf(runId: string, subject: Owner): number[] {
    const entry = this.entries.get(runId);
    if (!entry) return [];
    const out: number[] = [];
    for (let i = entry.events.length - 1; i >= 0 && out.length <= MAX_EARLIER_SEQS; i--)
      if (subjectTokenOf(entry.events[i]!.event) === subject) out.push(entry.events[i]!.seq);
    return out;
  }

  /** Drops a Run's fold (e.g. after its settlement). */
  forget(runId: string): void {
    this.entries.delete(runId);
  }

  /** Number of Runs kept. */
  get size(): number {
    return this.entries.size;
  }

  private fresh(runId: string, events: StoredEvent[], lasts: Partial<Record<Owner, number>>): Entry {
    return {
      events,
      lasts: { ...lasts },
      facts: withLasts(foldRun(runId, events), lasts),
      eventIds: new Set(events.map((e) => e.event.eventId)),
      current: true,
      liveAfter: 0,
    };
  }

  private merge(runId: string, entry: Entry, add: StoredEvent[], lasts: Partial<Record<Owner, number>>): Entry {
    const mergedLasts = { ...entry.lasts };
    for (const [owner, seq] of Object.entries(lasts) as [Owner, number][]) mergedLasts[owner] = Math.max(mergedLasts[owner] ?? 0, seq);
    const known = new Set(entry.events.map((e) => e.seq));
    const added = add.filter((e) => !known.has(e.seq));
    if (added.length === 0) return { ...entry, lasts: mergedLasts, facts: withLasts(entry.facts, mergedLasts) };
    const tail = entry.events.length ? entry.events[entry.events.length - 1]!.seq : 0;
    if (added.every((e) => e.seq > tail)) {
      const sorted = [...added].sort((a, b) => a.seq - b.seq);
      const eventIds = new Set(entry.eventIds);
      let facts = entry.facts;
      for (const e of sorted) {
        if (eventIds.has(e.event.eventId)) continue; // a copy of an event already folded
        eventIds.add(e.event.eventId);
        facts = evolve(facts, e);
      }
      return {
        events: [...entry.events, ...sorted],
        lasts: mergedLasts,
        facts: withLasts(facts, mergedLasts),
        eventIds,
        current: entry.current,
        liveAfter: entry.liveAfter,
      };
    }
    // An event older than the newest known one (subjects are read one by one): fold again in stream order.
    const events = [...entry.events, ...added].sort((a, b) => a.seq - b.seq);
    return { ...this.fresh(runId, events, mergedLasts), current: entry.current, liveAfter: entry.liveAfter };
  }

  /** Keeps the Run's fold as the most recently used, unless the Run is parked (see the class). */
  private keep(runId: string, entry: Entry): void {
    this.entries.delete(runId);
    if (parkedOn(entry.facts)) return;
    this.entries.set(runId, entry);
    while (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value!);
  }
}

/** What one handled command did. */
export interface CommandResult {
  /** The facts the (last, successful) decision was made from. */
  facts: RunFacts;
  /** The events this call stored, in order, as stored (with sequence, `prevSeq` and `writer`). */
  appended: StoredEvent[];
}

export interface CommandOptions {
  /** The fencing epoch of the lease the writer executes under; stamped as `writer.epoch` on every appended event (K6). */
  epoch?: number;
  /**
   * Runs before the decided events are appended (e.g. storing a large tool result the receipt
   * refers to). Must be idempotent: it runs again when a conflict makes the handler decide again.
   */
  beforeAppend?: (events: RunEvent[]) => Promise<void>;
  /**
   * Called with each event as soon as it is stored, in order: the events of an atomic batch
   * together once it is committed; when a decision is appended one event after another (a server
   * or stream without atomic batches), each before the next is appended, also for events of an
   * attempt that later conflicted, and when `handle` then throws (a decision appended in part is
   * known to the caller, e.g. a dispatch whose claim must not be released, lest a wake be lost).
   */
  onAppended?: (stored: StoredEvent) => void;
}

/**
 * Reads, folds, decides and appends for one owner. One instance per service.
 */
export class RunCommandHandler {
  readonly folds: RunFolds;

  /**
   * @param log the event log (appends are stamped with its writer).
   * @param owner the owner this service appends as; a decided event of another owner is a bug and throws.
   * @param clock the decision clock handed to deciders (`now`), injectable for tests.
   */
  constructor(
    private readonly log: EventLog,
    readonly owner: Owner,
    private readonly clock: () => Date = () => new Date(),
    folds?: RunFolds,
  ) {
    this.folds = folds ?? new RunFolds(log);
  }

  /**
   * Handles one command on a Run: `decide(facts, now)` is called with the Run's current facts; its
   * events are appended together, in order, with {@link EventLog.appendBatch} (one atomic batch,
   * all or none, where the log uses them; else one by one), each subject's first event
   * conditional on that subject's last sequence (K6).
   * On an {@link AppendConflict} the Run is read again and `decide` called again (it must be pure
   * and decide only what the facts still lack), under the `appendConflict` policy of @runplane/kit (6 retries, 10-320 ms apart with jitter).
   * @returns the facts decided from and the events stored by this call (empty: nothing to do).
   * @throws AppendConflict when conflicts persist past the policy (the caller's message is then redelivered).
   */
  async handle(runId: string, decide: (facts: RunFacts, now: Date) => RunEvent[], opts: CommandOptions = {}): Promise<CommandResult> {
    const appended: StoredEvent[] = [];
    let attempt = 0;
    return retry(
      'appendConflict',
      async () => {
        // after a conflict the kept fold is known to be behind: read the log
        const facts = await this.readThroughOutage(runId, { fresh: attempt++ > 0 });
        const events = decide(facts, this.clock());
        for (const e of events) {
          if (e.owner !== this.owner) throw new AbortError(new Error(`${this.owner} may not append ${e.type} (owned by ${e.owner})`));
          if (e.runId !== runId) throw new AbortError(new Error(`a decision for run ${runId} produced an event of run ${e.runId}`));
        }
        if (events.length === 0) return { facts, appended };
        await opts.beforeAppend?.(events);
        // one decision, one atomic append (EventLog.appendBatch): each event on its subject (its
        // owner's; a fence on the executor's it fences), the first of each subject conditional on
        // that subject's last sequence, a later one following it in the batch
        const seen = new Set<Owner>();
        const items: BatchItem[] = events.map((event) => {
          const subject = subjectTokenOf(event);
          if (seen.has(subject)) return { event };
          seen.add(subject);
          return { event, expectedLastSubjectSeq: facts.lastSeqByOwner[subject], earlierSeqs: this.folds.seqsOf(runId, subject) };
        });
        await this.log.appendBatch(items, opts.epoch, (result) => {
          this.folds.remember(result.stored);
          appended.push(result.stored);
          opts.onAppended?.(result.stored);
        });
        return { facts, appended };
      },
      { shouldRetry: ({ error }) => error instanceof AppendConflict },
    );
  }

  /**
   * Reads the Run, retrying while NATS does not answer (a restart), for up to
   * {@link READ_RETRY_MS}. Nothing has been appended by this attempt yet, so a retried read is
   * safe; without it a decision whose trigger was an activity's outcome (a finished model turn, a
   * tool's result) would be dropped by a short outage, and the redelivered wake would find the
   * step in flight and record nothing (docs/recovery.md "A NATS restart").
   */
  private readThroughOutage(runId: string, opts: ReadOptions): Promise<RunFacts> {
    return retry('transientRead', () => this.folds.read(runId, opts), {
      maxRetryTime: READ_RETRY_MS,
      shouldRetry: ({ error }) => isTransientNatsError(error),
    });
  }
}

/** How long a command handler's read of a Run is retried through a NATS outage, ms (as long as an append is). */
export const READ_RETRY_MS = 30_000;
