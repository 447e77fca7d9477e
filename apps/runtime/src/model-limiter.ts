/**
 * The shared per-model limiter of a runtime process (K7) and the reading of a provider's
 * `Retry-After`: what the model client (`ModelClient`, ./model-client.ts) sends its requests through. Kept apart
 * from the client so that its rules load (and are tested) without the OpenAI client.
 */
import PQueue from 'p-queue';
import { MAX_TIMER_MS } from '@runplane/contracts';

/** How long a 429 without `Retry-After` pauses the model's limiter, ms. */
export const DEFAULT_RATE_LIMIT_PAUSE_MS = 1_000;

/**
 * One limiter per model for every Run of this runtime process (K7): a provider's rate limit is
 * shared, so concurrency and request rate are limited here (`p-queue`: at most `maxConcurrent`
 * requests at once, and with `minIntervalMs` at most one start in any such period, a sliding
 * window; a request with room starts at once, without a timer), and a 429 (or 503) with
 * `Retry-After` pauses every Run's next request to that model until then, not only the Run that
 * got it. Never waits past a request's deadline, in the queue (every slot busy) or in a pause:
 * such a request is not sent (a `not-sent` failure: the provider received nothing, so nothing is
 * charged, K7). A request whose caller aborts while it waits leaves the queue at once, unsent.
 */
export class ModelRateLimiter {
  private readonly queue: PQueue;
  /** Epoch ms before which no request to this model starts (a provider's Retry-After). */
  private pausedUntil = 0;

  constructor(opts: { maxConcurrent?: number; minIntervalMs?: number } = {}) {
    const interval = opts.minIntervalMs ?? 0;
    this.queue = new PQueue({ concurrency: opts.maxConcurrent ?? 8, ...(interval > 0 ? { interval, intervalCap: 1, strict: true } : {}) });
  }

  /** Every request waits at least until `untilMs` (epoch ms) before it starts. */
  pauseUntil(untilMs: number): void {
    this.pausedUntil = Math.max(this.pausedUntil, untilMs);
  }

  /** How long (ms) the provider's rate-limit pause still lasts; 0 when none. */
  pauseLeftMs(): number {
    return Math.max(0, this.pausedUntil - Date.now());
  }

  /**
   * Waits out the rate-limit pause before a request is recorded as requested: a Run queued
   * behind a provider's Retry-After has no turn "in flight". Returns at once when there is no
   * pause, when the pause ends after `deadlineMs` (the request will then be `not-sent`), or when
   * `signal` aborts. @returns true when it waited.
   */
  async waitForPause(deadlineMs: number, signal?: AbortSignal): Promise<boolean> {
    let waited = false;
    for (;;) {
      const wait = this.pausedUntil - Date.now();
      if (wait <= 0 || Date.now() + wait >= deadlineMs || signal?.aborted) return waited;
      waited = true;
      await sleep(wait, signal);
    }
  }

  /**
   * Runs `job` under the limiter, after any pause. `deadlineMs` (epoch ms): when the queue or the
   * pause would end after it, `job` is not run and `onLate` answers instead (with the pause left,
   * ms, or 0): a request waiting for a slot leaves the queue when its deadline passes, and at once
   * when `signal` aborts. A pause is waited out holding no slot, and the request then queues again:
   * the requests a pause held start spaced by the interval, not together when it ends.
   */
  async schedule<T>(job: () => Promise<T>, deadlineMs: number, onLate: (waitMs: number) => T, signal?: AbortSignal): Promise<T> {
    for (;;) {
      if (Date.now() >= deadlineMs || signal?.aborted) return onLate(0);
      const wait = this.pausedUntil - Date.now();
      if (wait > 0) {
        if (Date.now() + wait >= deadlineMs) return onLate(wait);
        await sleep(wait, signal);
        continue;
      }
      const outcome = await this.whenStarted(job, deadlineMs, signal);
      if (outcome === LEFT_QUEUE) return onLate(0);
      if (outcome !== PAUSED) return outcome.value;
      // a pause began while it waited for its slot: wait it out outside the queue
    }
  }

  /**
   * Queues `job` for a slot; once it has one, runs it unless a pause began meanwhile.
   * @returns `{ value }` of the job, {@link PAUSED} (not run: a pause began), or {@link LEFT_QUEUE}
   *   (not run: its deadline passed, or `signal` aborted, while it waited for a slot).
   */
  private whenStarted<T>(job: () => Promise<T>, deadlineMs: number, signal?: AbortSignal): Promise<{ value: T } | typeof PAUSED | typeof LEFT_QUEUE> {
    // while queued: its deadline or its caller's abort takes the request out of the queue; once it
    // has started, neither aborts it here (the queue would answer for a request still running)
    const queued = new AbortController();
    const giveUp = () => queued.abort();
    const left = deadlineMs - Date.now();
    // (a deadline past what a timer can hold is past every queue: no timer)
    const timer = left <= MAX_TIMER_MS ? setTimeout(giveUp, left) : undefined;
    timer?.unref();
    signal?.addEventListener('abort', giveUp, { once: true });
    const started = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', giveUp);
    };
    return this.queue
      .add(
        async (): Promise<{ value: T } | typeof PAUSED | typeof LEFT_QUEUE> => {
          started();
          if (this.pausedUntil > Date.now()) return PAUSED;
          if (Date.now() >= deadlineMs || signal?.aborted) return LEFT_QUEUE;
          return { value: await job() };
        },
        { signal: queued.signal },
      )
      .catch((e: unknown) => {
        started();
        if (queued.signal.aborted && e === queued.signal.reason) return LEFT_QUEUE;
        throw e;
      });
  }
}

/** What {@link ModelRateLimiter} makes of a request that had a slot while a pause was on: not run. */
const PAUSED = Symbol('paused');
/** What {@link ModelRateLimiter} makes of a request whose deadline or abort came while it waited for a slot: not run. */
const LEFT_QUEUE = Symbol('left the queue');

/** Resolves after `ms`, or at once when `signal` aborts (before or during); leaves no listener behind. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/**
 * A `Retry-After` header as milliseconds: delta-seconds or an HTTP date (RFC 9110), or undefined
 * when absent or unreadable. `retry-after-ms` (OpenAI's own header) wins when present.
 */
export function retryAfterMs(headers: Headers | Record<string, string | null | undefined> | undefined, now = Date.now()): number | undefined {
  if (!headers) return undefined;
  const get = (k: string) => (headers instanceof Headers ? headers.get(k) : (headers[k] ?? undefined)) ?? undefined;
  const ms = get('retry-after-ms');
  if (ms !== undefined && /^\d+(\.\d+)?$/.test(ms.trim())) return Math.ceil(Number(ms));
  const v = get('retry-after')?.trim();
  if (!v) return undefined;
  if (/^\d+(\.\d+)?$/.test(v)) return Math.ceil(Number(v) * 1000);
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}
