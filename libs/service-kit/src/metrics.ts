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
 *   log: outside a delivery, a fold behind or never started, after a conflict): RunFolds, no read on the hot path.
 * - `runplane_tool_claim_met_total{service, outcome}`: tools wakes that met another executor's
 *   claim on a call they decided to dispatch: `retried` (read again in process after a short
 *   pause) or `redelivered` (handed back to the consumer); such a wake is never dropped (a wake lost to a claim would leave a call undispatched).
 * - `runplane_quota_refusals_total{service, quota}`: new Runs admission refused for a per-principal
 *   quota (429 `quota_exceeded`), by quota (`concurrent-runs`, `runs-per-hour`, `cost-per-day`).
 * - `runplane_model_cost_micros_total{service, principal, model, currency, bound}`: what the model
 *   turns this process recorded cost (K7), micro-units (1 USD = 1,000,000): `bound="measured"` from
 *   reported usage, `bound="unknown_max"` the upper bound of turns whose usage is unknown (their
 *   cost lies between 0 and it). Only the runtime records turns; `principal` is empty without
 *   authentication. One series per principal seen since start: bounded by the deployment's
 *   principals, not by Runs (docs/operations.md, "Metrics", says when to drop the label).
 * - the SRE's series (docs/metrics.md gives each with its PromQL, deploy/grafana the dashboard):
 *   `runplane_run_duration_seconds{outcome}` and `runplane_run_queue_seconds` (histograms, from
 *   event timestamps), `runplane_model_request_seconds{model, finish}` and
 *   `runplane_model_tokens_total{model, kind}`, `runplane_tool_duration_seconds{tool, status}`,
 *   `runplane_consumer_deliveries_total{durable}`, `runplane_consumer_redeliveries_total{durable}`, `runplane_consumer_ignored_total{durable}`,
 *   `runplane_consumer_pending{durable}`, `runplane_consumer_acks_coalesced_total`, `runplane_lease_renewals_total{result}`,
 *   `runplane_lease_expiries_total`, `runplane_sse_observers`, `runplane_observer_streams_refused_total{code}`, `runplane_appends_total{owner, result}`,
 *   `runplane_nats_connection_changes_total{change}`,
 *   `runplane_process_allocator_info{allocator}` (jemalloc or system).
 *   Each is recorded at the one place its effect happens; none carries a Run id or a principal.
 * - the prom-client default process metrics (`process_*`, `nodejs_*`: CPU, memory, event loop lag).
 *   The event loop lag histogram samples every {@link EVENT_LOOP_SAMPLE_MS} ms (prom-client's
 *   default, 10 ms, woke an idle process 100 times a second: about half of its idle CPU).
 */
import { acks, anomalyCounts, appendCounts, CONNECTION_CHANGES, connectionChangeCounts, deliveryCounts } from '@runplane/eventlog';
import { allocatorInUse, type Allocator } from '@runplane/kit/memory';
import { runReads } from './command-handler.js';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

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
 * short pause, or `redelivered` through the consumer. Never dropped (a wake lost to a claim would leave a call undispatched).
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
 * Wall time of settled Runs, seconds, from the `run.admitted` event's `occurredAt` to the
 * `run.settled` event's, by outcome; observed by the lifecycle once per settlement it appended
 * (K9: only it settles), so a sum over replicas counts every Run once.
 */
export const runDurationSeconds = new Histogram({
  name: 'runplane_run_duration_seconds',
  help: 'Run wall time from admission to settlement (event timestamps), seconds, by outcome; observed by the lifecycle once per settlement',
  labelNames: ['outcome'] as const,
  buckets: [0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400],
  registers: [metricsRegistry],
});

/**
 * Queue time of Runs, seconds: from `run.admitted`'s `occurredAt` to the moment a runtime took the
 * Run's first lease (epoch 1, once per Run: the lease can be created only once).
 */
export const runQueueSeconds = new Histogram({
  name: 'runplane_run_queue_seconds',
  help: "Run queue time from admission to the runtime taking the Run's first lease, seconds",
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
  registers: [metricsRegistry],
});

/**
 * Model requests the runtime sent, seconds from sending to the end of the streamed reply, by model
 * and how it ended (`finish`: the model's finish reason `stop`, `tool_calls`, `length`,
 * `content_filter`, else `other`; or the failure kind `timeout`, `connection`, `http`,
 * `invalid-response`). Requests the limiter never sent are not observed.
 */
export const modelRequestSeconds = new Histogram({
  name: 'runplane_model_request_seconds',
  help: 'Model requests sent, seconds to the end of the streamed reply, by model and finish (finish reason, or failure kind)',
  labelNames: ['model', 'finish'] as const,
  buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300],
  registers: [metricsRegistry],
});

/** Tokens the model reported for the runtime's requests (its usage chunk), by model and kind (`input`: prompt, `output`: completion). */
export const modelTokensTotal = new Counter({
  name: 'runplane_model_tokens_total',
  help: 'Tokens reported by the model for requests of this process, by model and kind (input, output); requests without usage add none',
  labelNames: ['model', 'kind'] as const,
  registers: [metricsRegistry],
});

/**
 * Tool executions of this process whose receipt it recorded, seconds (the receipt's `durationMs`:
 * from the moment a thread began the call), by tool name and receipt status (`succeeded`, `failed`,
 * `unknown`). Tool names are the deployment's registered tools.
 */
export const toolDurationSeconds = new Histogram({
  name: 'runplane_tool_duration_seconds',
  help: 'Tool executions recorded with a receipt, seconds (receipt durationMs), by tool and receipt status',
  labelNames: ['tool', 'status'] as const,
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
  registers: [metricsRegistry],
});

/**
 * Renewals of execution leases by the runtime's lease keeper, by result: `ok` renewed, `retry` NATS
 * did not answer (tried again next tick), `adopted` a renewal stored after all during an outage,
 * `lost` the lease was fenced or taken (execution of the Run stops, K6).
 */
export const leaseRenewalsTotal = new Counter({
  name: 'runplane_lease_renewals_total',
  help: 'Execution lease renewals by result: ok, retry (NATS did not answer), adopted (stored after all), lost (fenced or taken)',
  labelNames: ['result'] as const,
  registers: [metricsRegistry],
});

/** Execution leases recovery found expired with their holder gone, and fenced (`lease-expired`, K10). */
export const leaseExpiriesTotal = new Counter({
  name: 'runplane_lease_expiries_total',
  help: 'Execution leases found expired with their holder gone and fenced by recovery (K10)',
  registers: [metricsRegistry],
});

/** Observer streams (`GET /v1/runs/{runId}/events`, Server-Sent Events) open on this process now. */
export const sseObservers = new Gauge({
  name: 'runplane_sse_observers',
  help: 'Server-Sent Events observer streams open on this process',
  registers: [metricsRegistry],
});

/**
 * Observer streams refused on this process, by the problem's `code`: `observer_limit` (429, the
 * principal's `RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL`), `observer_capacity` (503, the process's
 * `RUNPLANE_OBSERVER_STREAMS_MAX`), `dependency_unavailable` (503, the Run's consumer could not be
 * made: NATS unreachable or the stream's consumer limit).
 */
export const observerStreamsRefusedTotal = new Counter({
  name: 'runplane_observer_streams_refused_total',
  help: 'Observer streams (GET /v1/runs/{runId}/events) refused on this process, by problem code: observer_limit (429), observer_capacity (503), dependency_unavailable (503)',
  labelNames: ['code'] as const,
  registers: [metricsRegistry],
});

new Counter({
  name: 'runplane_appends_total',
  help: 'Appends to the event log by owner and result: ok (events stored) or conflict (an append refused: wrong last sequence, decided elsewhere; K6)',
  labelNames: ['owner', 'result'] as const,
  registers: [metricsRegistry],
  collect() {
    this.reset();
    for (const [owner, c] of appendCounts()) {
      this.inc({ owner, result: 'ok' }, c.ok);
      this.inc({ owner, result: 'conflict' }, c.conflict);
    }
  },
});

new Counter({
  name: 'runplane_nats_connection_changes_total',
  help: "Changes of the process's NATS connections: stale (a hung server left), lost, back, attempt-failed (a server that answered, then refused), error (a refusal the server reported)",
  labelNames: ['change'] as const,
  registers: [metricsRegistry],
  collect() {
    this.reset();
    // every change from the start, at 0 until it happens: increase() sees a service's first one
    const counts = connectionChangeCounts();
    for (const change of CONNECTION_CHANGES) this.inc({ change }, counts.get(change) ?? 0);
  },
});

/** A counter per durable of one of the consumers' delivery counts (eventlog `DeliveryCounts`), read at scrape time. */
function deliveryCounter(name: string, help: string, count: 'delivered' | 'redelivered' | 'ignored'): void {
  new Counter({
    name,
    help,
    labelNames: ['durable'] as const,
    registers: [metricsRegistry],
    collect() {
      this.reset();
      for (const [durable, c] of deliveryCounts()) this.inc({ durable }, c[count]);
    },
  });
}

deliveryCounter(
  'runplane_consumer_deliveries_total',
  'Messages a durable consumer received in this process (first deliveries and redeliveries), by durable',
  'delivered',
);
deliveryCounter(
  'runplane_consumer_redeliveries_total',
  'Redeliveries a durable consumer received in this process (after a nak or an expired ack wait), by durable',
  'redelivered',
);
deliveryCounter(
  'runplane_consumer_ignored_total',
  'Messages a durable consumer acknowledged unread in this process (an event type its service does not act on), by durable',
  'ignored',
);

new Gauge({
  name: 'runplane_consumer_pending',
  help: "A durable consumer's messages not yet delivered (num_pending), as the server said with this process's latest delivery, by durable",
  labelNames: ['durable'] as const,
  registers: [metricsRegistry],
  collect() {
    // only the consumers this process consumes now: a partition released to another replica drops its series
    this.reset();
    for (const [durable, c] of deliveryCounts()) if (c.pending !== null) this.set({ durable }, c.pending);
  },
});

new Counter({
  name: 'runplane_consumer_acks_coalesced_total',
  help: 'Acknowledgements this process handed to the NATS client together with an earlier one of their batch (eventlog AckCoalescer; one write while connected): the writes the 5 ms window saved',
  registers: [metricsRegistry],
  collect() {
    this.reset();
    this.inc(acks.coalesced);
  },
});

let allocator: Allocator | undefined;

new Gauge({
  name: 'runplane_process_allocator_info',
  help: 'The malloc this process runs with (1 for the one in use): jemalloc when preloaded (deploy/Dockerfile, devstack), else system',
  labelNames: ['allocator'] as const,
  registers: [metricsRegistry],
  collect() {
    allocator ??= allocatorInUse(); // mapped at exec, it does not change
    this.set({ allocator }, 1);
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
