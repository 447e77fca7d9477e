/**
 * The bounded shutdown of a service process (docs/operations.md "Stopping a service"). On the
 * first SIGTERM or SIGINT the Nest application closes: its drain hooks run (the runtime and tools
 * take no new work and finish what is in flight within `RUNPLANE_DRAIN_SECONDS`), then the
 * partition consumers stop (handlers in flight finish and are acknowledged), then the connections
 * close. Each of those steps may wait for the NATS server, which can be gone or frozen; so the
 * whole shutdown has a bound, `RUNPLANE_SHUTDOWN_GRACE_SECONDS`: past it the process logs what it
 * could not finish and exits 1, before the pod's `terminationGracePeriodSeconds` ends in a SIGKILL.
 * A second signal exits at once (130 after SIGINT, 143 after SIGTERM). What was appended stays
 * appended: a Run whose lease this process still held is fenced by recovery, as after a crash.
 */
import { Logger, type INestApplication } from '@nestjs/common';

/** One event handler still running (a delivery not yet acknowledged). */
export interface HandlerInFlight {
  runId: string;
  eventType: string;
  seq: number;
}

/** Where a stopping process is, as its last log line says when it cannot finish. */
export interface ShutdownProgress {
  /**
   * `draining`: the services' drain hooks (no new work; the runtime's and tools' calls in flight);
   * `closing consumers`: the partition consumers wait for their handlers in flight;
   * `closing connections`: NATS, PostgreSQL and the other clients close.
   */
  stage: 'draining' | 'closing consumers' | 'closing connections';
  /** The event handlers still running. */
  handlers: HandlerInFlight[];
}

export interface BoundedShutdownOptions {
  /** The shutdown bound, ms (`RUNPLANE_SHUTDOWN_GRACE_SECONDS` x 1000). */
  graceMs: number;
  /** Where the shutdown is (read when the bound passes or a second signal arrives). */
  progress: () => ShutdownProgress;
  /** Ends the process (tests pass their own); default `process.exit`. */
  exit?: (code: number) => void;
  /**
   * The service's HTTP server: {@link HTTP_SHUTDOWN_GRACE_MS} after the first signal (or a third of
   * `graceMs`, if less) every connection still open is closed, so a client that never finishes
   * sending its request (a slow or hostile body) or a response left open cannot hold the shutdown
   * to its bound. A cut request was not answered; a client repeats it (K1 makes a repeated message
   * admit nothing twice).
   */
  http?: () => { closeAllConnections(): void };
}

/** How long HTTP requests in flight may still finish after the first signal, ms. */
export const HTTP_SHUTDOWN_GRACE_MS = 5_000;

/**
 * The HTTP grace under a shutdown bound of `graceMs` (ms): {@link HTTP_SHUTDOWN_GRACE_MS}, or a
 * third of the bound when that is less, so that closing the connections leaves the rest of the
 * bound for the app's own close.
 */
export function httpShutdownGraceMs(graceMs: number): number {
  return Math.min(HTTP_SHUTDOWN_GRACE_MS, graceMs / 3);
}

const SIGNAL_EXIT_CODES: Partial<Record<NodeJS.Signals, number>> = { SIGINT: 130, SIGTERM: 143 };

/**
 * Until {@link shutDownOnSignals} takes over: a SIGTERM or SIGINT while the service is still
 * starting (loading its modules, waiting for the provisioning, connecting) writes one JSON line
 * through `say` (`stopped while starting, before it was ready: nothing of it was running`) and
 * exits 0: nothing was consumed or appended, so there is nothing to drain. Without it the process
 * died of the signal (143) and said nothing, though a rollout or a scale-down stops a pod that is
 * waiting for the provisioning. Returns the function that removes the handlers (called once the
 * graceful shutdown is installed, or the start failed).
 */
export function exitOnSignalsWhileStarting(
  say: (signal: NodeJS.Signals) => void,
  exit: (code: number) => void = (code) => process.exit(code),
): () => void {
  const onSignal = (signal: NodeJS.Signals) => {
    say(signal);
    exit(0);
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return () => {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  };
}

/**
 * Closes `app` on the first SIGTERM or SIGINT and exits 0 once it is closed, 1 when closing failed
 * or took longer than `graceMs`; a second signal exits at once. Every step is one JSON log line
 * (context `shutdown`): `stopping`, then `stopped`, or the error naming the stage and the handlers
 * still in flight.
 */
export function shutDownOnSignals(app: INestApplication, opts: BoundedShutdownOptions): void {
  const logger = new Logger('shutdown');
  const exit = opts.exit ?? ((code: number) => process.exit(code));
  let first: { signal: NodeJS.Signals; at: number } | null = null;
  let done = false;
  const finish = (code: number) => {
    if (done) return;
    done = true;
    exit(code);
  };
  const unfinished = () => {
    const p = opts.progress();
    return { stage: p.stage, handlersInFlight: p.handlers.length, handlers: p.handlers.slice(0, 20) };
  };
  const onSignal = (signal: NodeJS.Signals) => {
    if (first) {
      logger.error(
        { signal, firstSignal: first.signal, elapsedMs: Date.now() - first.at, ...unfinished() },
        'second signal: exiting at once, the shutdown unfinished',
      );
      finish(SIGNAL_EXIT_CODES[signal] ?? 1);
      return;
    }
    first = { signal, at: Date.now() };
    const at = first.at;
    logger.log({ signal, graceSeconds: opts.graceMs / 1000 }, 'stopping: no new work; finishing what is in flight');
    if (opts.http) {
      const server = opts.http;
      setTimeout(() => server().closeAllConnections(), httpShutdownGraceMs(opts.graceMs)).unref();
    }
    const bound = setTimeout(() => {
      logger.error(
        { signal, graceSeconds: opts.graceMs / 1000, elapsedMs: Date.now() - at, ...unfinished() },
        'shutdown bound passed: exiting with work unfinished (RUNPLANE_SHUTDOWN_GRACE_SECONDS)',
      );
      finish(1);
    }, opts.graceMs);
    app.close().then(
      () => {
        clearTimeout(bound);
        logger.log({ signal, elapsedMs: Date.now() - at }, 'stopped');
        finish(0);
      },
      (e: unknown) => {
        clearTimeout(bound);
        logger.error({ signal, elapsedMs: Date.now() - at, err: e instanceof Error ? e : String(e), ...unfinished() }, 'shutdown failed');
        finish(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}
