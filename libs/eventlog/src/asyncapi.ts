/**
 * The AsyncAPI 3.0 description of the Run stream for downstream consumers (docs/consumers.md),
 * docs/contract/asyncapi.json: the NATS server and the consumer's credentials, one channel per
 * owner subject `<prefix>.run.<runId>.<owner>.<partition>` (subjects.ts) with the event types that
 * stand on it, one message per event type whose payload is that type's JSON Schema
 * (`eventsJsonSchema()`, the same definitions as docs/contract/events.schema.json), the headers
 * the event log stores with every event and the rule that tells a fact from a foreign message
 * (`verifyStored`). Generated, like deploy/nats/accounts.conf, for the deployed subject space; a
 * test parses it with `@asyncapi/parser` and fails when the committed file is stale.
 */
import { ENVELOPE_DEF, EventCatalog, EventTypes, Owner, contractSubjectTokens, eventsJsonSchema, type JsonSchema } from '@runplane/contracts';
import { DEPLOYED_SPACE } from './bus.js';
import {
  BATCH_ID,
  BATCH_SEQUENCE,
  DEFAULT_DUPLICATE_WINDOW_MS,
  EXPECTED_LAST_SUBJECT_SEQUENCE,
  EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT,
  MAX_EARLIER_SEQS,
} from './event-log.js';
import { DEFAULT_DOWNSTREAM_CONSUMERS, DOWNSTREAM_CONSUMER_PREFIX, DOWNSTREAM_PRIORITY_GROUP } from './bus.js';
import { inboxPrefixOf } from './inbox.js';
import { KEY_ID_HEADER, SIGNATURE_HEADER, SIGNER_HEADER } from './signing.js';
import { MAX_PARTITIONS, PARTITIONS_METADATA_KEY, type SubjectSpace } from './subjects.js';

/** The AsyncAPI version of the document. */
export const ASYNCAPI_VERSION = '3.0.0';

/** What each owner's subject holds, for its channel's description. */
const OWNER_SUBJECT: Record<Owner, string> = {
  admission: 'Admission records the Run admitted, cancel intents, wait answers and reconciliations of unknown tool outcomes here.',
  runtime:
    "The runtime records model turns, streamed paragraphs, tool proposals, waits, child requests and the end of execution here; recovery's fence and park markers close it.",
  tools: "The tools service records dispatches and receipts of tool calls here (K5); recovery's fence marker closes it.",
  publication: 'Publication records committed answer passages and the published answer here.',
  recovery:
    'Recovery recorded lease grants here in older logs, before the runtime recorded its own (its fences stand on the executor subjects they close).',
  lifecycle: "The lifecycle records the Run's one settlement here (K9), and the settlements of its child Runs.",
};

const capitalised = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);

/** The headers the event log publishes with every event; the server stores them with the message. */
function headersSchema(): JsonSchema {
  return {
    type: 'object',
    description:
      'NATS headers stored with every event: JetStream keeps the headers an append was published with. They are what ' +
      '`verifyStored` checks (a message without a verified back-link is not a fact).',
    properties: {
      'Nats-Msg-Id': {
        type: 'string',
        format: 'uuid',
        description:
          `The event's \`eventId\`: JetStream drops a repeat of it inside the stream's duplicate window (${DEFAULT_DUPLICATE_WINDOW_MS / 1000} s ` +
          'by default). Deterministic per decision (UUID v5 of Run, type and decision key), so a consumer de-duplicates by it.',
      },
      [EXPECTED_LAST_SUBJECT_SEQUENCE]: {
        type: 'string',
        pattern: '^[0-9]{1,15}$',
        description:
          'The conditional append the server checked: the stream sequence of the previous event on this subject (0: the first). ' +
          "Below the message's own sequence and equal to the payload's `prevSeq` when it has one. On every event except a later " +
          'event of its subject inside an atomic batch (that one links by `prevInBatch`).',
      },
      [BATCH_ID]: {
        type: 'string',
        description: "Present when the event was stored by an atomic batch (one decision's events, nats-server 2.12.1+).",
      },
      [BATCH_SEQUENCE]: {
        type: 'string',
        pattern: '^[0-9]{1,4}$',
        description: "The event's 1-based position in its atomic batch; with `prevInBatch` in the payload it gives the back-link inside the batch.",
      },
      [EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT]: {
        type: 'string',
        description: 'Never sent by the event log: a message that carries it is not a fact of its subject.',
      },
      [SIGNER_HEADER]: {
        type: 'string',
        enum: [...Owner.options],
        description:
          'The owner whose Ed25519 key signed the event (a writer with its key: `RUNPLANE_SIGNING_KEY_FILE`). A reader holding the ' +
          "deployment's public keys (`RUNPLANE_SIGNING_PUBLIC_KEYS_FILE`) refuses the event unless it is the owner of its type.",
      },
      [KEY_ID_HEADER]: {
        type: 'string',
        pattern: '^[0-9a-f]{16}$',
        description:
          "The signer's key: the first 16 hex digits of the SHA-256 of the raw 32-byte public key (several per owner while a key rotates).",
      },
      [SIGNATURE_HEADER]: {
        type: 'string',
        contentEncoding: 'base64',
        description:
          'Ed25519 signature (base64) over the UTF-8 lines `runplane-event-signature-v1`, the subject, the event id (`Nats-Msg-Id`) and ' +
          'the lowercase hex SHA-256 of the payload bytes, joined by `\\n` (libs/eventlog signing.ts `signedBytes`).',
      },
      traceparent: {
        type: 'string',
        pattern: '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$',
        description:
          'W3C Trace Context of the append that stored the event (OpenTelemetry), present only when the writer has tracing on: ' +
          "a consumer that traces continues the Run's trace from it. Not part of the fact; never checked by `verifyStored`.",
      },
      tracestate: {
        type: 'string',
        description: 'W3C Trace Context vendor state, beside `traceparent` when the trace has one.',
      },
    },
    required: ['Nats-Msg-Id'],
  };
}

/** The rule a consumer applies to each message before treating it as a fact (`verifyStored`, docs/event-log.md). */
function verificationRule(space: SubjectSpace): string {
  return (
    'A message is a fact only when (1) its payload is valid against its type and its subject names its Run and the owner the ' +
    "type stands on (`subjectTokenOf`), (2) the subject's partition token is the Run's partition (FNV-1a 32-bit of the runId's " +
    `UTF-8 bytes, modulo the stream's \`${PARTITIONS_METADATA_KEY}\` metadata), and (3) its back-link is verified: a stored ` +
    `\`${EXPECTED_LAST_SUBJECT_SEQUENCE}\` below its own stream sequence (equal to \`prevSeq\` when present, without ` +
    `\`${EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT}\`), or, for a later event of its subject in an atomic batch, \`${BATCH_ID}\` and a ` +
    `\`${BATCH_SEQUENCE}\` above its \`prevInBatch\`; where the reader holds the deployment's signing public keys, also (4) its ` +
    `\`${SIGNATURE_HEADER}\` verifies with the \`${KEY_ID_HEADER}\` key of \`${SIGNER_HEADER}\`, the owner of its type. Anything else on \`${space.prefix}.run.>\` is a forgery or a replay: skip ` +
    'it (libs/eventlog `verifyStored` implements this rule).'
  );
}

/**
 * The AsyncAPI 3.0 document of the Run stream of a subject space (default: the deployed one,
 * stream `RUNPLANE`, prefix `rp`, as in deploy/). Channel ids are the owners; message ids the
 * event types; `components.schemas` holds every definition of `eventsJsonSchema()` unchanged.
 */
export function asyncApiDocument(space: SubjectSpace = DEPLOYED_SPACE): JsonSchema {
  const contract = eventsJsonSchema();
  const channels: Record<string, JsonSchema> = {};
  const operations: Record<string, JsonSchema> = {};
  for (const owner of Owner.options) {
    const types = EventTypes.filter((t) => contractSubjectTokens(t).includes(owner));
    channels[owner] = {
      address: `{prefix}.run.{runId}.${owner}.{partition}`,
      title: `${capitalised(owner)} subject of a Run`,
      description: `The facts of one Run on its ${owner} subject, in stream order. ${OWNER_SUBJECT[owner]}`,
      parameters: {
        prefix: { $ref: '#/components/parameters/prefix' },
        runId: { $ref: '#/components/parameters/runId' },
        partition: { $ref: '#/components/parameters/partition' },
      },
      messages: Object.fromEntries(types.map((t) => [t, { $ref: `#/components/messages/${t}` }])),
    };
    operations[`receive${capitalised(owner)}Events`] = {
      action: 'receive',
      channel: { $ref: `#/channels/${owner}` },
      title: `Follow the ${owner} subjects`,
      summary: `Receive the events on the ${owner} subjects of every Run (\`${space.prefix}.run.*.${owner}.*\`).`,
      description:
        `Connect as the NATS user of your own durable and use that durable pull consumer on stream \`${space.stream}\`, ` +
        `\`${DOWNSTREAM_CONSUMER_PREFIX}<name>\` (default names ${DEFAULT_DOWNSTREAM_CONSUMERS.join(', ')}), which the admin provisions: ` +
        `it delivers every Run subject (\`${space.prefix}.run.>\`) from the stream's first event, explicit ack, and every pull must name ` +
        `its priority group \`${DOWNSTREAM_PRIORITY_GROUP}\` (a pull that does not is refused); a downstream user may not ` +
        `create, change or delete a consumer, so keep the messages on \`${space.prefix}.run.*.${owner}.*\` and acknowledge the rest ` +
        '(docs/consumers.md). Delivery is at least once: de-duplicate by `eventId`. ' +
        `Verify each message before using it. ${verificationRule(space)}`,
      messages: types.map((t) => ({ $ref: `#/channels/${owner}/messages/${t}` })),
    };
  }
  const messages: Record<string, JsonSchema> = {};
  for (const t of EventTypes) {
    const def = contract.$defs[t]!;
    messages[t] = {
      name: t,
      title: t,
      summary: `${t} (owner ${EventCatalog[t].owner}, schemaVersion ${EventCatalog[t].version})`,
      description: def.description,
      payload: { $ref: `#/components/schemas/${t}` },
      traits: [{ $ref: '#/components/messageTraits/storedEvent' }],
    };
  }
  return {
    asyncapi: ASYNCAPI_VERSION,
    info: {
      title: 'Runplane Run events',
      version: '1',
      description:
        `Every fact Runplane records is one JSON event on the JetStream stream \`${space.stream}\`, which captures ` +
        `\`${space.prefix}.run.>\`. Each Run has one subject per owner, \`${space.prefix}.run.<runId>.<owner>.<partition>\`: ` +
        `\`${space.prefix}.run.<runId>.>\` read in stream order is the whole Run; \`${space.prefix}.run.*.<owner>.*\` is one kind of fact ` +
        'of every Run. The stream sequence is the position of an event (what the HTTP event stream sends as its id). Payloads ' +
        'are the JSON Schemas of docs/contract/events.schema.json; types change only additively (new optional properties, new ' +
        'enum values, new types), so a consumer ignores what it does not know; an incompatible change is a new event type ' +
        '(docs/contract/README.md). Version 1: an additive extension of docs/contract/released/events.v1.schema.json.',
    },
    defaultContentType: 'application/json',
    servers: {
      nats: {
        host: '{host}',
        protocol: 'nats',
        title: 'NATS with JetStream',
        description:
          `A NATS server (2.12 or later, JetStream enabled) of the deployment, holding the stream \`${space.stream}\` (file storage, ` +
          `never purged; its partition count in the stream metadata \`${PARTITIONS_METADATA_KEY}\`). Messages are read with JetStream ` +
          'consumers (or direct gets), never published by a consumer.',
        variables: { host: { default: 'localhost:4222', description: 'host:port of a NATS server of the deployment (its NATS_URL).' } },
        security: [{ $ref: '#/components/securitySchemes/consumer' }],
      },
    },
    channels,
    operations,
    components: {
      schemas: { ...contract.$defs, StoredEventHeaders: headersSchema() },
      messages,
      parameters: {
        prefix: {
          description: `The first subject token of the deployment (\`RUNPLANE_SUBJECT_PREFIX\`, default \`${space.prefix}\`).`,
          default: space.prefix,
          examples: [space.prefix],
        },
        runId: {
          description: 'The Run id: 1-128 letters, digits, `_` or `-` (a name-based UUID for Runs Runplane admits).',
          examples: ['0b7c6f42-3f2a-5c8e-9d55-1d2a3b4c5d6e'],
        },
        partition: {
          description:
            `The Run's partition, a decimal number below the stream's partition count (1..${MAX_PARTITIONS}, metadata ` +
            `\`${PARTITIONS_METADATA_KEY}\`, ${space.partitions} in deploy/): FNV-1a (32-bit) of the runId's UTF-8 bytes modulo that count.`,
          examples: ['0', String(space.partitions - 1)],
        },
      },
      messageTraits: {
        storedEvent: {
          contentType: 'application/json',
          headers: { $ref: '#/components/schemas/StoredEventHeaders' },
          correlationId: { $ref: '#/components/correlationIds/admittedMessage' },
          description:
            `Every event travels in the same envelope (\`$defs.${ENVELOPE_DEF}\` of events.schema.json): \`eventId\`, \`type\`, ` +
            '`schemaVersion`, `runId`, `conversationId`, `owner`, `occurredAt`, `causationId`, `correlationId`, the back-link ' +
            `\`prevSeq\` (or \`prevInBatch\`), up to ${MAX_EARLIER_SEQS} read-ahead \`earlierSeqs\`, \`writer\` and \`data\`. ${verificationRule(space)}`,
        },
      },
      correlationIds: {
        admittedMessage: {
          description: "The admitted Message's id: the same on every event of the Run.",
          location: '$message.payload#/correlationId',
        },
      },
      securitySchemes: {
        consumer: {
          type: 'userPassword',
          description:
            'The downstream consumer role: one NATS user per durable consumer, named as it (`downstream-1`; its password is the ' +
            "deployment's, `RUNPLANE_NATS_PASSWORD_DOWNSTREAM_1` for deploy/nats/accounts.conf; `runplane up` prints them). It may read the stream " +
            `(stream info, direct and leader gets) and fetch from and acknowledge on its own provisioned durable pull consumer on \`${space.stream}\` ` +
            `(each named \`${DOWNSTREAM_CONSUMER_PREFIX}...\`; default ${DEFAULT_DOWNSTREAM_CONSUMERS.join(', ')}; \`runplane docs nats-auth --downstream\` renders others), ` +
            'no other one; it may publish nothing on the Run subjects. ' +
            `It receives replies only on its own inbox: its client sets the inbox prefix \`${inboxPrefixOf(DEFAULT_DOWNSTREAM_CONSUMERS[0]!)}\` (nats.js \`inboxPrefix\`); ` +
            '`_INBOX.>` is refused.',
        },
      },
    },
  };
}

/** The document as written to docs/contract/asyncapi.json (2-space JSON, trailing newline). */
export function renderAsyncApi(space: SubjectSpace = DEPLOYED_SPACE): string {
  return `${JSON.stringify(asyncApiDocument(space), null, 2)}\n`;
}
