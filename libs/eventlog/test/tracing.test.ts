/**
 * Trace context through the log (libs/eventlog tracing.ts, docs/operations.md#traces), on the real
 * JetStream: an append outside any trace writes no header; inside a span it runs in an `append`
 * span and stores the W3C `traceparent` of that span on its message (single appends and batches);
 * a durable consumer's handler runs in the context the message carries, so what it does continues
 * the trace.
 */
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { context, propagation, trace, type SpanContext } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { makeEvent } from '@runplane/contracts';
import { DurableConsumer, EventLog, extractTraceContext, inSpan, injectTraceContext, ownerFilter, tracer } from '@runplane/eventlog';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { describeEachNatsServer, natsServersUnderTest, SUITE_NATS } from '../../../test/support/nats-server.js';

const servers = await natsServersUnderTest();
const tag = randomBytes(4).toString('hex');
const exporter = new InMemorySpanExporter();

const ctx = (runId: string) => ({ runId, conversationId: 'c1', correlationId: 'm1', causationId: null });
const admitted = (runId: string) =>
  makeEvent(
    'run.admitted',
    ctx(runId),
    'admission',
    {
      message: { messageId: 'm1', clientMessageId: 'cm1', content: 'hello', contentSha256: 'a'.repeat(64) },
      grant: { tools: ['list_funds'], model: 'm' },
      limits: { maxModelRequests: 2, maxToolCalls: 2, deadlineAt: new Date(Date.now() + 60_000).toISOString() },
    },
    new Date(),
  );
const cancel = (runId: string, key: string) => makeEvent('run.cancel.requested', ctx(runId), key, { requestedBy: null, reason: 'test' }, new Date());

/** The `traceparent` of a span context (W3C: version, trace id, span id, flags). */
const traceparentOf = (s: SpanContext) => `00-${s.traceId}-${s.spanId}-0${s.traceFlags}`;

const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });

/** Registers the SDK pieces a service's start registers (libs/service-kit tracing.ts): tracing on. */
function tracingOn(): void {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
}
/** Back to the API's no-ops: tracing off, as in a process that did not start the SDK. */
function tracingOff(): void {
  trace.disable();
  propagation.disable();
  context.disable();
}
/** The spans finished so far. */
async function finished() {
  await provider.forceFlush();
  return exporter.getFinishedSpans();
}

beforeAll(tracingOn);
afterAll(tracingOff);

it('injects the active span as traceparent and extracts it again; writes nothing without one', async () => {
  const none = natsHeaders();
  expect(injectTraceContext(none)).toBe(false);
  expect(none.keys()).toEqual([]);
  const sent = await inSpan('request', {}, async (span) => {
    const h = natsHeaders();
    expect(injectTraceContext(h)).toBe(true);
    expect(h.get('traceparent')).toBe(traceparentOf(span.spanContext()));
    return { h, sc: span.spanContext() };
  });
  const remote = trace.getSpanContext(extractTraceContext(sent.h));
  expect(remote).toMatchObject({ traceId: sent.sc.traceId, spanId: sent.sc.spanId, isRemote: true });
  expect(trace.getSpanContext(extractTraceContext(natsHeaders()))).toBeUndefined();
  expect(trace.getSpanContext(extractTraceContext(undefined))).toBeUndefined();
});

describeEachNatsServer(servers, (server) => {
  let log: EventLog;
  beforeAll(async () => {
    log = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, stream: `RPTEST_TR_${tag}`, prefix: `ttr${tag}` });
  });
  afterAll(async () => {
    await log.destroyStream();
    await log.close();
  });

  it('with tracing off an append stores no traceparent; on, an append outside any trace starts one of its own', async () => {
    tracingOff();
    let seq: number;
    try {
      ({ seq } = await log.append(admitted(`r0${tag}`), 0));
    } finally {
      tracingOn();
    }
    expect((await log.readMessage({ seq }))!.header?.get('traceparent') ?? '').toBe('');
    exporter.reset();
    ({ seq } = await log.append(admitted(`r9${tag}`), 0));
    const [span] = await finished();
    expect(span!.parentSpanContext).toBeUndefined();
    expect((await log.readMessage({ seq }))!.header?.get('traceparent')).toBe(traceparentOf(span!.spanContext()));
  });

  it("an append inside a trace runs in an 'append' span whose context its message carries; a consumer's handler continues it", async () => {
    const runId = `r1${tag}`;
    exporter.reset();
    const { root, result } = await inSpan('request', {}, async (span) => ({
      root: span.spanContext(),
      result: await log.append(admitted(runId), 0),
    }));
    const appendSpan = (await finished()).find((s) => s.name === 'append run.admitted')!;
    expect(appendSpan.spanContext().traceId).toBe(root.traceId);
    expect(appendSpan.parentSpanContext?.spanId).toBe(root.spanId);
    expect(appendSpan.attributes).toMatchObject({
      'runplane.run_id': runId,
      'runplane.seq': result.seq,
      'messaging.destination.name': result.stored.subject,
    });
    const stored = await log.readMessage({ seq: result.seq });
    expect(stored!.header?.get('traceparent')).toBe(traceparentOf(appendSpan.spanContext()));

    // delivered: the handler's active context is the append's span (remote), and its own spans are its children
    let seenInHandler: SpanContext | undefined;
    const consumer = new DurableConsumer(
      log,
      { durable: `traced-${tag}`, filter: ownerFilter(log.space, 'admission') },
      async (s) => {
        if (s.event.runId !== runId) return;
        seenInHandler = trace.getActiveSpan()?.spanContext();
        tracer().startSpan('work').end();
      },
      { warn: () => undefined, error: () => undefined },
    );
    await consumer.start();
    const deadline = Date.now() + 10_000;
    while (!seenInHandler && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await consumer.stop();
    expect(seenInHandler).toMatchObject({ traceId: root.traceId, spanId: appendSpan.spanContext().spanId, isRemote: true });
    const work = (await finished()).find((s) => s.name === 'work')!;
    expect(work.spanContext().traceId).toBe(root.traceId);
    expect(work.parentSpanContext?.spanId).toBe(appendSpan.spanContext().spanId);
  });

  it('every message of a batch carries the trace context of the batch', async () => {
    const runId = `r2${tag}`;
    exporter.reset();
    await log.append(admitted(runId), 0);
    const root = await inSpan('request', {}, async (span) => {
      const last = await log.lastOf(runId, 'admission');
      await log.appendBatch([{ event: cancel(runId, 'a'), expectedLastSubjectSeq: last!.seq }, { event: cancel(runId, 'b') }]);
      return span.spanContext();
    });
    const stored = (await log.readRun(runId, 1, { headers: true })).slice(1);
    expect(stored).toHaveLength(2);
    for (const s of stored) {
      const msg = await log.readMessage({ seq: s.seq });
      const parent = trace.getSpanContext(extractTraceContext(msg!.header));
      expect(parent?.traceId).toBe(root.traceId);
      expect((await finished()).map((x) => x.spanContext().spanId)).toContain(parent?.spanId);
    }
  });
});
