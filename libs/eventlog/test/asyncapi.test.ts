import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DiagnosticSeverity, Parser } from '@asyncapi/parser';
import { EventCatalog, EventTypes, Owner, contractSubjectTokens, eventsJsonSchema, type JsonSchema } from '@runplane/contracts';
import { DEPLOYED_SPACE, asyncApiDocument, renderAsyncApi } from '@runplane/eventlog';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
/** An error-severity diagnostic (the parser's `DiagnosticSeverity` and its diagnostics' come from two copies of @stoplight/types: compared as numbers). */
const isError = (d: { severity: number }) => Number(d.severity) === Number(DiagnosticSeverity.Error);

describe('AsyncAPI description of the Run stream', () => {
  it('docs/contract/asyncapi.json is the description generated for the deployment (regenerate: npm run runplane --silent -- docs asyncapi > docs/contract/asyncapi.json)', () => {
    expect(readFileSync(join(root, 'docs', 'contract', 'asyncapi.json'), 'utf8')).toBe(renderAsyncApi(DEPLOYED_SPACE));
  });

  it('parses with @asyncapi/parser without an error, and reads back as the stream it describes', async () => {
    const { document, diagnostics } = await new Parser().parse(renderAsyncApi());
    const errors = diagnostics.filter(isError).map((d) => `${d.path.join('/')}: ${d.message}`);
    expect(errors).toEqual([]);
    expect(document).toBeDefined();
    expect(document!.version()).toBe('3.0.0');
    const server = document!.servers().get('nats')!;
    expect(server.protocol()).toBe('nats');
    expect(server.security().flatMap((requirements) => requirements.all().map((r) => r.scheme().type()))).toEqual(['userPassword']);

    for (const owner of Owner.options) {
      const channel = document!.channels().get(owner)!;
      expect(channel.address()).toBe(`{prefix}.run.{runId}.${owner}.{partition}`);
      expect(
        channel
          .parameters()
          .all()
          .map((p) => p.id()),
      ).toEqual(['prefix', 'runId', 'partition']);
      // every type that may stand on the subject, and no other (subjectTokenOf, former owners)
      const expected = EventTypes.filter((t) => contractSubjectTokens(t).includes(owner));
      expect(
        channel
          .messages()
          .all()
          .map((m) => m.name()),
      ).toEqual(expected);
      expect(
        channel
          .operations()
          .all()
          .map((o) => o.action()),
      ).toEqual(['receive']);
    }
    const settled = document!
      .messages()
      .all()
      .find((m) => m.name() === 'run.settled')!;
    expect(settled.payload()!.properties()!.owner!.const()).toBe('lifecycle');
    expect(Object.keys(settled.headers()!.properties()!)).toEqual(expect.arrayContaining(['Nats-Msg-Id', 'Nats-Expected-Last-Subject-Sequence']));
  });

  it('would report an error for a channel parameter its address does not name, or a payload that is no schema', async () => {
    const doc = asyncApiDocument() as { channels: Record<string, { address: string }>; components: { schemas: Record<string, JsonSchema> } };
    doc.channels.lifecycle!.address = '{prefix}.run.{runId}.lifecycle.{partitionNumber}';
    doc.components.schemas['run.settled']!.type = 'objekt';
    const { diagnostics } = await new Parser().parse(JSON.stringify(doc));
    const errors = diagnostics.filter(isError).map((d) => d.path.join('/'));
    expect(errors).toEqual(expect.arrayContaining(['channels/lifecycle/parameters', 'components/schemas/run.settled/type']));
  });

  it('carries the JSON Schema of every event type unchanged, one message each on its subjects', () => {
    const doc = asyncApiDocument();
    const components = doc.components as { schemas: Record<string, JsonSchema>; messages: Record<string, JsonSchema> };
    const contract = eventsJsonSchema();
    for (const [name, def] of Object.entries(contract.$defs)) expect(components.schemas[name]).toEqual(def);
    expect(Object.keys(components.messages)).toEqual(EventTypes);
    for (const t of EventTypes) {
      expect(components.messages[t]!.payload).toEqual({ $ref: `#/components/schemas/${t}` });
      expect(contractSubjectTokens(t).length).toBeGreaterThan(0);
    }
    // the fence stands on both executor subjects; the grant on the runtime's and, in older logs, recovery's
    const channels = doc.channels as Record<string, { messages: Record<string, unknown> }>;
    expect(Object.keys(channels).filter((c) => 'run.fenced' in channels[c]!.messages)).toEqual(['runtime', 'tools']);
    expect(Object.keys(channels).filter((c) => 'lease.granted' in channels[c]!.messages)).toEqual(['runtime', 'recovery']);
    expect(Object.keys(channels).filter((c) => 'run.settled' in channels[c]!.messages)).toEqual([EventCatalog['run.settled'].owner]);
  });

  it("uses only keywords that mean the same in JSON Schema draft-07 (AsyncAPI's schema format) as in 2020-12", () => {
    const only2020 = [
      '$defs',
      'prefixItems',
      'unevaluatedProperties',
      'unevaluatedItems',
      'dependentRequired',
      'dependentSchemas',
      '$dynamicRef',
      '$anchor',
    ];
    const found = new Set<string>();
    const walk = (node: unknown): void => {
      if (Array.isArray(node)) node.forEach(walk);
      else if (node && typeof node === 'object')
        for (const [k, v] of Object.entries(node)) {
          if (only2020.includes(k)) found.add(k);
          if (k !== 'const' && k !== 'enum' && k !== 'examples' && k !== 'default') walk(v);
        }
    };
    walk((asyncApiDocument().components as { schemas: unknown }).schemas);
    expect([...found]).toEqual([]);
  });
});
