import { Controller, Get, Headers, HttpException, HttpStatus, Param, Query, Req, Res, type BeforeApplicationShutdown } from '@nestjs/common';
import type { Request, Response } from 'express';
import { AnswerView, Id, type StoredEvent } from '@runplane/contracts';
import { EventLog, liveDeltaSubject } from '@runplane/eventlog';
import { foldRun, passagesInOrder } from '@runplane/run-facts';

const HEARTBEAT_MS = 15_000;

function badRequest(message: string): HttpException {
  return new HttpException({ error: { code: 'bad_request', message } }, HttpStatus.BAD_REQUEST);
}

function parseRunId(runId: string): string {
  const parsed = Id.safeParse(runId);
  if (!parsed.success) throw badRequest(`runId: ${parsed.error.issues[0]?.message}`);
  return parsed.data;
}

/**
 * Parses a `Last-Event-ID` (the stream sequence of the last event the observer saw).
 * @throws 400 when it is not a non-negative integer.
 */
export function parseLastEventId(raw: string | undefined): number {
  if (raw === undefined || raw === '') return 0;
  if (!/^\d{1,15}$/.test(raw.trim())) throw badRequest(`Last-Event-ID must be a stream sequence number, got "${raw}"`);
  return Number(raw.trim());
}

/**
 * Observers of a Run. Reads never append (K11); a disconnect only detaches the observer (K4).
 */
@Controller('v1/runs')
export class ObserversController implements BeforeApplicationShutdown {
  /** Open observer streams; ended on shutdown so the HTTP server can close (observers resume with Last-Event-ID). */
  private readonly open = new Set<() => Promise<void>>();

  constructor(private readonly log: EventLog) {}

  async beforeApplicationShutdown(): Promise<void> {
    await Promise.all([...this.open].map((detach) => detach()));
  }

  /**
   * `GET /v1/runs/{runId}/events`: Server-Sent Events. Replays the Run's stored events after
   * `Last-Event-ID` (header, or `?lastEventId=`), then follows live; each SSE message has
   * `id: <stream seq>`, `event: <event type>`, `data: <event envelope JSON>`. The stream ends
   * after `run.settled`. With `?deltas=true`, live token deltas are interleaved as
   * `event: delta` messages without an id (they are not stored and are never replayed).
   * 204 when `Last-Event-ID` is at or after the Run's settlement (nothing more will come).
   */
  @Get(':runId/events')
  async events(
    @Param('runId') rawRunId: string,
    @Headers('last-event-id') lastEventIdHeader: string | undefined,
    @Query('lastEventId') lastEventIdQuery: string | undefined,
    @Query('deltas') deltas: string | undefined,
    @Req() req: Request,
    @Res() res: Response,
  ): Promise<void> {
    const runId = parseRunId(rawRunId);
    const after = parseLastEventId(lastEventIdHeader ?? lastEventIdQuery);
    if (!(await this.log.lastOf(runId, 'admission'))) {
      throw new HttpException({ error: { code: 'not_found', message: `run ${runId} not found` } }, HttpStatus.NOT_FOUND);
    }
    const settlement = await this.log.lastOf(runId, 'lifecycle');
    if (settlement && settlement.seq <= after) {
      // The observer has seen the settlement: nothing more will ever come. 204 also tells a
      // browser's EventSource to stop reconnecting.
      res.status(HttpStatus.NO_CONTENT).end();
      return;
    }
    res.status(200).set({
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-cache, no-transform',
      Connection: 'keep-alive',
      'X-Accel-Buffering': 'no',
    });
    res.flushHeaders();
    res.write(': runplane event stream\n\n');

    let closed = false;
    const heartbeat = setInterval(() => res.write(': keepalive\n\n'), HEARTBEAT_MS);
    const sub = deltas === 'true'
      ? this.log.nc.subscribe(liveDeltaSubject(this.log.space, runId), {
          callback: (_err, msg) => {
            if (!closed) res.write(`event: delta\ndata: ${msg.string()}\n\n`);
          },
        })
      : null;
    let stop: (() => Promise<void>) | null = null;
    const detach = async () => {
      if (closed) return;
      closed = true;
      this.open.delete(detach);
      clearInterval(heartbeat);
      sub?.unsubscribe();
      await stop?.();
      res.end();
    };
    this.open.add(detach);
    req.on('close', () => void detach());
    stop = await this.log.followRun(runId, after + 1, (stored: StoredEvent) => {
      if (closed) return;
      res.write(`id: ${stored.seq}\nevent: ${stored.event.type}\ndata: ${JSON.stringify(stored.event)}\n\n`);
      if (stored.event.type === 'run.settled') void detach();
    });
    if (closed) await stop();
  }

  /** `GET /v1/runs/{runId}/answer`: committed passages in order, from the Run's log. */
  @Get(':runId/answer')
  async answer(@Param('runId') rawRunId: string): Promise<AnswerView> {
    const runId = parseRunId(rawRunId);
    const facts = foldRun(runId, await this.log.readRun(runId));
    if (!facts.admitted) throw new HttpException({ error: { code: 'not_found', message: `run ${runId} not found` } }, HttpStatus.NOT_FOUND);
    const passages = passagesInOrder(facts).map((p) => ({ passageId: p.passageId, index: p.index, version: p.version, text: p.text }));
    return AnswerView.parse({
      runId,
      passages,
      text: passages.map((p) => p.text).join('\n\n'),
      complete: facts.answer !== null,
      outcome: facts.settled?.outcome ?? null,
    });
  }
}
