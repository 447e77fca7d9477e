import { describe, expect, it } from '@jest/globals';
import { compatibilityBreaks, describeBreak, type CompatBreak, type JsonSchema } from '@runplane/contracts';

/** A contract document with one event type whose `data` has these properties (required: `required`). */
const contract = (data: Record<string, JsonSchema>, required: string[] = [], more: Record<string, JsonSchema> = {}): JsonSchema => ({
  $defs: {
    'thing.happened': {
      type: 'object',
      properties: {
        eventId: { type: 'string', format: 'uuid' },
        type: { type: 'string', const: 'thing.happened' },
        schemaVersion: { type: 'number', const: 1 },
        data: { type: 'object', properties: data, required },
      },
      required: ['eventId', 'type', 'schemaVersion', 'data'],
    },
    ...more,
  },
});

const released = contract(
  {
    name: { type: 'string' },
    outcome: { type: 'string', enum: ['completed', 'failed'] },
    note: { type: 'string' },
    usage: { anyOf: [{ type: 'object', properties: { tokens: { type: 'integer' } }, required: ['tokens'] }, { type: 'null' }] },
    steps: {
      type: 'array',
      items: {
        oneOf: [
          { type: 'object', properties: { kind: { type: 'string', const: 'model' }, turn: { type: 'integer' } }, required: ['kind', 'turn'] },
          { type: 'object', properties: { kind: { type: 'string', const: 'tool' }, id: { type: 'string' } }, required: ['kind', 'id'] },
        ],
      },
    },
  },
  ['name', 'outcome', 'usage', 'steps'],
);
const data = (doc: JsonSchema) => ((doc.$defs as Record<string, JsonSchema>)['thing.happened']!.properties as Record<string, JsonSchema>).data!;
/** A copy of the released contract with its `data` schema changed by `change`. */
const changed = (change: (data: JsonSchema) => void): JsonSchema => {
  const doc = structuredClone(released);
  change(data(doc));
  return doc;
};
const props = (s: JsonSchema) => s.properties as Record<string, JsonSchema>;

/** given the released contract, when the current one is `current`, then these breaks (kind and where). */
const given = (before: JsonSchema) => ({
  when: (current: JsonSchema) => ({
    then: (expected: Pick<CompatBreak, 'definition' | 'path' | 'kind'>[]) =>
      expect(compatibilityBreaks(before, current).map(({ definition, path, kind }) => ({ definition, path, kind }))).toEqual(expected),
  }),
});

describe('compatibilityBreaks: the additive-only rule of the event contract', () => {
  it('finds nothing between a contract and itself', () => {
    given(released).when(structuredClone(released)).then([]);
  });

  it('accepts a new optional property, a new enum value, a new union member and a new event type', () => {
    const current = changed((d) => {
      props(d).cut = { type: 'boolean' };
      props(d).outcome!.enum = ['completed', 'failed', 'partial'];
      (props(d).steps!.items as JsonSchema).oneOf = [
        ...((props(d).steps!.items as JsonSchema).oneOf as JsonSchema[]),
        { type: 'object', properties: { kind: { type: 'string', const: 'wait' } }, required: ['kind'] },
      ];
    });
    (current.$defs as Record<string, JsonSchema>)['other.happened'] = { type: 'object', properties: {}, required: [] };
    given(released).when(current).then([]);
  });

  it('reports a removed property', () => {
    given(released)
      .when(changed((d) => delete props(d).note))
      .then([{ definition: 'thing.happened', path: 'data.note', kind: 'property-removed' }]);
  });

  it('reports a property that was optional and is now required, and a new required property', () => {
    given(released)
      .when(
        changed((d) => {
          props(d).extra = { type: 'string' };
          d.required = [...(d.required as string[]), 'note', 'extra'];
        }),
      )
      .then([
        { definition: 'thing.happened', path: 'data.note', kind: 'newly-required' },
        { definition: 'thing.happened', path: 'data.extra', kind: 'newly-required' },
      ]);
  });

  it('reports an enum value removed, and a const changed (a schemaVersion bumped in place)', () => {
    const current = changed((d) => (props(d).outcome!.enum = ['completed']));
    props((current.$defs as Record<string, JsonSchema>)['thing.happened']!).schemaVersion!.const = 2;
    given(released)
      .when(current)
      .then([
        { definition: 'thing.happened', path: 'schemaVersion', kind: 'value-removed' },
        { definition: 'thing.happened', path: 'data.outcome', kind: 'value-removed' },
      ]);
  });

  it('reports a changed type, also one that only became nullable, or no longer is', () => {
    given(released)
      .when(changed((d) => (props(d).name = { type: 'integer' })))
      .then([{ definition: 'thing.happened', path: 'data.name', kind: 'type-changed' }]);
    given(released)
      .when(changed((d) => (props(d).name = { type: ['string', 'null'] })))
      .then([{ definition: 'thing.happened', path: 'data.name', kind: 'type-changed' }]);
    given(released)
      .when(changed((d) => (props(d).usage = (props(d).usage!.anyOf as JsonSchema[])[0]!)))
      .then([{ definition: 'thing.happened', path: 'data.usage', kind: 'type-changed' }]);
  });

  it('looks inside nullable objects, array items and union members', () => {
    given(released)
      .when(
        changed((d) => {
          delete props((props(d).usage!.anyOf as JsonSchema[])[0]!).tokens;
          const tool = ((props(d).steps!.items as JsonSchema).oneOf as JsonSchema[])[1]!;
          props(tool).id = { type: 'number' };
        }),
      )
      .then([
        { definition: 'thing.happened', path: 'data.usage<object>.tokens', kind: 'property-removed' },
        { definition: 'thing.happened', path: 'data.steps[]<object{kind="tool"}>.id', kind: 'type-changed' },
      ]);
  });

  it('reports a removed union member', () => {
    given(released)
      .when(changed((d) => ((props(d).steps!.items as JsonSchema).oneOf = ((props(d).steps!.items as JsonSchema).oneOf as JsonSchema[]).slice(0, 1))))
      .then([{ definition: 'thing.happened', path: 'data.steps[]', kind: 'variant-removed' }]);
  });

  it('reports a removed event type', () => {
    given(contract({}, [], { 'old.happened': { type: 'object' } }))
      .when(contract({}))
      .then([{ definition: 'old.happened', path: '', kind: 'definition-removed' }]);
  });

  it('follows local $refs on both sides', () => {
    const withRef = (outcome: JsonSchema): JsonSchema => {
      const doc = changed((d) => (props(d).outcome = { $ref: '#/$defs/Outcome' }));
      (doc.$defs as Record<string, JsonSchema>).Outcome = outcome;
      return doc;
    };
    given(withRef({ type: 'string', enum: ['a', 'b'] }))
      .when(withRef({ type: 'string', enum: ['a'] }))
      .then([
        { definition: 'thing.happened', path: 'data.outcome', kind: 'value-removed' },
        { definition: 'Outcome', path: '', kind: 'value-removed' },
      ]);
  });

  it('says what broke in one line', () => {
    const [b] = compatibilityBreaks(
      released,
      changed((d) => delete props(d).note),
    );
    expect(describeBreak(b!)).toBe('thing.happened data.note: property-removed (note removed)');
  });
});
