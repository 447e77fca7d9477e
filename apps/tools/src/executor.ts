/**
 * Runs tool calls in a pool of worker threads (piscina) under the call's timeout. The timeout is
 * measured on the worker's own event loop, which no tool blocks, so it fires on time even while a
 * tool burns the CPU (K5). It counts from the moment a thread begins the call: a call waiting for
 * a free thread has not started, and one that cannot start within the timeout is taken out of the
 * queue and reported `failed` (`not_started`: nothing was executed, which its start gate makes
 * certain, start-gate.ts), never `unknown`. A call that outlives its timeout is reported
 * `timed-out` at once, and its thread is left running for up to `abandonMs` more so that a late
 * result can still be observed (`late`); after that the thread is stopped.
 *
 * Every thread is started with the executor, calls wait until each has loaded the tools
 * ({@link ToolExecutor.ready}), and a call is handed only to a thread that has started: a thread's start-up
 * (a fresh isolate loading the tools) is no part of any call's wait. Piscina by default starts
 * threads on demand and, when a busy thread frees up, hands the next queued call to a thread still
 * starting if there is one, leaving the free thread idle: beside a loaded CI (2 cores) a start-up
 * outlasted a 2.5 s timeout and the call was refused `not_started`.
 */
import { MessageChannel } from 'node:worker_threads';
import { Piscina } from 'piscina';
import { SpanStatusCode } from '@opentelemetry/api';
import { inSpan } from '@runplane/eventlog';
import { startupCollectionOn } from '@runplane/kit/memory';
import type { ToolOutcome } from './decide.js';
import { newStartGate, tryRefuse } from './start-gate.js';
import type { ToolTask, WarmUp } from './tool-worker.js';

/**
 * The tool threads' script: `tool-worker.bundle.js` when this code runs from the tools service's
 * bundle (scripts/bundle-services.mjs), else `tool-worker.js` beside this module: the threads run
 * code of the same build as the service.
 */
const TOOL_WORKER = new URL(import.meta.url.endsWith('.bundle.js') ? './tool-worker.bundle.js' : './tool-worker.js', import.meta.url);

export type FinalOutcome = Exclude<ToolOutcome, { kind: 'timed-out' }>;

export interface ExecutionResult {
  /** The outcome within the timeout, or `timed-out`. */
  outcome: ToolOutcome;
  durationMs: number;
  /** When timed out: the real outcome if it arrives within the abandon period, else null. */
  late: Promise<{ outcome: FinalOutcome; durationMs: number } | null> | null;
}

type LoadBalancer = NonNullable<NonNullable<ConstructorParameters<typeof Piscina>[0]>['loadBalancer']>;

export class ToolExecutor {
  private readonly pool: Piscina;
  /**
   * Resolves once every thread has loaded the tools (one no-op task on each, run as the executor
   * is made). A call that comes sooner waits for it before it asks for a thread: the threads'
   * start-up is no part of its wait. A thread stopped later (a call abandoned after its timeout) is
   * replaced, and takes calls only once the replacement has started.
   */
  readonly ready: Promise<void>;
  /**
   * Whether each thread's warm-up ran its start-up collection (all false when the process was
   * started with `RUNPLANE_STARTUP_COLLECTION=false`); settles with {@link ready}.
   */
  readonly startupCollections: Promise<boolean[]>;
  /** Ids of the threads that have started (piscina's `workerCreate`) and not been stopped since. */
  private readonly started = new Set<number>();
  /**
   * The first idle thread that has started, else none (the task stays queued until one is free or
   * starts): piscina also offers the threads still starting, first, and would queue a call behind
   * a start-up while a started thread is free.
   */
  private readonly startedIdleThread: LoadBalancer = (_task, workers) => workers.find((w) => this.started.has(w.id) && w.currentUsage === 0) ?? null;

  constructor(private readonly opts: { threads: number; timeoutMs: number; abandonMs: number }) {
    // a call a thread cannot take now waits in piscina's queue; its timeout starts when a thread begins it
    this.pool = new Piscina({
      // the worker's bundle when the build made it (scripts/bundle-services.mjs), else its module
      filename: TOOL_WORKER.href,
      minThreads: opts.threads,
      maxThreads: opts.threads,
      loadBalancer: this.startedIdleThread,
    });
    this.pool.on('workerCreate', (w: { id: number }) => this.started.add(w.id));
    this.pool.on('workerDestroy', (w: { id: number }) => this.started.delete(w.id));
    this.startupCollections = Promise.all(
      Array.from(
        { length: opts.threads },
        () => this.pool.run({ startupCollection: startupCollectionOn() } satisfies WarmUp, { name: 'warmUp' }) as Promise<boolean>,
      ),
    );
    this.ready = this.startupCollections.then(() => undefined);
    this.ready.catch(() => undefined); // awaited by every call and by the service's start-up, which fails on it
    this.startupCollections.catch(() => undefined);
  }

  /**
   * Runs one call (see the class) in an `execute_tool <name>` span (OpenTelemetry GenAI
   * conventions: `gen_ai.tool.name`, `gen_ai.tool.call.id`; `runplane.tool.outcome` the outcome's
   * kind, status ERROR unless it returned), ended when the outcome within the timeout is known.
   */
  async run(task: ToolTask): Promise<ExecutionResult> {
    return inSpan(
      `execute_tool ${task.name}`,
      {
        attributes: {
          'gen_ai.operation.name': 'execute_tool',
          'gen_ai.tool.name': task.name,
          'gen_ai.tool.call.id': task.toolCallId,
          'runplane.run_id': task.runId,
        },
      },
      async (span) => {
        const result = await this.runUntraced(task);
        span.setAttributes({ 'runplane.tool.outcome': result.outcome.kind, 'runplane.tool.duration_ms': result.durationMs });
        if (result.outcome.kind !== 'returned') {
          const code = result.outcome.kind === 'failed' ? result.outcome.code : result.outcome.kind;
          span.setAttribute('error.type', code);
          span.setStatus({ code: SpanStatusCode.ERROR });
        }
        return result;
      },
    );
  }

  private async runUntraced(task: ToolTask): Promise<ExecutionResult> {
    await this.ready;
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
    const gate = newStartGate();
    const running = (
      this.pool.run({ ...task, startedPort: port2, startGate: gate }, { signal: abort.signal, transferList: [port2] }) as Promise<FinalOutcome>
    ).catch((e: unknown): FinalOutcome => ({ kind: 'crashed', message: e instanceof Error ? e.message : String(e) }));
    let queueTimer: NodeJS.Timeout | undefined;
    const stillQueued = new Promise<'queued'>((r) => {
      queueTimer = setTimeout(() => r('queued'), this.opts.timeoutMs);
    });
    const startedOrDone = await Promise.race([begin.then(() => 'begun' as const), running, stillQueued]);
    clearTimeout(queueTimer);
    // a thread may have begun the call just now, its `started` not yet here: the gate says which came first
    if (startedOrDone === 'queued' && !begun && tryRefuse(gate)) {
      abort.abort(); // out of the queue, or off a thread that will never begin it
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
    // begun, maybe only now (its message still on the way): its timeout counts from then
    if (startedOrDone === 'queued' && !begun) started = performance.now();
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
