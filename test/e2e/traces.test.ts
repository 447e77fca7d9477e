/**
 * OpenTelemetry traces on the real stack (docs/operations.md#traces): every service process
 * exports its spans over OTLP/HTTP (JSON) to a receiver this test serves, configured only by the
 * standard `OTEL_*` variables. One Run ("What does DIA hold?": three model turns, two tool calls)
 * is one trace, from admission's POST to the lifecycle's settlement, carried between services by
 * the `traceparent` header of each NATS message: spans of admission, runtime, tools, publication,
 * lifecycle, recovery and projector share its trace id, every span's parent is in the trace, and
 * the model requests carry their token counts, and admission's SQL read of the quota usage is a
 * span of the POST. The live deltas of the streamed answer (core NATS
 * publishes, not stored) carry the Run's `traceparent` too.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

/** One span as the receiver keeps it. */
interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  attributes: Record<string, unknown>;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: OtlpValue[] };
}
interface OtlpKeyValue {
  key: string;
  value: OtlpValue;
}

const valueOf = (v: OtlpValue): unknown =>
  v.stringValue ??
  (v.intValue !== undefined ? Number(v.intValue) : undefined) ??
  v.doubleValue ??
  v.boolValue ??
  (v.arrayValue ? (v.arrayValue.values ?? []).map(valueOf) : undefined);
const attributesOf = (kvs: OtlpKeyValue[] | undefined) => Object.fromEntries((kvs ?? []).map((kv) => [kv.key, valueOf(kv.value)]));

const spans: ReceivedSpan[] = [];
let receiver: Server;
let t: TestStack;

/** An OTLP/HTTP receiver for JSON-encoded trace exports (`POST /v1/traces`). */
function startReceiver(): Promise<string> {
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/v1/traces') {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
          resourceSpans?: {
            resource?: { attributes?: OtlpKeyValue[] };
            scopeSpans?: { spans?: { traceId: string; spanId: string; parentSpanId?: string; name: string; attributes?: OtlpKeyValue[] }[] }[];
          }[];
        };
        for (const rs of body.resourceSpans ?? []) {
          const service = String(attributesOf(rs.resource?.attributes)['service.name']);
          for (const ss of rs.scopeSpans ?? [])
            for (const s of ss.spans ?? [])
              spans.push({
                service,
                traceId: s.traceId,
                spanId: s.spanId,
                parentSpanId: s.parentSpanId ?? '',
                name: s.name,
                attributes: attributesOf(s.attributes),
              });
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  return new Promise((resolve) => receiver.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(receiver.address() as AddressInfo).port}`)));
}

beforeAll(async () => {
  const endpoint = await startReceiver();
  t = await startTestStack('traces', {
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
    OTEL_BSP_SCHEDULE_DELAY: '200',
    // a quota: admission reads the principal's usage from PostgreSQL before it admits (an SQL span in the POST)
    RUNPLANE_QUOTA_RUNS_PER_HOUR: '1000',
  });
}, 120_000);
afterAll(async () => {
  await t?.stop();
  await new Promise((r) => receiver?.close(r));
});

const SERVICES = ['admission', 'runtime', 'tools', 'publication', 'lifecycle', 'recovery', 'projector'];

describe('traces', () => {
  it('one Run is one trace from the POST to the settlement, with spans from every service', async () => {
    // the live deltas the runtime publishes while the answer streams (`<prefix>.live.<runId>.delta`)
    const deltaTraceparents: string[] = [];
    const deltas = t.log.nc.subscribe(`${t.env.RUNPLANE_SUBJECT_PREFIX}.live.*.delta`, {
      callback: (_err, msg) => {
        deltaTraceparents.push(msg?.headers?.get('traceparent') ?? '');
      },
    });
    await t.log.nc.flush();
    const { body } = await t.client.postMessage('conv-traces', { clientMessageId: `traces-${t.tag}`, content: 'What does DIA hold?' });
    const events = await t.waitForSettlement(body.runId, 60_000);
    expect(events.some((e) => e.event.type === 'run.settled')).toBe(true);

    const ofRun = () => spans.filter((s) => s.attributes['runplane.run_id'] === body.runId);
    // the trace of the Run: the one its admission's append is in
    const traceId = await eventually(
      async () => ofRun().find((s) => s.service === 'admission' && s.name === 'append run.admitted')?.traceId,
      20_000,
      'the span of the run.admitted append',
    );
    const inTrace = await eventually(
      async () => {
        const found = spans.filter((s) => s.traceId === traceId);
        const services = new Set(found.map((s) => s.service));
        const ids = new Set(found.map((s) => s.spanId));
        const settled = found.some((s) => s.service === 'lifecycle' && s.name === 'append run.settled');
        const projected = found.some((s) => s.service === 'projector' && s.name === 'projector apply');
        // every span's parent has arrived too (the exporters flush every 200 ms)
        const complete = found.every((s) => s.parentSpanId === '' || ids.has(s.parentSpanId));
        return SERVICES.every((s) => services.has(s)) && settled && projected && complete ? found : null;
      },
      30_000,
      'spans of every service in the Run trace',
    );
    const names = (service: string) => [...new Set(inTrace.filter((s) => s.service === service).map((s) => s.name))].sort();
    process.stdout.write(`trace ${traceId}: ${inTrace.length} spans\n${SERVICES.map((s) => `  ${s}: ${names(s).join(', ')}`).join('\n')}\n`);

    // one root: admission's POST, a server span
    const roots = inTrace.filter((s) => s.parentSpanId === '');
    expect(roots.map((s) => [s.service, s.name])).toEqual([['admission', 'POST /v1/conversations/:conversationId/messages']]);
    // every span naming this Run is in its trace
    expect(ofRun().filter((s) => s.traceId !== traceId)).toEqual([]);
    // the handlers continue the trace of the event they handle
    expect(names('runtime')).toEqual(expect.arrayContaining(['handle run.admitted', 'handle tool.call.receipt', 'append model.turn.requested']));
    expect(names('tools')).toEqual(expect.arrayContaining(['handle tool.call.proposed']));
    expect(names('publication')).toEqual(expect.arrayContaining(['handle run.execution.finished']));
    expect(names('lifecycle')).toEqual(expect.arrayContaining(['append run.settled']));
    expect(names('recovery')).toEqual(expect.arrayContaining(['handle run.admitted']));
    // a handler's parent is the append of the event it handles, in another service
    const byId = new Map(inTrace.map((s) => [s.spanId, s]));
    const handleAdmitted = inTrace.find((s) => s.service === 'runtime' && s.name === 'handle run.admitted')!;
    expect(byId.get(handleAdmitted.parentSpanId)).toMatchObject({ service: 'admission', name: 'append run.admitted' });
    // three model requests, each with its token counts
    const chats = inTrace.filter((s) => s.service === 'runtime' && s.name.startsWith('chat '));
    expect(chats).toHaveLength(3);
    for (const c of chats) {
      expect(c.attributes).toMatchObject({ 'gen_ai.operation.name': 'chat', 'gen_ai.request.model': expect.any(String) });
      expect(c.attributes['gen_ai.usage.input_tokens']).toEqual(expect.any(Number));
      expect(c.attributes['gen_ai.usage.output_tokens']).toEqual(expect.any(Number));
    }
    expect(inTrace.filter((s) => s.name.startsWith('execute_tool '))).toHaveLength(2);
    // admission's SQL read (the quota usage, from the Run projections) is a client span of the POST
    const post = roots[0]!;
    const sql = inTrace.filter((s) => s.service === 'admission' && s.attributes['db.system.name'] === 'postgresql');
    expect(sql.map((s) => s.name)).toEqual(['select quota usage']);
    expect(sql[0]!.parentSpanId).toBe(post.spanId);
    expect(sql[0]!.attributes).toMatchObject({ 'db.operation.name': 'select quota usage', 'db.namespace': expect.any(String) });
    // every live delta carries a traceparent of the Run's trace (W3C: 00-<trace id>-<span id>-<flags>)
    deltas.unsubscribe();
    expect(deltaTraceparents.length).toBeGreaterThan(0);
    expect(deltaTraceparents.map((tp) => tp.split('-')[1])).toEqual(deltaTraceparents.map(() => traceId));
  }, 120_000);
});
