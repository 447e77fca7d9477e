/**
 * Runs tool calls in a pool of worker threads (piscina) under the call's timeout. The timeout is
 * measured on the worker's own event loop, which no tool blocks, so it fires on time even while a
 * tool burns the CPU (K5). A call that outlives its timeout is reported `timed-out` at once, and
 * its thread is left running for up to `abandonMs` more so that a late result can still be
 * observed (`late`); after that the thread is stopped.
 */
import { Piscina } from 'piscina';
import type { ToolOutcome } from './decide.js';
import type { ToolTask } from './tool-worker.js';

export type FinalOutcome = Exclude<ToolOutcome, { kind: 'timed-out' }>;

export interface ExecutionResult {
  /** The outcome within the timeout, or `timed-out`. */
  outcome: ToolOutcome;
  durationMs: number;
  /** When timed out: the real outcome if it arrives within the abandon period, else null. */
  late: Promise<{ outcome: FinalOutcome; durationMs: number } | null> | null;
}

export class ToolExecutor {
  private readonly pool: Piscina;

  constructor(private readonly opts: { threads: number; timeoutMs: number; abandonMs: number }) {
    this.pool = new Piscina({
      filename: new URL('./tool-worker.js', import.meta.url).href,
      minThreads: 1,
      maxThreads: opts.threads,
      // a queued call waits for a thread; its timeout starts when the call is submitted
      idleTimeout: 60_000,
    });
  }

  async run(task: ToolTask): Promise<ExecutionResult> {
    const started = performance.now();
    const abort = new AbortController();
    const running = (this.pool.run(task, { signal: abort.signal }) as Promise<FinalOutcome>).catch((e: unknown): FinalOutcome => ({
      kind: 'crashed',
      message: e instanceof Error ? e.message : String(e),
    }));
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<null>((r) => {
      timer = setTimeout(() => r(null), this.opts.timeoutMs);
    });
    const first = await Promise.race([running, timedOut]);
    clearTimeout(timer);
    if (first) return { outcome: first, durationMs: Math.round(performance.now() - started), late: null };
    const late = new Promise<{ outcome: FinalOutcome; durationMs: number } | null>((resolve) => {
      const stop = setTimeout(() => {
        abort.abort();
        resolve(null);
      }, this.opts.abandonMs);
      void running.then((outcome) => {
        clearTimeout(stop);
        // an aborted thread reports a crash: that is not an outcome of the call
        resolve(abort.signal.aborted ? null : { outcome, durationMs: Math.round(performance.now() - started) });
      });
    });
    return { outcome: { kind: 'timed-out', timeoutMs: this.opts.timeoutMs }, durationMs: Math.round(performance.now() - started), late };
  }

  async close(): Promise<void> {
    await this.pool.destroy();
  }
}
