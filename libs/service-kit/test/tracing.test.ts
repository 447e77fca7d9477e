/**
 * Tracing of a service process (libs/service-kit tracing.ts, docs/operations.md#traces): off unless
 * the standard `OTEL_*` variables ask for traces, then the SDK exports over OTLP to the endpoint
 * they name, and stopping flushes the spans still buffered.
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { trace } from '@opentelemetry/api';
import { startTracing, stopTracing, tracingRequested } from '../src/tracing.js';

describe('tracingRequested', () => {
  it.each([
    [{}, false],
    [{ OTEL_SERVICE_NAME: 'x' }, false],
    [{ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }, false],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }, true],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' }, true],
    [{ OTEL_TRACES_EXPORTER: 'otlp' }, true],
    [{ OTEL_TRACES_EXPORTER: 'console' }, true],
    [{ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'true' }, false],
  ] as [NodeJS.ProcessEnv, boolean][])('%j -> %s', (env, on) => {
    expect(tracingRequested(env)).toBe(on);
  });
});

describe('startTracing', () => {
  const saved = { ...process.env };
  afterAll(() => {
    process.env = saved;
  });

  it('starts nothing when not asked: spans stay no-ops', async () => {
    expect(await startTracing('svc', {})).toBe(false);
    const span = trace.getTracer('t').startSpan('x');
    expect(span.isRecording()).toBe(false);
    span.end();
  });

  it('exports over OTLP to the configured endpoint as the service, and flushes when stopped', async () => {
    const bodies: {
      resourceSpans: { resource: { attributes: { key: string; value: { stringValue?: string } }[] }; scopeSpans: { spans: { name: string }[] }[] }[];
    }[] = [];
    const receiver = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (req.url === '/v1/traces') bodies.push(JSON.parse(Buffer.concat(chunks).toString('utf8')) as (typeof bodies)[number]);
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    try {
      Object.assign(process.env, {
        OTEL_TRACES_EXPORTER: 'otlp',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`,
        // longer than the test: only the flush at stop can export the span
        OTEL_BSP_SCHEDULE_DELAY: '60000',
      });
      expect(await startTracing('svc-under-test')).toBe(true);
      const span = trace.getTracer('t').startSpan('recorded');
      expect(span.isRecording()).toBe(true);
      span.end();
      expect(bodies).toHaveLength(0);
      await stopTracing();
      const spans = bodies.flatMap((b) => b.resourceSpans);
      expect(spans.flatMap((rs) => rs.scopeSpans.flatMap((ss) => ss.spans.map((s) => s.name)))).toEqual(['recorded']);
      expect(spans[0]!.resource.attributes.find((a) => a.key === 'service.name')?.value.stringValue).toBe('svc-under-test');
    } finally {
      await stopTracing();
      await new Promise((r) => receiver.close(r));
    }
  });
});
