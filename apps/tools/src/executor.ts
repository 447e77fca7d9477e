/**
 * Runs tool calls in a pool of worker threads (piscina) under the call's timeout. The timeout is
 * measured on the worker's own event loop, which no tool blocks, so it fires on time even while a
 * tool burns the CPU (K5). It counts from the moment a thread begins the call: a call waiting for
 * a free thread has not started, and one that cannot start within the timeout is taken out of the
 * queue and reported `failed` (`not_started`: nothing was executed), never `unknown`. A call that outlives its timeout is reported `timed-out` at once, and
 * its thread is left running for up to `abandonMs` more so that a late result can still be
 * observed (`late`); after that the thread is stopped.
 */
import { MessageChannel } from 'node:worker_threads';
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
      // a queued call waits for a thread; its timeout starts when a thread begins it
      idleTimeout: 60_000,
    });
  }

  async run(task: ToolTask): Promise<ExecutionResult> {
    const submitted = performance.now();
    let started = submitted;
    const abort = new AbortController();
    const { port1, port2 } = new MessageChannel();
    let begun = false;
    const begin = new Promise<void>((resolve) => {
      port1.once('message', () => {
        begun = true;
        started = performance.now();
        resolve();
      });
    });
    const running = (this.pool.run({ ...task, startedPort: port2 }, { signal: abort.signal, transferList: [port2] }) as Promise<FinalOutcome>).catch(
      (e: unknown): FinalOutcome => ({ kind: 'crashed', message: e instanceof Error ? e.message : String(e) }),
    );
    let queueTimer: NodeJS.Timeout | undefined;
    const stillQueued = new Promise<'queued'>((r) => {
      queueTimer = setTimeout(() => r('queued'), this.opts.timeoutMs);
    });
    const startedOrDone = await Promise.race([begin.then(() => 'begun' as const), running, stillQueued]);
    clearTimeout(queueTimer);
    if (startedOrDone === 'queued' && !begun) {
      abort.abort(); // out of the queue before any thread began it
      port1.close();
      return {
        outcome: {
          kind: 'failed',
          code: 'not_started',
          message: `no thread was free to begin the call within ${this.opts.timeoutMs} ms; it was not executed`,
        },
        durationMs: Math.round(performance.now() - submitted),
        late: null,
      };
    }
    port1.close();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<null>((r) => {
      timer = setTimeout(() => r(null), Math.max(0, this.opts.timeoutMs - (performance.now() - started)));
    });
    const first = typeof startedOrDone === 'object' ? startedOrDone : await Promise.race([running, timedOut]);
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
