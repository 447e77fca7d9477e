/**
 * Prometheus metrics of a service process (prom-client), served as `GET /metrics` (text
 * exposition format) on the service's own HTTP server beside `/healthz`. Every series carries the
 * label `service`. What is counted:
 * - `runplane_bus_anomalies_total{service, kind}`: messages on Run subjects that are not facts,
 *   and events that cannot apply (libs/eventlog `recordAnomaly`: garbage, forgeries, replays), each
 *   terminated or skipped once and logged (K11). Read from the process's anomaly counts at scrape.
 * - `runplane_settlements_total{service, outcome}`: settlements this process appended (only the
 *   lifecycle appends them, K9), by outcome.
 * - `runplane_run_reads_total{service, source}`: the Run facts decisions were taken from, `kept`
 *   (the fold kept from whole-Run deliveries, no request to the log) or `log` (read from the event
 *   log: outside a delivery, a fold behind, after a conflict): issue [9], RunFolds.
 * - `runplane_tool_claim_met_total{service, outcome}`: tools wakes that met another executor's
 *   claim on a call they decided to dispatch: `retried` (read again in process after a short
 *   pause) or `redelivered` (handed back to the consumer); such a wake is never dropped (issue [8]).
 * - `runplane_quota_refusals_total{service, quota}`: new Runs admission refused for a per-principal
 *   quota (429 `quota_exceeded`), by quota (`concurrent-runs`, `runs-per-hour`, `cost-per-day`).
 * - `runplane_model_cost_micros_total{service, principal, model, currency, bound}`: what the model
 *   turns this process recorded cost (K7), micro-units (1 USD = 1,000,000): `bound="measured"` from
 *   reported usage, `bound="unknown_max"` the upper bound of turns whose usage is unknown (their
 *   cost lies between 0 and it). Only the runtime records turns; `principal` is empty without
 *   authentication. One series per principal seen since start: bounded by the deployment's
 *   principals, not by Runs (docs/operations.md, "Metrics", says when to drop the label).
 * - the prom-client default process metrics (`process_*`, `nodejs_*`: CPU, memory, event loop lag).
 *   The event loop lag histogram samples every {@link EVENT_LOOP_SAMPLE_MS} ms (prom-client's
 *   default, 10 ms, woke an idle process 100 times a second: about half of its idle CPU).
 */
import { anomalyCounts } from '@runplane/eventlog';
import { runReads } from './command-handler.js';
import { collectDefaultMetrics, Counter, Registry } from 'prom-client';

/** The process's metrics registry (one service per process). */
export const metricsRegistry = new Registry();

new Counter({
  name: 'runplane_bus_anomalies_total',
  help: 'Messages on Run subjects that are not facts (invalid, unverified, duplicate) or cannot apply, terminated or skipped once (K11)',
  labelNames: ['kind'] as const,
  registers: [metricsRegistry],
  collect() {
    this.reset();
    for (const [kind, n] of Object.entries(anomalyCounts())) this.inc({ kind }, n ?? 0);
  },
});

/** Settlements this process appended (`run.settled`), by outcome; incremented by the lifecycle after its append (K9). */
export const settlementsTotal = new Counter({
  name: 'runplane_settlements_total',
  help: 'Settlements appended by this process (only the lifecycle settles: K9), by outcome',
  labelNames: ['outcome'] as const,
  registers: [metricsRegistry],
});

/** Cost of the model turns this process recorded, micro-units, by principal, model, currency and bound (measured, unknown_max): K7. */
export const modelCostMicrosTotal = new Counter({
  name: 'runplane_model_cost_micros_total',
  help: 'Cost of model turns recorded by this process, micro-units of the currency (K7): measured from usage, or unknown_max (upper bound of unknown usage)',
  labelNames: ['principal', 'model', 'currency', 'bound'] as const,
  registers: [metricsRegistry],
});

/**
 * Tools wakes that met a claim another executor (a peer replica, or an earlier wake of the same
 * process) held on a call they decided to dispatch, by what was done: `retried` in process after a
 * short pause, or `redelivered` through the consumer. Never dropped (issue [8]).
 */
export const toolClaimMetTotal = new Counter({
  name: 'runplane_tool_claim_met_total',
  help: "Tools wakes that met another executor's claim on a call they decided to dispatch, by what was done (retried in process, redelivered); never dropped",
  labelNames: ['outcome'] as const,
  registers: [metricsRegistry],
});

/**
 * New Runs admission refused for a per-principal quota (429 `quota_exceeded`, nothing appended),
 * by the quota named in the refusal (`concurrent-runs`, `runs-per-hour`, `cost-per-day`).
 */
export const quotaRefusalsTotal = new Counter({
  name: 'runplane_quota_refusals_total',
  help: 'New Runs refused for a per-principal quota (429 quota_exceeded, nothing appended), by quota (concurrent-runs, runs-per-hour, cost-per-day)',
  labelNames: ['quota'] as const,
  registers: [metricsRegistry],
});

new Counter({
  name: 'runplane_run_reads_total',
  help: 'Run facts a decision was taken from, by source: kept (the fold kept from deliveries, no request) or log (read from the event log)',
  labelNames: ['source'] as const,
  registers: [metricsRegistry],
  collect() {
    this.reset();
    this.inc({ source: 'kept' }, runReads.kept);
    this.inc({ source: 'log' }, runReads.log);
  },
});

/**
 * How often the event loop lag histogram (`nodejs_eventloop_lag_*_seconds`) takes a sample, ms.
 * Each sample is a libuv timer that wakes the process; prom-client's default of 10 ms cost an idle
 * service about 100 wake-ups a second, half of its idle CPU (docs/performance.md, "Idle"). At
 * 100 ms a stall of 100 ms or more is still always seen (it delays the next sample); shorter
 * stalls are seen in proportion to their length.
 */
export const EVENT_LOOP_SAMPLE_MS = 100;

let started = false;

/**
 * Labels every series with `service` and starts the default process metrics; once per process
 * (a second call changes nothing).
 */
export function initMetrics(service: string): void {
  if (started) return;
  started = true;
  metricsRegistry.setDefaultLabels({ service });
  collectDefaultMetrics({ register: metricsRegistry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
}

/** Minimal shape of the HTTP adapter's `get` used to serve `/metrics` (Express under Nest). */
interface MetricsAdapter {
  getHttpAdapter(): {
    get(path: string, handler: (req: unknown, res: { setHeader(name: string, value: string): void; end(body: string): void }) => void): unknown;
  };
}

/** Serves `GET /metrics` (Prometheus text format, `metricsRegistry`) on a Nest application. */
export function serveMetrics(app: MetricsAdapter, service: string): void {
  initMetrics(service);
  app.getHttpAdapter().get('/metrics', (_req, res) => {
    void metricsRegistry.metrics().then((text) => {
      res.setHeader('Content-Type', metricsRegistry.contentType);
      res.end(text);
    });
  });
}
