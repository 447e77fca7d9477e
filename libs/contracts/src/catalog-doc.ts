/**
 * Renders the event catalogue for downstream consumers (docs/event-catalog.md) from the zod
 * schemas themselves, so the document cannot drift from the code (a test compares them).
 */
import { z } from 'zod';
import { EnvelopeFields, EventCatalog, EventTypes, ownersOfType, type EventType } from './events.js';
import { openObjects } from './event-schema.js';

/** The owner column: the owner, and any former owner whose events older logs still hold. */
function ownerText(t: EventType): string {
  const [owner, ...former] = ownersOfType(t);
  return former.length ? `${owner} (formerly ${former.join(', ')}: read in older logs)` : owner!;
}

/** What each event type means, in a sentence or two (the catalogue's and the contract's descriptions); not every type has one yet. */
export const EventPurposes: Partial<Record<EventType, string>> = {
  'run.admitted': "A Message and its Run were admitted (K1). The first and only event on the Run's `admission` subject.",
  'model.turn.requested':
    "The runtime is about to call the model for this turn (recorded before the call: it counts against the Run's model-request limit even if the call never returns).",
  'model.turn.completed':
    'The model answered the turn: its text, the tool calls it asked for (arguments as the model wrote them), finish reason and token usage.',
  'model.turn.failed': 'The model request failed (HTTP error, timeout, connection, invalid stream). The runtime does not retry it in this version.',
  'tool.call.proposed': 'One tool call the model asked for, proposed for execution (K5: proposed -> dispatched -> receipt).',
  'model.output.paragraph':
    'One finished paragraph of a model turn, recorded while the turn still streams (a blank line followed it), so the text survives a crash, cancel or failure; publication commits it as a passage at once.',
  'model.output.progress':
    'Evidence that a model turn is still streaming answer text inside an unfinished paragraph (no blank line yet): recorded at most once every min(5 s, noProgressSeconds/3) while new non-whitespace text arrives, so a long unbroken reply resets the no-progress clock (K7). Keep-alive chunks never cause one; short replies record none.',
  'run.execution.finished': 'The runtime stopped executing the Run, and why. It never settles the Run: the lifecycle does (K9).',
  'tool.call.dispatched':
    'The tools service is about to execute the call. A dispatch without a receipt means the outcome is unknown: it is never re-run (K5).',
  'tool.call.receipt': 'The outcome of one tool call: succeeded (result inline, or stored by reference with its sha256), failed, denied or unknown.',
  'passage.committed': 'One passage of the answer, committed with a version. Committed passages are never erased (K9).',
  'answer.published': 'Every passage of the answer is committed; lists them in order.',
  'lease.granted':
    "A runtime instance took the Run's execution lease at a fencing epoch (K6). The runtime records it itself, on its own subject, with its first event under that lease (one decision). Older logs hold it on the `recovery` subject, written by recovery when it saw the grant in the lease bucket; those are still read.",
  'run.settled':
    "The Run's one terminal fact (K9): completed, partial, failed, canceled or interrupted, with the reason, committed passages, receipts and usage.",
};

function schemaJson(schema: z.ZodType): string {
  const { $schema: _drop, ...json } = z.toJSONSchema(schema, { io: 'output', unrepresentable: 'any' }) as Record<string, unknown>;
  // open to properties they do not name, as the contract document's (an additive change adds them)
  return JSON.stringify(openObjects(json), null, 2);
}

/** The catalogue as Markdown. */
export function renderEventCatalog(): string {
  const lines: string[] = [
    '# Event catalogue',
    '',
    '<!-- Generated from libs/contracts/src/events.ts by `npm run runplane --silent -- docs event-catalog`; a test fails when it is stale. -->',
    '',
    'Every fact Runplane records is one JSON event on the JetStream stream, on the subject',
    '`<prefix>.run.<runId>.<owner>.<partition>` (default prefix `rp`). Reading `<prefix>.run.<runId>.>` in',
    "stream order gives the whole Run. The stream sequence is the event's position (the SSE `id` publication serves).",
    'Consumers must tolerate redelivery (at-least-once): `eventId` is deterministic and unique per fact.',
    '',
    'The machine-readable contract (JSON Schema of every type, AsyncAPI 3 document of the subjects) is in',
    '[contract/](contract/README.md). Evolution rule: `schemaVersion` is the event schema version',
    '(no separate `eventSchemaVersion`); a type changes only additively (new optional properties, new enum',
    'values), keeping its version; an incompatible change is a new event type. A test checks the schemas',
    'against the last released ones (docs/contract/released/).',
    '',
    '## Envelope (every event)',
    '',
    '| field | meaning |',
    '|---|---|',
    '| `eventId` | UUID v5 of (runId, type, decision key): the same decision retried gives the same id; also the `Nats-Msg-Id`. |',
    '| `type` | one of the types below |',
    '| `schemaVersion` | the event schema version of this type (additive changes keep it; see the rule above) |',
    '| `runId`, `conversationId` | the Run and its Conversation |',
    '| `owner` | the only service allowed to record this type; also the owner token of its subject (`<prefix>.run.<runId>.<owner>.<partition>`), except for `run.fenced`, which recovery records on the subject of the executor it fences (`runtime` or `tools`) |',
    '| `occurredAt` | ISO-8601 UTC time the owner recorded it |',
    '| `causationId` | the event (or HTTP request) that caused it |',
    '| `correlationId` | the admitted Message id: the same for every event of the Run |',
    "| `data` | the type's payload, below |",
    '',
    '```json',
    schemaJson(EnvelopeFields),
    '```',
    '',
    '## Types by owner',
    '',
    '| type | owner | version | what it means |',
    '|---|---|---|---|',
  ];
  for (const t of EventTypes) {
    const e = EventCatalog[t];
    lines.push(`| \`${t}\` | ${ownerText(t)} | ${e.version} | ${EventPurposes[t] ?? ''} |`);
  }
  for (const t of EventTypes) {
    const e = EventCatalog[t];
    lines.push(
      '',
      `## \`${t}\` (owner: ${ownerText(t)}, schemaVersion ${e.version})`,
      '',
      EventPurposes[t] ?? '',
      '',
      '```json',
      schemaJson(e.data),
      '```',
    );
  }
  return `${lines.join('\n')}\n`;
}
