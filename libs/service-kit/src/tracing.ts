/**
 * OpenTelemetry tracing of a service process ([docs/operations.md](../../../docs/operations.md#traces)).
 * Off unless the standard `OTEL_*` variables ask for traces: then `@opentelemetry/sdk-node` is
 * started before Nest boots, with the exporter, protocol, endpoint, sampler, propagators and
 * resource those variables name (OTLP over HTTP/protobuf to `OTEL_EXPORTER_OTLP_ENDPOINT` by
 * default), traces only (metrics stay on `/metrics`), and flushed when the service shuts down.
 * Off, nothing is started: the `@opentelemetry/api` calls of libs/eventlog stay no-ops.
 */
import { Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type TextMapGetter } from '@opentelemetry/api';
import type { NodeSDK } from '@opentelemetry/sdk-node';
import { TRACER_NAME } from '@runplane/eventlog';

/**
 * Whether the environment asks for traces: `OTEL_TRACES_EXPORTER` names an exporter other than
 * `none`, or an OTLP endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`,
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) without `OTEL_TRACES_EXPORTER=none`; never with
 * `OTEL_SDK_DISABLED=true`.
 */
export function tracingRequested(env: NodeJS.ProcessEnv = process.env): boolean {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean);
  if (exporters.includes('none')) return false;
  if (exporters.length > 0) return true;
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim());
}

let sdk: NodeSDK | null = null;
let users = 0;

/**
 * Starts tracing for this process when {@link tracingRequested}: the SDK is registered globally
 * once per process (every service started in it shares it; `OTEL_SERVICE_NAME` wins over
 * `serviceName`, the first service's name).
 * @returns true when tracing is on; each `true` is matched by one {@link stopTracing}.
 */
export async function startTracing(serviceName: string, env: NodeJS.ProcessEnv = process.env): Promise<boolean> {
  if (!tracingRequested(env)) return false;
  // loaded only when asked for (about 300 ms of start-up otherwise spent for nothing)
  const { NodeSDK } = await import('@opentelemetry/sdk-node');
  if (!sdk) {
    sdk = new NodeSDK({
      serviceName: env.OTEL_SERVICE_NAME?.trim() || serviceName,
      // traces only: the services' metrics are Prometheus's (`/metrics`), their logs pino's
      metricReaders: [],
      logRecordProcessors: [],
      instrumentations: [],
    });
    sdk.start();
  }
  users++;
  return true;
}

/** Flushes and stops the SDK once the last service that started it stops (spans still buffered are exported). */
export async function stopTracing(): Promise<void> {
  if (users === 0 || --users > 0 || !sdk) return;
  const stopping = sdk;
  sdk = null;
  await stopping.shutdown().catch(() => undefined);
}

/** Flushes the traces of a service when its application shuts down (after its consumer and connections closed). */
@Injectable()
export class TracingShutdown implements OnApplicationShutdown {
  async onApplicationShutdown(): Promise<void> {
    await stopTracing();
  }
}

/** The Express request and response a {@link traceRequests} middleware sees. */
interface TracedRequest {
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  route?: { path?: string };
  baseUrl?: string;
}
interface TracedResponse {
  statusCode: number;
  once(event: 'finish' | 'close', fn: () => void): unknown;
}

const headerGetter: TextMapGetter<TracedRequest['headers']> = {
  get: (h, key) => h[key],
  keys: (h) => Object.keys(h),
};

/** Paths never traced: probes and scrapes. */
const UNTRACED = new Set(['/livez', '/readyz', '/healthz', '/metrics']);

/**
 * Express middleware: one server span per HTTP request (not probes, not `/metrics`), a child of
 * the caller's `traceparent` when it sends one, named by method and route once routed
 * (`POST /v1/conversations/:conversationId/messages`); the request's handler runs inside it, so
 * what it appends (admission's `run.admitted`) starts or joins the Run's trace.
 */
export function traceRequests(): (req: TracedRequest, res: TracedResponse, next: () => void) => void {
  const tracer = trace.getTracer(TRACER_NAME);
  return (req, res, next) => {
    if (UNTRACED.has(req.path)) return next();
    const parent = propagation.extract(ROOT_CONTEXT, req.headers, headerGetter);
    const span = tracer.startSpan(
      `${req.method} ${req.path}`,
      { kind: SpanKind.SERVER, attributes: { 'http.request.method': req.method, 'url.path': req.path } },
      parent,
    );
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      const route = req.route?.path ? `${req.baseUrl ?? ''}${req.route.path}` : undefined;
      if (route) span.updateName(`${req.method} ${route}`).setAttribute('http.route', route);
      span.setAttribute('http.response.status_code', res.statusCode);
      if (res.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    };
    res.once('finish', end);
    res.once('close', end);
    context.with(trace.setSpan(parent, span), next);
  };
}
