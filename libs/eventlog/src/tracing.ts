/**
 * Trace context through the event log (OpenTelemetry, W3C Trace Context). A Run's trace starts at
 * admission's HTTP request; every append carries the active context as a `traceparent` header on
 * its NATS message, and every delivery continues the trace of the message it delivers, so all the
 * events of a Run, whichever service appends them, stay in one trace
 * ([docs/operations.md](../../../docs/operations.md#traces)).
 *
 * Only `@opentelemetry/api` is used here: without an SDK started in the process (the default,
 * libs/service-kit tracing.ts) the tracer and the propagator are no-ops, no header is written and
 * a span costs a function call.
 */
import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
} from '@opentelemetry/api';

/** The instrumentation scope of every Runplane span. */
export const TRACER_NAME = 'runplane';

/** The tracer of every Runplane span (a no-op until an SDK is registered). */
export function tracer() {
  return trace.getTracer(TRACER_NAME);
}

/** What headers carry trace context: NATS `MsgHdrs` (set/get by exact name) satisfy it. */
export interface TraceCarrier {
  set(name: string, value: string): void;
}

/** Headers the trace context can be read from: NATS `MsgHdrs` of a consumer's message or of a direct get. */
export interface TraceSource {
  get(name: string): string;
}

const setter: TextMapSetter<TraceCarrier> = { set: (carrier, key, value) => carrier.set(key, value) };
const getter: TextMapGetter<TraceSource> = {
  get: (carrier, key) => carrier.get(key) || undefined,
  keys: () => ['traceparent', 'tracestate'],
};

/**
 * Writes the active trace context (`traceparent`, `tracestate`; the propagator the SDK registered,
 * W3C Trace Context by default) into `headers`. Nothing is written when no span is active (tracing
 * off, or an append outside any trace).
 * @returns true when a span was active (its context was handed to the propagator).
 */
export function injectTraceContext(headers: TraceCarrier, ctx: Context = context.active()): boolean {
  if (!trace.getSpan(ctx)) return false;
  propagation.inject(ctx, headers, setter);
  return true;
}

/**
 * The trace context a message carries (`traceparent`), as a parent for the span of its handling;
 * the root context when it carries none (or tracing is off).
 */
export function extractTraceContext(headers: TraceSource | undefined): Context {
  if (!headers) return ROOT_CONTEXT;
  return propagation.extract(ROOT_CONTEXT, headers, getter);
}

/** Options of {@link inSpan}. */
export interface SpanOptions {
  kind?: SpanKind;
  attributes?: Attributes;
  /** The parent context (default: the active one). */
  parent?: Context;
  links?: Link[];
}

/**
 * Runs `fn` inside a new active span named `name` and ends it when `fn` settles: a thrown error
 * is recorded on the span (status ERROR) and rethrown. With tracing off the span is a no-op.
 */
export async function inSpan<T>(name: string, opts: SpanOptions, fn: (span: Span) => Promise<T>): Promise<T> {
  const parent = opts.parent ?? context.active();
  return tracer().startActiveSpan(
    name,
    {
      kind: opts.kind ?? SpanKind.INTERNAL,
      ...(opts.attributes ? { attributes: opts.attributes } : {}),
      ...(opts.links ? { links: opts.links } : {}),
    },
    parent,
    async (span) => {
      try {
        return await fn(span);
      } catch (e) {
        failSpan(span, e);
        throw e;
      } finally {
        span.end();
      }
    },
  );
}

/** Marks `span` failed with `e` (status ERROR, the exception recorded). */
export function failSpan(span: Span, e: unknown): void {
  if (!span.isRecording()) return;
  span.recordException(e instanceof Error ? e : String(e));
  span.setStatus({ code: SpanStatusCode.ERROR, message: e instanceof Error ? e.message : String(e) });
}

/** A link to the span active in `ctx`, if any (a batched step names the deliveries it serves). */
export function linkTo(ctx: Context): Link | null {
  const span = trace.getSpan(ctx);
  return span ? { context: span.spanContext() } : null;
}

export { SpanKind, context as traceContext };
