/**
 * A small typed client for Runplane's HTTP API. Every response body is validated with the
 * contracts' zod schemas; errors carry the HTTP status and the server's reason.
 */
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import {
  AnswerView,
  ErrorBody,
  PostMessageResponse,
  RunEvent,
  RunView,
} from '@runplane/contracts';

export interface RunplaneEndpoints {
  /** Base URL of the admission service, e.g. http://127.0.0.1:8081 */
  admission: string;
  /** Base URL of the publication service, e.g. http://127.0.0.1:8082 */
  publication: string;
}

/** An HTTP error answer: `status` plus the server's `{error:{code,message}}`. */
export class RunplaneHttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
  ) {
    const parsed = ErrorBody.safeParse(body);
    super(parsed.success ? `HTTP ${status} ${parsed.data.error.code}: ${parsed.data.error.message}` : `HTTP ${status}: ${JSON.stringify(body)}`);
    this.name = 'RunplaneHttpError';
  }
}

/** One event received over SSE: its stream sequence (the SSE id) and the validated event. */
export interface ObservedEvent {
  seq: number;
  event: RunEvent;
}

async function readJson(res: Response): Promise<unknown> {
  const text = await res.text();
  try {
    return text === '' ? null : JSON.parse(text);
  } catch {
    return text;
  }
}

export class RunplaneClient {
  constructor(readonly endpoints: RunplaneEndpoints) {}

  /**
   * Submits a message. Resolves with the status (201 admitted, 200 existing) and the body.
   * @throws RunplaneHttpError for 4xx/5xx (400 invalid body, 409 conflicting clientMessageId).
   */
  async postMessage(conversationId: string, body: { clientMessageId: string; content: string }): Promise<{ status: number; body: PostMessageResponse }> {
    const res = await fetch(`${this.endpoints.admission}/v1/conversations/${encodeURIComponent(conversationId)}/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const json = await readJson(res);
    if (!res.ok) throw new RunplaneHttpError(res.status, json);
    return { status: res.status, body: PostMessageResponse.parse(json) };
  }

  /** The Run projection, or null on 404 (unknown or not projected yet). */
  async getRun(runId: string): Promise<RunView | null> {
    const res = await fetch(`${this.endpoints.admission}/v1/runs/${encodeURIComponent(runId)}`);
    const json = await readJson(res);
    if (res.status === 404) return null;
    if (!res.ok) throw new RunplaneHttpError(res.status, json);
    return RunView.parse(json);
  }

  /** The Run's committed answer passages. */
  async getAnswer(runId: string): Promise<AnswerView> {
    const res = await fetch(`${this.endpoints.publication}/v1/runs/${encodeURIComponent(runId)}/answer`);
    const json = await readJson(res);
    if (!res.ok) throw new RunplaneHttpError(res.status, json);
    return AnswerView.parse(json);
  }

  /**
   * Observes a Run over SSE from after `lastEventId` (0 = from the start). Calls `onEvent` for
   * every stored event and `onDelta` for live token deltas (when requested). Resolves when the
   * server ends the stream (`server`: after `run.settled`, or early when the server shuts down;
   * the caller can tell by whether it saw the settlement), when the server answers 204 (`complete`:
   * the settlement is already behind `lastEventId`) or when `signal` aborts (a disconnect: the Run
   * goes on).
   */
  async streamEvents(
    runId: string,
    opts: { lastEventId?: number; signal?: AbortSignal; deltas?: boolean; onEvent: (e: ObservedEvent) => void; onDelta?: (d: { turn: number; text: string }) => void },
  ): Promise<{ lastEventId: number; ended: 'server' | 'complete' | 'aborted' }> {
    const url = new URL(`${this.endpoints.publication}/v1/runs/${encodeURIComponent(runId)}/events`);
    if (opts.deltas) url.searchParams.set('deltas', 'true');
    const headers: Record<string, string> = { accept: 'text/event-stream' };
    if (opts.lastEventId) headers['last-event-id'] = String(opts.lastEventId);
    let last = opts.lastEventId ?? 0;
    let res: Response;
    try {
      res = await fetch(url, { headers, signal: opts.signal });
    } catch (e) {
      if (opts.signal?.aborted) return { lastEventId: last, ended: 'aborted' };
      throw e;
    }
    if (res.status === 204) return { lastEventId: last, ended: 'complete' }; // the settlement is already behind Last-Event-ID
    if (!res.ok || !res.body) throw new RunplaneHttpError(res.status, await readJson(res));
    const parser = createParser({
      onEvent: (m: EventSourceMessage) => {
        if (opts.signal?.aborted) return; // detached: what arrives after the disconnect is not seen
        if (m.event === 'delta') {
          opts.onDelta?.(JSON.parse(m.data) as { turn: number; text: string });
          return;
        }
        if (!m.id) return;
        last = Number(m.id);
        opts.onEvent({ seq: last, event: RunEvent.parse(JSON.parse(m.data)) as RunEvent });
      },
    });
    const decoder = new TextDecoder();
    try {
      for await (const chunk of res.body) parser.feed(decoder.decode(chunk as Uint8Array, { stream: true }));
    } catch (e) {
      if (opts.signal?.aborted) return { lastEventId: last, ended: 'aborted' };
      throw e;
    }
    return { lastEventId: last, ended: opts.signal?.aborted ? 'aborted' : 'server' };
  }
}
