/**
 * The machine-readable contract of the Run events for downstream consumers (docs/consumers.md): one JSON
 * Schema (2020-12) document, docs/contract/events.schema.json, with a `$defs` entry per event type
 * (the envelope with that type's `type`, `owner`, `schemaVersion` and `data`), `$defs.Envelope`
 * (any event, of a type this contract knows or a newer one) and a `oneOf` over the types. It is
 * generated from the zod catalogue by zod's own JSON Schema conversion (the one catalog-doc.ts
 * uses), so it cannot drift from the code; a test fails when the committed file is stale, and
 * another when it is not an additive change of the last released one (docs/contract/README.md).
 */
import { z } from 'zod';
import { EnvelopeFields, EventCatalog, EventSchemas, EventTypes, subjectTokensOfType, ownersOfType, type EventType } from './events.js';
import { EventPurposes } from './catalog-doc.js';

/** The JSON Schema dialect of the contract. */
export const JSON_SCHEMA_DIALECT = 'https://json-schema.org/draft/2020-12/schema';

/** A JSON Schema (or any JSON object), as parsed from JSON. */
export type JsonSchema = { [keyword: string]: unknown };

/** The contract document: a `$defs` entry per event type and `Envelope`, and a `oneOf` over the types. */
export interface EventsJsonSchema extends JsonSchema {
  $schema: string;
  title: string;
  description: string;
  oneOf: { $ref: string }[];
  $defs: Record<string, JsonSchema>;
}

/** The `$defs` entry that describes the envelope alone (any event, whatever its type). */
export const ENVELOPE_DEF = 'Envelope';

/** Keywords whose values are data, not schemas: left as they are. */
const DATA_KEYWORDS = new Set(['const', 'enum', 'default', 'examples']);

/**
 * Objects open to properties they do not name: zod's output schemas close every object
 * (`additionalProperties: false`), but an additive change adds properties, and a consumer that
 * validates with this contract must accept events written by a newer producer. The contract
 * document and the event catalogue's schemas (docs/event-catalog.md) both go through it.
 * @param node a JSON Schema (or any part of one); returned as a new value, `node` is not changed.
 */
export function openObjects(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(openObjects);
  if (node === null || typeof node !== 'object') return node;
  const out: JsonSchema = {};
  for (const [keyword, value] of Object.entries(node)) {
    if (keyword === 'additionalProperties' && value === false) continue;
    out[keyword] = DATA_KEYWORDS.has(keyword) ? value : openObjects(value);
  }
  return out;
}

/**
 * One zod schema as a self-contained JSON Schema (no `$schema`, no `$defs`).
 * @throws Error when zod needs `$defs` for it (a recursive schema): the contract inlines every sub-schema.
 */
function converted(schema: z.ZodType): JsonSchema {
  const { $schema: _dialect, ...json } = z.toJSONSchema(schema, { io: 'output', unrepresentable: 'any' }) as JsonSchema;
  if ('$defs' in json || 'definitions' in json)
    throw new Error('a recursive event schema needs shared $defs: the contract generator does not support them');
  return openObjects(json) as JsonSchema;
}

/** The subject tokens an event of `type` may stand on: its subject owner's, and any former owner's (older logs). */
export function contractSubjectTokens(type: EventType): string[] {
  return [...new Set([...subjectTokensOfType(type), ...ownersOfType(type).slice(1)])];
}

/** The description of one event type's definition: what it means, who records it, where it stands. */
function describeType(type: EventType): string {
  const entry = EventCatalog[type];
  const subjects = contractSubjectTokens(type)
    .map((token) => `\`<prefix>.run.<runId>.${token}.<partition>\``)
    .join(', ');
  return [EventPurposes[type], `Recorded by ${entry.owner}; schemaVersion ${entry.version}; on ${subjects}.`].filter(Boolean).join(' ');
}

/**
 * The JSON Schema of one event type: the envelope with its type's `type`, `owner`,
 * `schemaVersion` and `data`, objects open (see docs/contract/README.md), 2020-12 keywords only
 * (those it uses mean the same in draft-07, which the AsyncAPI document relies on).
 */
export function eventJsonSchema(type: EventType): JsonSchema {
  return { title: type, description: describeType(type), ...converted(EventSchemas[type]) };
}

/** The envelope alone, any `type` and any `data`: for a consumer that must pass over types newer than its contract. */
export function envelopeJsonSchema(): JsonSchema {
  return {
    title: ENVELOPE_DEF,
    description:
      'The envelope every event travels in, whatever its type: a consumer that meets a type it does not know (a newer producer) ' +
      'can still read its id, Run, owner and position, and pass over it.',
    ...converted(EnvelopeFields.extend({ type: z.string().min(1), data: z.unknown() })),
  };
}

/** The whole contract (docs/contract/events.schema.json). */
export function eventsJsonSchema(): EventsJsonSchema {
  const $defs: Record<string, JsonSchema> = { [ENVELOPE_DEF]: envelopeJsonSchema() };
  for (const t of EventTypes) $defs[t] = eventJsonSchema(t);
  return {
    $schema: JSON_SCHEMA_DIALECT,
    title: 'Runplane Run event',
    description:
      'Every fact Runplane records on its Run stream, one definition per event type (`$defs.<type>`), generated from the zod ' +
      'catalogue (libs/contracts/src/events.ts). Types change only additively (new optional properties, new enum values, new ' +
      'types); an incompatible change is a new event type. Consumers ignore properties, enum values and types they do not ' +
      'know (validate the types you handle against their definition, anything else against `$defs.Envelope`). See ' +
      'docs/contract/README.md.',
    oneOf: EventTypes.map((t) => ({ $ref: `#/$defs/${t}` })),
    $defs,
  };
}

/** The contract as written to docs/contract/events.schema.json (2-space JSON, trailing newline). */
export function renderEventsJsonSchema(): string {
  return `${JSON.stringify(eventsJsonSchema(), null, 2)}\n`;
}
