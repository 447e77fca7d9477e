import { describe, expect, it } from '@jest/globals';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { z } from 'zod';
import {
  ENVELOPE_DEF,
  EventSchemas,
  EventTypes,
  compatibilityBreaks,
  describeBreak,
  eventsJsonSchema,
  makeEvent,
  renderEventsJsonSchema,
  type JsonSchema,
} from '@runplane/contracts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const contractDir = join(root, 'docs', 'contract');

/** The last released contract: the highest N of docs/contract/released/events.v<N>.schema.json. */
function lastReleased(): { file: string; schema: JsonSchema } {
  const releases = readdirSync(join(contractDir, 'released'))
    .map((f) => ({ f, n: Number(/^events\.v(\d+)\.schema\.json$/.exec(f)?.[1]) }))
    .filter((r) => Number.isInteger(r.n))
    .sort((a, b) => b.n - a.n);
  expect(releases.length).toBeGreaterThan(0);
  const file = join(contractDir, 'released', releases[0]!.f);
  return { file, schema: JSON.parse(readFileSync(file, 'utf8')) as JsonSchema };
}

const validator = () => {
  const ajv = new Ajv2020({ strict: true, allErrors: true, allowUnionTypes: true });
  addFormats.default(ajv);
  return ajv.compile(eventsJsonSchema());
};
const ctx = { runId: 'run-1', conversationId: 'conv-1', correlationId: 'msg-1', causationId: null };

describe('event contract (JSON Schema)', () => {
  it('docs/contract/events.schema.json is the schema generated from the zod catalogue (regenerate: npm run runplane --silent -- docs event-schema > docs/contract/events.schema.json)', () => {
    expect(readFileSync(join(contractDir, 'events.schema.json'), 'utf8')).toBe(renderEventsJsonSchema());
  });

  it('has one definition per event type, the envelope, and a oneOf over the types', () => {
    const doc = eventsJsonSchema();
    expect(doc.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
    expect(Object.keys(doc.$defs)).toEqual([ENVELOPE_DEF, ...EventTypes]);
    expect(doc.oneOf).toEqual(EventTypes.map((t) => ({ $ref: `#/$defs/${t}` })));
    // the same shapes zod checks, objects left open for additive changes
    for (const t of EventTypes) {
      const { $schema: _d, ...fromZod } = z.toJSONSchema(EventSchemas[t], { io: 'output', unrepresentable: 'any' }) as JsonSchema;
      const closed = JSON.stringify(fromZod).replaceAll(',"additionalProperties":false', '');
      const { title: _t, description: _x, ...def } = doc.$defs[t]!;
      expect(JSON.stringify(def)).toBe(closed);
    }
  });

  it('accepts the events Runplane makes, an event with a property it does not know, and refuses a wrong owner or data', () => {
    const validate = validator();
    const events = [
      makeEvent('run.execution.finished', ctx, 'k', { reason: 'answered', detail: '', answerTurn: 1 }, new Date(0)),
      makeEvent(
        'model.turn.completed',
        ctx,
        1,
        { turn: 1, content: 'text', toolCalls: [{ toolCallId: 'c1', name: 'list_funds', argumentsText: '{}' }], finishReason: 'stop', usage: null },
        new Date(0),
      ),
      makeEvent(
        'run.settled',
        ctx,
        's',
        {
          outcome: 'completed',
          reason: 'answered',
          passageIds: ['p1'],
          receipts: [{ toolCallId: 'c1', name: 'list_funds', status: 'succeeded' }],
          usage: { modelRequests: 1, toolCalls: 1, promptTokens: 10, completionTokens: 5 },
        },
        new Date(0),
      ),
    ];
    for (const e of events)
      expect({ type: e.type, valid: validate(e), errors: validate.errors ?? null }).toEqual({ type: e.type, valid: true, errors: null });
    const settled = events[2]!;
    expect(validate({ ...settled, addedLater: 1, data: { ...settled.data, alsoLater: 'x' } })).toBe(true);
    expect(validate({ ...settled, owner: 'runtime' })).toBe(false);
    expect(validate({ ...settled, data: { ...settled.data, outcome: 'done' } })).toBe(false);
    expect(validate({ ...settled, eventId: 'not-a-uuid' })).toBe(false);
  });

  it("reads any event's envelope, of a type newer than the contract too", () => {
    const ajv = new Ajv2020({ strict: true, allowUnionTypes: true });
    addFormats.default(ajv);
    ajv.addSchema(eventsJsonSchema(), 'contract');
    const envelope = ajv.getSchema(`contract#/$defs/${ENVELOPE_DEF}`)!;
    const e = makeEvent('run.execution.finished', ctx, 'k', { reason: 'answered', detail: '', answerTurn: 1 }, new Date(0));
    expect(envelope({ ...e, type: 'thing.added.later', data: { anything: true } })).toBe(true);
    expect(envelope({ ...e, runId: 'not a token' })).toBe(false);
  });

  it('changes the last released contract only additively (docs/contract/README.md)', () => {
    const { file, schema } = lastReleased();
    const breaks = compatibilityBreaks(schema, eventsJsonSchema()).map(describeBreak);
    expect({ file, breaks }).toEqual({ file, breaks: [] });
  });

  it('would refuse a property removed from a released event type, or one made required', () => {
    const { schema } = lastReleased();
    const current = structuredClone(eventsJsonSchema()) as JsonSchema;
    const settled = (current.$defs as Record<string, JsonSchema>)['run.settled']!;
    const data = (settled.properties as Record<string, JsonSchema>).data!;
    delete (data.properties as Record<string, JsonSchema>).reason;
    data.required = [...(data.required as string[]).filter((k) => k !== 'reason'), 'unanswered'];
    expect(compatibilityBreaks(schema, current).map(describeBreak)).toEqual([
      'run.settled data.reason: property-removed (reason removed)',
      'run.settled data.unanswered: newly-required (unanswered was optional, now required)',
    ]);
  });
});
