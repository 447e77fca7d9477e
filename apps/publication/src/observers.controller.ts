import { Controller, Get, Headers, HttpStatus, Logger, Param, Query, Req, Res, UseGuards, type BeforeApplicationShutdown } from '@nestjs/common';
import type { Request, Response } from 'express';
import { AnswerView, Id, LastEventIdText, ObserverConfig, RunEventsQuery, type StoredEvent } from '@runplane/contracts';
import { EventLog, isPublishedOn, liveDeltaSubject } from '@runplane/eventlog';
import { answerPassages, foldRun } from '@runplane/run-facts';
import {
  apiError,
  AuthGuard,
  badRequestFromZod,
  CurrentPrincipal,
  dependencyUnavailable,
  InjectConfig,
  mayAccess,
  observerStreamsRefusedTotal,
  parseQuery,
  sseObservers,
  type ApiError,
  type Principal,
} from '@runplane/service-kit';
import { judgeCursor, runIdOfSubject } from './cursor.js';
import { ObserverGate, observerCapsOf, type ObserverRefusal } from './observer-admission.js';

const HEARTBEAT_MS = 15_000;

/** The longest delay a Node timer takes (about 24.8 days); a longer one would fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Calls `fn` once at `atMs` (ms since the epoch), however far away (a Node timer longer than
 * about 24.8 days would fire at once, so a far instant is reached in steps).
 * @returns a function that cancels it.
 */
export function callAt(atMs: number, fn: () => void): () => void {
  let timer: NodeJS.Timeout;
  const arm = () => {
    const delay = atMs - Date.now();
    timer = delay > MAX_TIMER_MS ? setTimeout(arm, MAX_TIMER_MS) : setTimeout(fn, Math.max(0, delay));
    timer.unref();
  };
  arm();
  return () => clearTimeout(timer);
}

const notFound = (runId: string) => apiError(HttpStatus.NOT_FOUND, 'not_found', `run ${runId} not found`);

/** The problem of a refused observer stream (429 `observer_limit`, 503 `observer_capacity`), with `Retry-After`. */
export function observerRefused(refusal: ObserverRefusal): ApiError {
  const { status, code, detail, setting, limit, open, retryAfterSeconds } = refusal;
  return apiError(status, code, detail, {
    headers: { 'Retry-After': String(retryAfterSeconds) },
    extensions: { setting, limit, open, retryAfterSeconds },
  });
}

function parseRunId(runId: string): string {
  const parsed = Id.safeParse(runId);
  if (!parsed.success) throw badRequestFromZod('runId', parsed.error);
  return parsed.data;
}

/**
 * Parses a `Last-Event-ID` (the stream sequence of the last event the observer saw; contracts
 * `LastEventIdText`). Absent or empty is 0 (from the start).
 * @throws 400 `bad_request` when it is not a non-negative integer of at most 15 digits (a
 * repeated header arrives joined with ", " and is refused too).
 */
export function parseLastEventId(raw: string | undefined, what = 'Last-Event-ID'): number {
  if (raw === undefined || raw === '') return 0;
  const parsed = LastEventIdText.safeParse(raw);
  if (!parsed.success) throw badRequestFromZod(what, parsed.error);
  return Number(parsed.data.trim());
}

/**
 * Validates the query of the event stream (contracts `RunEventsQuery`): each parameter at most
 * once, known names and values only.
 * @throws 400 `bad_request` with every reason in `issues`.
 */
export function parseEventsQuery(query: unknown): RunEventsQuery {
  return parseQuery(RunEventsQuery, query);
}

/**
 * Observers of a Run. Reads never append (K11); a disconnect only detaches the observer (K4).
 * Every route takes a bearer token ({@link AuthGuard}); a Run is visible to its owner (its
 * `run.admitted` `principal`) and to admins only, and anyone else gets the 404 of an unknown Run.
 */
@Controller('v1/runs')
@UseGuards(AuthGuard)
export class ObserversController implements BeforeApplicationShutdown {
  private readonly logger = new Logger('observers');
  /** Open observer streams; ended on shutdown so the HTTP server can close (observers resume with Last-Event-ID). */
  private readonly open = new Set<() => Promise<void>>();
  /** How many streams are open, in all and per principal, against the caps of `ObserverConfig`. */
  readonly gate: ObserverGate;

  constructor(
    private readonly log: EventLog,
    @InjectConfig(ObserverConfig) observerConfig: ObserverConfig,
  ) {
    this.gate = new ObserverGate(observerCapsOf(observerConfig));
  }

  async beforeApplicationShutdown(): Promise<void> {
    await Promise.all([...this.open].map((detach) => detach()));
  }

  /**
   * `GET /v1/runs/{runId}/events`: Server-Sent Events. Replays the Run's stored events after
   * `Last-Event-ID` (header, or `?lastEventId=`), then follows live; each SSE message has
   * `id: <stream seq>`, `event: <event type>`, `data: <event envelope JSON>`. Only facts are
   * sent: a message the event log did not append (garbage, a forged or replayed event) is skipped,
   * replayed or live, and logged and counted as an anomaly (`EventLog.followRun`, `verifyStored`,
   * K11), so the stream ends after the Run's real `run.settled`. With `?deltas=true`, live token deltas are interleaved as
   * `event: delta` messages without an id (they are not stored and are never replayed).
   * 204 when `Last-Event-ID` is at or after the Run's settlement (nothing more will come).
   * @throws 400 `invalid_cursor` (extensions `cursor`, `reason`: `beyond-end`, `other-run`,
   * `not-an-event` to an admin, `not-this-run` to anyone else) when `Last-Event-ID` is not 0 and not a position in this Run's log
   * ({@link judgeCursor}): a stream from there would skip stored events or never end (K4).
   * The stream never outlives the caller's token: at its expiry (`exp` plus the clock-skew
   * allowance, {@link Principal.expiresAt}) it sends the comment `: token expired` and ends; the
   * observer resumes with `Last-Event-ID` and a fresh token (the expired one gets 401).
   * @throws 429 `observer_limit` when the principal (the token's `sub`, admins too) already holds
   * `RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL` open streams on this process (not applied with
   * authentication disabled), 503 `observer_capacity` when the process holds
   * `RUNPLANE_OBSERVER_STREAMS_MAX` ({@link ObserverGate}); 503 `dependency_unavailable` when the
   * Run's consumer cannot be made (NATS unreachable, the stream's consumer limit reached). Each
   * with `Retry-After`, and before anything of the stream is written: the 200 and its headers are
   * sent only once the consumer exists.
   */
  @Get(':runId/events')
  async events(
    @Param('runId') rawRunId: string,
    @Headers('last-event-id') lastEventIdHeader: string | undefined,
    @Query() query: unknown,
    @Req() req: Request,
    @Res() res: Response,
    @CurrentPrincipal() principal: Principal,
  ): Promise<void> {
    const runId = parseRunId(rawRunId);
    const { lastEventId: lastEventIdQuery, deltas } = parseEventsQuery(query);
    const after =
      lastEventIdHeader !== undefined && lastEventIdHeader !== ''
        ? parseLastEventId(lastEventIdHeader)
        : parseLastEventId(lastEventIdQuery, 'query.lastEventId');
    if (principal.admin) {
      if (!(await this.log.lastOf(runId, 'admission'))) throw notFound(runId);
    } else if (!mayAccess(principal, foldRun(runId, await this.log.readRun(runId)).admitted?.principal)) throw notFound(runId);
    if (after > 0) {
      const stored = await this.log.readMessage({ seq: after });
      const subjectRun = stored ? runIdOfSubject(this.log.space.prefix, stored.subject) : null;
      let atCursor = subjectRun ? { runId: subjectRun } : null;
      const streamLastSeq = atCursor ? after : await this.log.lastSeq();
      // before refusing a position inside the log, a second opinion from the Run's own read: a
      // direct get may be answered by a replica that has not stored the newest messages yet
      if (!atCursor && after <= streamLastSeq && (await this.log.readRun(runId)).some((e) => e.seq === after)) atCursor = { runId };
      const refusal = judgeCursor(runId, after, atCursor, streamLastSeq, principal.admin);
      if (refusal) {
        throw apiError(HttpStatus.BAD_REQUEST, 'invalid_cursor', refusal.detail, { extensions: { cursor: after, reason: refusal.reason } });
      }
    }
    // the verified last event of the subject: a forged settlement published after it is not one
    const settlement = await this.log.lastOf(runId, 'lifecycle');
    if (settlement && settlement.seq <= after) {
      // The observer has seen the settlement: nothing more will ever come. 204 also tells a
      // browser's EventSource to stop reconnecting.
      res.status(HttpStatus.NO_CONTENT).end();
      return;
    }
    const admission = this.gate.open(principal.unauthenticated ? null : principal.sub);
    if (!admission.admitted) {
      observerStreamsRefusedTotal.inc({ code: admission.refusal.code });
      throw observerRefused(admission.refusal);
    }

    let closed = false;
    /** Set once the 200 and its headers are sent; until then the follow's events wait in `pending`. */
    let committed = false;
    const pending: string[] = [];
    const send = (chunk: string) => {
      if (committed) res.write(chunk);
      else pending.push(chunk);
    };
    let heartbeat: NodeJS.Timeout | null = null;
    let sub: ReturnType<EventLog['nc']['subscribe']> | null = null;
    let cancelExpiry: (() => void) | null = null;
    let stop: (() => Promise<void>) | null = null;
    const detach = async () => {
      if (closed) return;
      closed = true;
      this.open.delete(detach);
      admission.release();
      sseObservers.dec();
      if (heartbeat) clearInterval(heartbeat);
      cancelExpiry?.();
      sub?.unsubscribe();
      await stop?.();
      if (committed) res.end();
    };
    this.open.add(detach);
    sseObservers.inc();
    req.on('close', () => void detach());
    if (req.destroyed || res.closed) {
      // the client left during the reads above: its 'close' came before this listener, and nothing
      // would give the place back or delete the consumer before the Run settled (a trial: 100
      // requests dropped in their first 25 ms held 100 places and 100 consumers of a parked Run)
      await detach();
      return;
    }
    try {
      // the consumer first: a follow that cannot start is a problem answer, not a 200 that closes at once
      stop = await this.log.followRun(runId, after + 1, (stored: StoredEvent) => {
        if (closed) return;
        send(`id: ${stored.seq}\nevent: ${stored.event.type}\ndata: ${JSON.stringify(stored.event)}\n\n`);
        if (stored.event.type === 'run.settled') void detach();
      });
    } catch (error) {
      const wasClosed = closed;
      await detach();
      if (wasClosed) return; // the client left meanwhile: nobody to answer
      const reason = error instanceof Error ? error.message : String(error);
      // NATS's own words stay in the log, as for every dependency_unavailable
      this.logger.warn({ runId, reason }, "the Run's consumer could not be made; the event stream is refused 503");
      observerStreamsRefusedTotal.inc({ code: 'dependency_unavailable' });
      throw dependencyUnavailable('NATS JetStream', "the Run's consumer could not be made");
    }
    if (closed) {
      // ended while the consumer was made (the Run's settlement delivered already, the client gone,
      // a shutdown): what was delivered is sent and the stream ends (a client that left hears nothing)
      await stop();
      this.commit(res, pending);
      res.end();
      return;
    }
    committed = true;
    this.commit(res, pending);
    heartbeat = setInterval(() => res.write(': keepalive\n\n'), HEARTBEAT_MS);
    sub =
      deltas === 'true'
        ? this.log.nc.subscribe(liveDeltaSubject(this.log.space, runId), {
            callback: (_err, msg) => {
              // only the runtime's own deltas: never another Run's stored events a push consumer was aimed here with
              if (!closed && isPublishedOn(msg, liveDeltaSubject(this.log.space, runId))) res.write(`event: delta\ndata: ${msg.string()}\n\n`);
            },
          })
        : null;
    // a token that expires (or is revoked by expiring) stops reading: nothing is sent after it would be refused
    cancelExpiry =
      principal.expiresAt === null
        ? null
        : callAt(principal.expiresAt, () => {
            if (closed) return;
            res.write(': token expired\n\n');
            void detach();
          });
  }

  /**
   * Sends the stream's 200 and SSE headers, its opening comment, then `pending` (what the follow
   * delivered before, in order). Called once per stream, synchronously after the consumer exists:
   * Node's `res.write` before the headers are sent would send them itself, with whatever status
   * and headers were set at that moment, so nothing is written before this.
   */
  private commit(res: Response, pending: string[]): void {
    res.status(200).set({
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-cache, no-transform',
      Connection: 'keep-alive',
      'X-Accel-Buffering': 'no',
    });
    res.flushHeaders();
    res.write(': runplane event stream\n\n');
    for (const chunk of pending.splice(0)) res.write(chunk);
  }

  /**
   * `GET /v1/runs/{runId}/answer`: from the Run's log, the published answer's passages, or, before
   * an answer is published (still streaming, or settled without one), every committed passage in
   * turn and index order: text committed while the answer streamed is served as soon as it is
   * committed, and after an interruption (`answerPassages`). `complete` is true only once the Run
   * settled `completed`; `unanswered` lists what the answer (or the settlement) says is missing.
   */
  @Get(':runId/answer')
  async answer(@Param('runId') rawRunId: string, @CurrentPrincipal() principal: Principal): Promise<AnswerView> {
    const runId = parseRunId(rawRunId);
    const facts = foldRun(runId, await this.log.readRun(runId));
    if (!facts.admitted || !mayAccess(principal, facts.admitted.principal)) throw notFound(runId);
    const passages = answerPassages(facts).map((p) => ({
      passageId: p.passageId,
      index: p.index,
      version: p.version,
      text: p.text,
      sourceTurn: p.sourceTurn,
    }));
    return AnswerView.parse({
      runId,
      passages,
      text: passages.map((p) => p.text).join('\n\n'),
      // complete only for a `completed` settlement: an answer that is partial, failed after some
      // text, canceled or interrupted is not the complete answer, even when one was published (K9)
      complete: facts.settled?.outcome === 'completed',
      unanswered: facts.settled?.unanswered ?? facts.answer?.unanswered ?? [],
      outcome: facts.settled?.outcome ?? null,
    });
  }
}
