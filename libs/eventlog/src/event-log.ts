import { randomUUID } from 'node:crypto';
import { createInbox, headers as natsHeaders, type Msg, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';
import { AbortError, BatchNotStored, isTransientNatsError, retry, untilProvisioned } from '@runplane/kit';
import {
  DeliverPolicy,
  JetStreamApiError,
  jetstream,
  StorageType,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
  type StoredMsg,
  type StreamInfo,
  type StreamUpdateConfig,
} from '@nats-io/jetstream';
import {
  BusConfig,
  AnyEventEnvelope,
  EventCatalog,
  natsServerList,
  Owner,
  RunEvent,
  subjectTokenOf,
  type StoredEvent,
  type Writer,
} from '@runplane/contracts';
import { DeliveryFeed } from './deliveries.js';
import { AppendConflict, AppendRefused, InvalidStoredEvent, issuesInBrief, RetryLater, StreamNotFound } from './errors.js';
import { natsUserOptions } from './inbox.js';
import { connectPatiently, STALE_CONNECTION_OPTIONS } from './stale-connection.js';
import { recordAppend } from './log-metrics.js';
import { injectTraceContext, inSpan, SpanKind } from './tracing.js';
import { natsTlsOptions } from './tls.js';
import { readPublicKeySet, readSigningKey, signatureHeaders, SignatureVerifier, SIGNATURE_HEADERS, type EventSigner } from './signing.js';
import { ed25519Fallback } from './ed25519.js';
import {
  allRunsFilter,
  DEFAULT_PARTITIONS,
  MAX_PARTITIONS,
  partitionOf,
  PARTITIONS_METADATA_KEY,
  runFilter,
  runSubject,
  type SubjectSpace,
} from './subjects.js';

export interface EventLogOptions {
  /** The NATS server, or every node of a cluster comma-separated (`NATS_URL`, contracts' `natsServerList`). */
  natsUrl: string;
  stream: string;
  prefix: string;
  /** Connection name shown by the NATS server (e.g. the service name). */
  name?: string;
  /** NATS user and password, when the server requires them. */
  user?: string;
  pass?: string;
  /**
   * PEM CA bundle the server's certificate is verified against (`NATS_CA_FILE`): the connection
   * then requires TLS (tls.ts `natsTlsOptions`). A `tls://` URL requires TLS too.
   */
  caFile?: string;
  /**
   * Ed25519 private keys (PKCS#8 PEM files) this log signs appends with, by owner
   * (`RUNPLANE_SIGNING_KEY_FILE` gives a service its own owner's; signing.ts): an event is signed
   * with the key of the owner its type belongs to, and goes unsigned when this log holds none.
   * @throws (at connect) Error naming `RUNPLANE_SIGNING_KEY_FILE` on an unreadable or non-Ed25519 file.
   */
  signingKeyFiles?: Partial<Record<Owner, string>>;
  /**
   * The deployment's public key set (`RUNPLANE_SIGNING_PUBLIC_KEYS_FILE`, JSON `{ "<owner>":
   * ["<key>", ...] }`, signing.ts): set, every message read is refused as not a fact when its
   * signature is missing, does not verify, or is not its event type's owner's ({@link verifyStored}).
   * @throws (at connect) Error naming `RUNPLANE_SIGNING_PUBLIC_KEYS_FILE` on an unreadable or invalid file.
   */
  publicKeysFile?: string;
  /** The first stream sequence whose events must be signed (`RUNPLANE_SIGNING_REQUIRED_FROM_SEQ`, default 1; signing.ts `SignatureVerifier`). */
  signaturesRequiredFromSeq?: number;
  /**
   * Verify the signatures of what is read (default true; `RUNPLANE_SIGNING_VERIFY`). False: the
   * public keys only check this process's own signing key at connect, and reads accept what the
   * broker stored, signed or not.
   */
  verifySignatures?: boolean;
  /**
   * How long an append whose outcome is unknown (publish timed out, NATS restarting) is retried
   * with the same event id before the error propagates, in ms (default 30,000).
   */
  appendRetryMs?: number;
  /**
   * When {@link EventLog.appendBatch} uses an atomic batch (default `auto`): `auto` only on a
   * replicated stream (`num_replicas` > 1), where the server stages a batch in memory; on a
   * one-replica file stream the server stages every batch in a file store of its own (created,
   * flushed and deleted per batch, `newBatchStore` in nats-server's jetstream_batching.go), which
   * measured slower than appending the events one by one (docs/event-log.md). `always` uses it
   * wherever the stream and server allow it (the tests of the batch path), `never` nowhere.
   */
  atomicBatches?: 'auto' | 'always' | 'never';
  /**
   * The stream's duplicate window when this log creates the stream, ms (default 120,000): a copy
   * of an event published again after it is stored as a new message, which readers and consumers
   * recognise and skip (docs/event-log.md "Messages that are not events").
   */
  duplicateWindowMs?: number;
  /**
   * Partitions of the stream when this log creates it (`RUNPLANE_PARTITIONS`, default 8). Once
   * the stream exists its own value (metadata `runplane_partitions`) wins; a different value here
   * is reported through `onPartitionsMismatch`.
   */
  partitions?: number;
  /**
   * Copies of the stream when this log creates it (`num_replicas`, `RUNPLANE_NATS_REPLICAS`):
   * 1 (default) on one server, 3 on a 3-node JetStream cluster. The buckets of `provisionBus` too.
   */
  replicas?: number;
  /**
   * Whether a missing Run stream is created (default true: the services' and the admin's way).
   * False opens the log read-only, for auditors' tools (`runplane timeline`, `projections
   * rebuild`, the CLI's `openLogReadOnly`): the stream is only looked up, never created or
   * changed, and a missing stream, an unreachable server or a refused user fails with an error
   * naming the server and the stream (K11: reads never append, nor create the log they read).
   */
  create?: boolean;
  /**
   * True (a service's way, {@link fromConfig} for an owner): a missing Run stream that this user
   * may not create is waited for (kit `untilProvisioned`: the admin's provisioning has not run
   * yet), not an error. Default false: the admin's tools and tests are told at once.
   */
  awaitProvisioning?: boolean;
}

/** Result of an append: where the event landed, and the event as stored (with `prevSeq` and `writer`). */
export interface AppendResult {
  seq: number;
  stored: StoredEvent;
  /**
   * True when an earlier attempt of this very append (same event id, same process) had been
   * stored although its acknowledgement was lost (timeout, NATS restart): it counts as stored.
   */
  recovered: boolean;
}

/** What {@link EventLog.catchUp} found: the Run's events after what the caller knew, and each subject's last sequence. */
export interface CatchUp {
  /** New events in stream order. */
  events: StoredEvent[];
  /** Last sequence of each owner's subject (0 = empty), as of the read. */
  lasts: Record<Owner, number>;
  /** True when the back-links could not be followed and the Run was read in full by a scan instead (`events` is then the whole Run). */
  full: boolean;
}

/**
 * How long one pull request of a consumer waits, ms: a service's durable consumer
 * ({@link DurableConsumer}) and an observer's follow of a Run ({@link EventLog.followRun}). The client's idle heartbeat is half
 * of it, and after a consumer leader change on a JetStream cluster (a node lost or restarted: the
 * server answers the pull with 409 "Leadership Change") the client pulls again only after two
 * missed heartbeats: with the client's default (30 s) a consumer paused up to 33-39 s after a
 * rolling restart of a 3-node cluster; with 5 s, up to 11 s (docs/operations.md, "JetStream
 * cluster"). An observer's follow is an ordered consumer, which a restarted nats-server no longer
 * has: with 30 s the follow stalled 35-43 s after a kill -9 of the server, with 5 s it resumes within
 * seconds. The price: an idle consumer renews its pull every 5 s instead of every 30 s.
 */
export const CONSUME_EXPIRES_MS = 5_000;

/**
 * How long an observer's follow ({@link EventLog.followRun}) may hear nothing from its ordered
 * consumer (no message, no idle heartbeat, no answer to a pull) before it drops that consumer and
 * starts a new one where it left off, ms: three idle heartbeats (each half of
 * {@link CONSUME_EXPIRES_MS}) and a margin. A follow whose consumer's node hangs so moves on
 * within about 8-16 s (7.5-15.7 s measured), where the NATS client waited for as long as it hung.
 */
export const FOLLOW_SILENCE_MS = 8_000;

/** How often a follow looks at how long its consumer has been silent, ms. */
export const FOLLOW_WATCH_EVERY_MS = 1_000;

/** How long a follow waits between two tries to make its new consumer, ms (while NATS is unreachable). */
export const FOLLOW_RESTART_WAIT_MS = 1_000;

/**
 * How long a client waits between attempts to reconnect to a NATS server that went away, and the
 * most random jitter added: after a NATS restart every service is back within about this much of
 * the others, so a judge of liveness (recovery's lease sweep, the tools' claim sweep) gives a
 * holder this long on top of its TTL after its own reconnection before it counts renewals as missed.
 */
export const RECONNECT_TIME_WAIT_MS = 1_000;
export const RECONNECT_JITTER_MS = 200;
/** The grace a liveness judge adds after its own reconnection: the others' reconnect wait, jitter and a margin. */
export const RECONNECT_GRACE_MS = 2 * (RECONNECT_TIME_WAIT_MS + RECONNECT_JITTER_MS);

/**
 * The connect options every Runplane NATS connection shares: the servers of `natsUrl` (a
 * comma-separated list), the connection's `name` (shown by the server's monitoring), reconnection
 * for ever at {@link RECONNECT_TIME_WAIT_MS} plus up to {@link RECONNECT_JITTER_MS} of jitter, a
 * hung server left within seconds ({@link STALE_CONNECTION_OPTIONS}), and as NATS user `user`, its replies on its own inbox ({@link natsUserOptions}; nothing without a user).
 * @throws RangeError as {@link natsUserOptions}.
 */
export function reconnectingNatsOptions(natsUrl: string, name: string, user: string | undefined, pass: string | undefined) {
  return {
    servers: natsServerList(natsUrl),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: RECONNECT_TIME_WAIT_MS,
    reconnectJitter: RECONNECT_JITTER_MS,
    // a server that hangs with the connection open (frozen, a VM paused) is left for another node
    // within seconds rather than the client's default of 4-6 minutes
    ...STALE_CONNECTION_OPTIONS,
    // replies on the user's own inbox, the only one the broker lets it read
    ...natsUserOptions(user, pass),
  };
}

const WRONG_LAST_SEQUENCE = 10071;
/** Atomic batch errors (nats-server errors.json, ADR-50). */
const WRONG_LAST_SEQUENCE_IN_FLIGHT = 10164; // "wrong last sequence": another write on the subject is in flight (cluster)
const DUPLICATE_IN_PROCESS = 10158;
const ATOMIC_PUBLISH_DISABLED = 10174;
const BATCH_INCOMPLETE = 10176;
const BATCH_TOO_LARGE = 10199;
const BATCH_HAS_DUPLICATE = 10201;
const BATCH_TOO_MANY_IN_FLIGHT = 10210;
/** How long the commit of an atomic batch waits for its acknowledgement, ms (as a publish's default). */
const BATCH_COMMIT_TIMEOUT_MS = 5_000;

/** The reply to the commit of an atomic batch: a publish acknowledgement with the batch's id and size, or an error. */
interface BatchReply {
  stream?: string;
  seq?: number;
  batch?: string;
  count?: number;
  error?: { code: number; err_code: number; description: string };
}

/** One event of a decision for {@link EventLog.appendBatch}. */
export interface BatchItem {
  event: RunEvent;
  /**
   * The last sequence of the event's subject the writer knows (0 = empty), as for
   * {@link EventLog.append}: required on the first event of each subject in the batch, absent on a
   * later one (it follows the batch's previous event of that subject).
   */
  expectedLastSubjectSeq?: number;
  /** Sequences of earlier events on the subject, newest first (read-ahead hints), for the first event of each subject. */
  earlierSeqs?: readonly number[];
}

/** True when a server version string (`2.15.1`) is at least `major.minor.patch`; false when unknown. */
function serverAtLeast(version: string | undefined, major: number, minor: number, patch = 0): boolean {
  const m = /^(\d+)\.(\d+)(?:\.(\d+))?/.exec(version ?? '');
  if (!m) return false;
  const have = [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)];
  const want = [major, minor, patch];
  for (let i = 0; i < 3; i++) if (have[i] !== want[i]) return have[i]! > want[i]!;
  return true;
}

/**
 * The first server release whose atomic batch publish {@link EventLog.appendBatch} uses: 2.12.0
 * introduced it (ADR-50) but refused `Nats-Msg-Id` inside a batch; de-duplication in batches came
 * with 2.12.1, and every event is sent with its id.
 */
export const ATOMIC_BATCH_MIN_SERVER: readonly [number, number, number] = [2, 12, 1];
/** Most messages in one atomic batch (the server's default limit, ADR-50): a longer decision is appended one by one. */
export const MAX_ATOMIC_BATCH = 1_000;

/** Checks a partition count (1..256). @throws RangeError otherwise. */
export function validPartitions(n: number): number {
  if (!Number.isInteger(n) || n < 1 || n > MAX_PARTITIONS) throw new RangeError(`partitions must be a whole number 1..${MAX_PARTITIONS}, not ${n}`);
  return n;
}
/** The header of a conditional append, stored with the message: the server checked it. */
export const EXPECTED_LAST_SUBJECT_SEQUENCE = 'Nats-Expected-Last-Subject-Sequence';
/** Names another subject (or a wildcard) for the check of {@link EXPECTED_LAST_SUBJECT_SEQUENCE}: the log never sends it, so a message with it is no link of its own subject. */
export const EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT = 'Nats-Expected-Last-Subject-Sequence-Subject';
/** Atomic batch headers (ADR-50), stored with every message of a batch: the batch's id and the message's 1-based position in it. */
export const BATCH_ID = 'Nats-Batch-Id';
export const BATCH_SEQUENCE = 'Nats-Batch-Sequence';
const BATCH_COMMIT = 'Nats-Batch-Commit';
/**
 * The headers the log stores with each message and its verification ({@link verifyStored})
 * reads: the event id the server de-duplicates by, the subject expectation the server checked,
 * an atomic batch's id, position and commit mark, and the writer's signature (signing.ts). What {@link EventLog.readRun} and
 * {@link EventLog.readAll} return with `{ headers: true }` (`runplane timeline --json`), so an
 * auditor sees what the log's own verification saw (K11).
 */
export const STORED_HEADERS = [
  'Nats-Msg-Id',
  EXPECTED_LAST_SUBJECT_SEQUENCE,
  EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT,
  BATCH_ID,
  BATCH_SEQUENCE,
  BATCH_COMMIT,
  ...SIGNATURE_HEADERS,
] as const;

/** A stored event with the {@link STORED_HEADERS} its message carries (absent ones left out), as `{ headers: true }` reads return it. */
export interface StoredEventWithHeaders extends StoredEvent {
  headers: Partial<Record<(typeof STORED_HEADERS)[number], string>>;
}

/** How a read goes: whether it returns each event's {@link STORED_HEADERS} (off on the services' reads: nothing is copied there), and how long a batch may stall. */
export interface ReadOptions {
  headers?: boolean;
  /**
   * How long a batch of the read may go without a message before it is asked again, ms (default
   * {@link READ_FETCH_EXPIRES_MS}). A test of a frozen server passes a short one to freeze it for
   * less time and still outlast it.
   */
  fetchExpiresMs?: number;
}

/** How long a batch of a whole-log read ({@link EventLog.readAll}) may go without a message before it is asked again, ms. */
export const READ_FETCH_EXPIRES_MS = 5_000;

/** Tries in a row in which a read gets no further before it gives up (each waits a little longer: 0.1 s, 0.2 s, ...). */
export const READ_STALLS = 8;

/** A batched direct get that stopped arriving (a server frozen or gone): what did arrive, so the read goes on from there. */
class DirectBatchStalled extends Error {
  constructor(
    filter: string,
    seq: number,
    idleMs: number,
    readonly received: Msg[],
  ) {
    super(`reading ${filter} from sequence ${seq}: nothing arrived for ${idleMs} ms after ${received.length} messages`);
    this.name = 'DirectBatchStalled';
  }
}

/** The {@link STORED_HEADERS} of a message that carries them (none: `{}`). */
export function storedHeadersOf(headers: StoredHeaders | undefined): StoredEventWithHeaders['headers'] {
  const found: StoredEventWithHeaders['headers'] = {};
  if (!headers) return found;
  for (const name of STORED_HEADERS) {
    const value = headers.get(name);
    if (value) found[name] = value;
  }
  return found;
}
const OWNERS = Owner.options;
/** Most read-ahead hints an event carries (`earlierSeqs`). */
export const MAX_EARLIER_SEQS = 31;
/** The stream's default duplicate window, ms. */
export const DEFAULT_DUPLICATE_WINDOW_MS = 120_000;

/** Decodes and validates one stream message as a Runplane event whose owner matches its subject. */
/** One decoder for every stored message (a `TextDecoder` per message was garbage on the hot path). */
const utf8 = new TextDecoder();

export function decodeStored(seq: number, subject: string, data: Uint8Array, acceptNewer = false): StoredEvent {
  let raw: unknown;
  try {
    raw = JSON.parse(utf8.decode(data));
  } catch (e) {
    throw new InvalidStoredEvent(seq, subject, `not JSON (${(e as Error).message})`);
  }
  const parsed = RunEvent.safeParse(raw);
  let event: StoredEvent['event'];
  let newer: StoredEvent['newer'];
  if (parsed.success) event = parsed.data as StoredEvent['event'];
  else {
    let issues = parsed.error.issues;
    // a type outside the catalogue is all the union says: the envelope's own faults are listed too
    const typeUnknown = issues.length === 1 && issues[0]!.path.length === 1 && issues[0]!.path[0] === 'type';
    if (typeUnknown) {
      const envelope = AnyEventEnvelope.safeParse(raw);
      if (!envelope.success) issues = [...issues, ...envelope.error.issues];
    }
    newer = acceptNewer ? newerPart(raw, issues, typeUnknown) : undefined;
    if (!newer) throw new InvalidStoredEvent(seq, subject, issuesInBrief(issues), 'invalid-message', JSON.stringify(issues, null, 2));
    event = raw as StoredEvent['event'];
  }
  // `<prefix>.run.<runId>.<owner>.<partition>` (subjects.ts)
  const tokens = subject.split('.');
  if (tokens.length !== 5 || tokens[3] !== subjectTokenOf(event) || tokens[2] !== event.runId) {
    throw new InvalidStoredEvent(seq, subject, `owner ${event.owner} / run ${event.runId} do not match the subject`);
  }
  return newer ? { seq, subject, event, newer } : { seq, subject, event };
}

/**
 * What makes `raw` an event newer than this catalogue, or null: a type the catalogue does not have
 * with a valid envelope (`typeUnknown`: the union's only issue, and no envelope fault was added),
 * or a known type whose every issue is an enum value the catalogue does not have (zod's
 * `invalid_value`). The additive changes of docs/contract/README.md; anything else is not valid.
 */
function newerPart(raw: unknown, issues: readonly { code: string; path: readonly PropertyKey[] }[], typeUnknown: boolean): StoredEvent['newer'] {
  if (typeUnknown) return issues.length === 1 ? { kind: 'type' } : undefined;
  if (issues.length === 0 || !issues.every((i) => i.code === 'invalid_value') || !AnyEventEnvelope.safeParse(raw).success) return undefined;
  return { kind: 'value', paths: issues.map((i) => i.path.map(String).join('.')) };
}

/** The headers of a stored message, as a consumer (`JsMsg.headers`) or a direct get (`StoredMsg.header`) gives them. */
export interface StoredHeaders {
  get(name: string): string;
}

/**
 * Decodes one stream message and checks that the event log appended it: the single check every
 * reader of facts applies (durable consumers, the Run readers, observers' event streams, K11).
 * A message whose partition token is not the Run's partition ({@link partitionOf} with the
 * stream's `partitions`) was not appended by the log either (the log builds every subject): it is
 * refused as `wrong-partition`, so a forgery on another partition never reaches a consumer that
 * owns that partition.
 * Every append is conditional (it always was) and the server stores the expectation it checked
 * (`Nats-Expected-Last-Subject-Sequence`, a sequence below the message's own): a message without
 * it was published around the log (a replay after the duplicate window, a forgery), whatever its
 * body says, and an event's `prevSeq` must be what the header says (an event without `prevSeq`
 * was appended before it existed and carries the header all the same). The one exception is an
 * event stored by an atomic batch after an earlier event of the same batch on its subject
 * ({@link EventLog.appendBatch}): the server refuses a subject expectation there, so its back-link
 * is `prevInBatch`, the batch position of that earlier event, checked against the batch position
 * the server stored (`Nats-Batch-Sequence`, gapless from 1, the batch stored contiguously); its
 * `prevSeq` is resolved here (own sequence minus the distance in the batch) and returned in the
 * event, so every reader sees the same absolute back-link (docs/event-log.md, "One decision, one
 * atomic append").
 * With `signatures` (the deployment's public keys, signing.ts) the message's signature is checked
 * last: it must be its event type's owner's, over its subject, event id and payload.
 * With `acceptNewer` (a downstream consumer's reader), an event newer than this catalogue (a new
 * type, a new enum value: docs/contract/README.md) is returned with `newer` set instead of refused,
 * after the same partition, back-link and signature checks (a new type's signer must be the owner
 * its envelope names).
 * @throws InvalidStoredEvent with `anomaly` `invalid-message` (not a valid event, see
 *   {@link decodeStored}), `wrong-partition`, `unverified-event` (no verified back-link), or with
 *   `signatures` `unsigned-event`, `bad-signature` or `wrong-signer`.
 */
export function verifyStored(
  seq: number,
  subject: string,
  data: Uint8Array,
  headers: StoredHeaders | undefined,
  partitions: number,
  signatures?: SignatureVerifier | null,
  acceptNewer = false,
): StoredEvent {
  const stored = decodeStored(seq, subject, data, acceptNewer);
  const expected = partitionOf(stored.event.runId, partitions);
  if (subject.slice(subject.lastIndexOf('.') + 1) !== String(expected)) {
    throw new InvalidStoredEvent(
      seq,
      subject,
      `event ${stored.event.eventId} (${stored.event.type}) is on the wrong partition: run ${stored.event.runId} belongs to partition ${expected} of ${partitions}`,
      'wrong-partition',
    );
  }
  const link = verifiedLink(seq, stored.event, headers);
  if (link === null) {
    throw new InvalidStoredEvent(
      seq,
      subject,
      `event ${stored.event.eventId} (${stored.event.type}) is unverified: not appended by the event log (a replay or a forgery)`,
      'unverified-event',
    );
  }
  if (signatures) {
    const refused = signatures.check(seq, subject, stored.event, data, headers);
    if (refused) {
      throw new InvalidStoredEvent(
        seq,
        subject,
        `event ${stored.event.eventId} (${stored.event.type}) is refused: ${refused.reason}`,
        refused.problem,
      );
    }
  }
  if (stored.event.prevInBatch !== undefined) stored.event = { ...stored.event, prevSeq: link };
  return stored;
}

/**
 * The back-link of a stored event that the server vouches for, or null: the subject expectation
 * the server checked (stored header, below `seq`, equal to the body's `prevSeq` when it has one),
 * or, for a later event of its subject in an atomic batch, the sequence its `prevInBatch` names
 * inside the same batch (the body has no `prevSeq` then, and no checked expectation can exist).
 */
function verifiedLink(seq: number, event: StoredEvent['event'], headers: StoredHeaders | undefined): number | null {
  const header = headers?.get(EXPECTED_LAST_SUBJECT_SEQUENCE) ?? '';
  if (header !== '') {
    const checked = /^\d{1,15}$/.test(header) ? Number(header) : NaN;
    // checked on another subject than the message's own: no link of this subject
    if (headers?.get(EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT)) return null;
    if (!(checked < seq) || event.prevInBatch !== undefined || (event.prevSeq !== undefined && event.prevSeq !== checked)) return null;
    return checked;
  }
  const position = headers?.get(BATCH_SEQUENCE) ?? '';
  const inBatch = event.prevInBatch;
  if (inBatch === undefined || event.prevSeq !== undefined || !headers?.get(BATCH_ID) || !/^\d{1,4}$/.test(position)) return null;
  const own = Number(position);
  if (!(inBatch < own)) return null;
  const prev = seq - (own - inBatch);
  return prev >= 1 ? prev : null;
}

/**
 * The consumers the Run stream may hold at once: each service's partition durables (7 services x
 * partitions), the downstream durables and one per open event stream (publication's
 * `RUNPLANE_OBSERVER_STREAMS_MAX` per replica). nats-server 2.15 holds a stream that names no limit
 * to 1,000, which a hostile tenant's 3,000 event streams filled for everyone.
 */
export const RUN_STREAM_MAX_CONSUMERS = 10_000;

/**
 * The configuration of the Run stream as {@link EventLog.ensureStream} creates it (and as
 * deploy/nats/stream-RUNPLANE.json gives it to `nats stream add`, a test keeps the two equal):
 * file storage, `replicas` copies, the duplicate window in ns, direct get and atomic batch publish
 * (`allow_atomic`, nats-server 2.12+: {@link EventLog.appendBatch}) allowed, and no message
 * deleted, purged or rolled up through the API (K11).
 */
export function runStreamConfig(space: SubjectSpace, opts: { replicas: number; duplicateWindowMs: number }) {
  return {
    name: space.stream,
    subjects: [allRunsFilter(space)],
    storage: StorageType.File,
    num_replicas: opts.replicas,
    // said, not left to the server: nats-server 2.15 holds a stream that names none (-1) to 1,000,
    // shared by every service's durables and every open event stream's consumer
    max_consumers: RUN_STREAM_MAX_CONSUMERS,
    duplicate_window: opts.duplicateWindowMs * 1_000_000,
    allow_direct: true,
    // one decision's events stored together (EventLog.appendBatch, nats-server 2.12+)
    allow_atomic: true,
    allow_rollup_hdrs: false,
    deny_delete: true,
    deny_purge: true,
    // the partition count, fixed for the stream's life (nats-server 2.10+ keeps metadata)
    metadata: { [PARTITIONS_METADATA_KEY]: String(space.partitions) },
  };
}

/** Subjects whose stored floor a process keeps (the most recently stored first kept). */
const STORED_FLOOR_MAX = 50_000;

/**
 * Whether a failure to open the log says the server has no JetStream: the JetStream API has no
 * responder (`no responders: '$JS.API.INFO'`), or says JetStream is not enabled. Only these
 * phrases: a bare "503" also matched the URL of a server on a port such as 45503, which turned
 * "stream ... does not exist on NATS at nats://127.0.0.1:45503" into this error.
 * @param text the failure's message.
 */
export function isJetStreamMissing(text: string): boolean {
  return /no responders|jetstream (is )?not enabled/i.test(text);
}

/** Whether this process said that it checks signatures through node:crypto ({@link EventLog.connect}). */
let fallbackSaid = false;

/**
 * The event log: one JetStream stream holding every Run's subjects (see subjects.ts).
 * Appends are conditional on the last sequence of the writer's own subject (fencing, K6) and carry
 * the event id as `Nats-Msg-Id` (de-duplication, K11). Reads never append.
 */
export class EventLog {
  /** Called for every stored message that is not a valid event while reading (default: a warning on stderr). */
  onInvalid: (e: InvalidStoredEvent) => void = (e) => process.stderr.write(`runplane event log: ${e.message}; skipped (not a fact)\n`);

  /** Stamped on every event this log appends: the service and this process's instance id. */
  readonly writer: Writer;
  /** The keys this log signs appends with, by owner (signing.ts; empty: appends go unsigned). */
  readonly signers = new Map<Owner, EventSigner>();
  /** The deployment's public keys, when configured: every read refuses a message without its owner's signature ({@link verifyStored}). */
  signatures: SignatureVerifier | null = null;
  /** What this process's whole-Run partition consumers deliver, for the folds it keeps (deliveries.ts). */
  readonly deliveries = new DeliveryFeed();
  /** True when the stream has more than one replica: reads go to its leader ({@link readMessage}). */
  private leaderReads = false;
  /**
   * True when the stream takes atomic batches (`allow_atomic`, set on the stream when this log
   * last looked) on a server that stores them with de-duplication ({@link ATOMIC_BATCH_MIN_SERVER}):
   * {@link appendBatch} then stores a decision in one request, else one append after another.
   */
  private atomicStream = false;
  /** Called once when a decision of several events is appended one by one because the stream or the server lacks atomic batches. */
  onSequentialBatches: (why: string) => void = (why) =>
    process.stderr.write(`runplane event log: decisions of several events are appended one by one on ${this.space.stream}: ${why}\n`);
  private sequentialReported = false;

  /** Called when the configured partition count differs from the stream's (the stream's wins). */
  onPartitionsMismatch: (configured: number, stream: number) => void = (configured, stream) =>
    process.stderr.write(
      `runplane event log: RUNPLANE_PARTITIONS=${configured} differs from the ${stream} partitions stream ${this.space.stream} was created with; using ${stream}\n`,
    );

  private constructor(
    readonly nc: NatsConnection,
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    /** The stream, prefix and partition count (learnt from the stream by {@link ensureStream}). */
    public space: SubjectSpace,
    service: string,
    private readonly appendRetryMs: number,
    private readonly duplicateWindowMs: number = DEFAULT_DUPLICATE_WINDOW_MS,
    /** Copies of the stream and buckets this log creates (`num_replicas`). */
    readonly replicas: number = 1,
    private readonly atomicBatchMode: 'auto' | 'always' | 'never' = 'auto',
  ) {
    this.writer = { service, instance: randomUUID() };
  }

  /**
   * Connects to NATS and makes sure the stream exists ({@link ensureStream}), or, with
   * `create: false`, opens the existing stream read-only ({@link openStream}).
   * @throws when NATS is unreachable or JetStream is not enabled; with `create: false` also when
   *   the stream does not exist, every message naming the server (and the stream).
   */
  static async connect(opts: EventLogOptions): Promise<EventLog> {
    const create = opts.create ?? true;
    let nc: NatsConnection;
    // a bad NATS_CA_FILE stops here, naming the setting (not as a TLS error on a later reconnection)
    const tls = natsTlsOptions(opts.natsUrl, opts.caFile);
    // so do bad signing keys (RUNPLANE_SIGNING_KEY_FILE, RUNPLANE_SIGNING_PUBLIC_KEYS_FILE)
    const signers = Object.entries(opts.signingKeyFiles ?? {}).map(([owner, file]) => readSigningKey(owner as Owner, file));
    const signatures = opts.publicKeysFile ? new SignatureVerifier(readPublicKeySet(opts.publicKeysFile), opts.signaturesRequiredFromSeq) : null;
    // the slower path is said, once per process, where an operator sees it
    if (signatures && ed25519Fallback !== null && !fallbackSaid) {
      fallbackSaid = true;
      process.stderr.write(
        `runplane event log: event signatures are checked through node:crypto, at about twice the CPU: libsodium (sodium-native) did not load: ${ed25519Fallback}\n`,
      );
    }
    for (const signer of signers) {
      if (signatures && !signatures.keys.get(signer.owner)?.has(signer.keyId))
        throw new Error(
          `RUNPLANE_SIGNING_KEY_FILE=${opts.signingKeyFiles![signer.owner]}: its public key (id ${signer.keyId}) is not among ${signer.owner}'s in RUNPLANE_SIGNING_PUBLIC_KEYS_FILE=${opts.publicKeysFile}: every reader would refuse this service's events (publish the public key first)`,
        );
    }
    try {
      // each attempt bounded at 5 s, a slow first connection given more of them (stale-connection.ts)
      nc = await connectPatiently({
        ...reconnectingNatsOptions(opts.natsUrl, opts.name ?? 'runplane', opts.user, opts.pass),
        // no Error (with its stack trace) made up front for every request and timed subscription:
        // about 1-2 % of each service's CPU on the hot path (every append, direct get and KV
        // update is a request). A failed request still says what failed; only the caller's async
        // frames are missing from its stack (docs/performance.md)
        noAsyncTraces: true,
        // the server's certificate verified against NATS_CA_FILE before the password is sent
        ...tls,
      });
    } catch (e) {
      // every caller (a service's start-up, an auditor's tool) is told which server it could not use,
      // and, when the server's certificate was not trusted, which setting names the CA
      const message = String((e as Error)?.message ?? e);
      const untrusted = /certificate|self[- ]signed|unable to verify/i.test(message);
      const hint = untrusted
        ? ` (NATS_CA_FILE${opts.caFile ? `=${opts.caFile}` : ' is not set'}: set it to the CA that signed the server's certificate)`
        : '';
      throw new Error(`cannot connect to NATS at ${opts.natsUrl}${opts.user ? ` as ${opts.user}` : ''}: ${message}${hint}`, {
        cause: e,
      });
    }
    try {
      const jsm = await jetstreamManager(nc);
      const log = new EventLog(
        nc,
        jetstream(nc),
        jsm,
        { stream: opts.stream, prefix: opts.prefix, partitions: validPartitions(opts.partitions ?? DEFAULT_PARTITIONS) },
        opts.name ?? 'runplane',
        opts.appendRetryMs ?? 30_000,
        opts.duplicateWindowMs ?? DEFAULT_DUPLICATE_WINDOW_MS,
        opts.replicas ?? 1,
        opts.atomicBatches ?? 'auto',
      );
      for (const signer of signers) log.signers.set(signer.owner, signer);
      log.signatures = (opts.verifySignatures ?? true) ? signatures : null;
      // a service waits for a stream the admin has not provisioned yet (its user may not create it)
      if (create && opts.awaitProvisioning) await untilProvisioned(`stream ${opts.stream}`, () => log.ensureStream());
      else if (create) await log.ensureStream();
      else await log.openStream(opts.natsUrl);
      return log;
    } catch (e) {
      await nc.close().catch(() => undefined);
      const text = String((e as Error)?.message ?? e);
      if (isJetStreamMissing(text)) {
        throw new Error(`NATS at ${opts.natsUrl} answers but has no JetStream: start nats-server with -js (JetStream enabled)`, { cause: e });
      }
      // a user's permissions name the deployment's stream: any other name is refused before the server looks it up
      if (/permissions violation/i.test(text) && text.includes(`STREAM.INFO.${opts.stream}`))
        throw new Error(
          `reading stream ${opts.stream} on NATS at ${opts.natsUrl}: user ${opts.user ?? '(none)'} may not read a stream of that name ` +
            `(its permissions name the deployment's stream): check RUNPLANE_STREAM, or render the permissions for this stream ` +
            `(\`runplane docs nats-auth --stream ${opts.stream}\`); nothing was created`,
          { cause: e },
        );
      if (!create && !(e instanceof StreamNotFound))
        throw new Error(`reading stream ${opts.stream} on NATS at ${opts.natsUrl}: ${text}`, { cause: e });
      throw e;
    }
  }

  /**
   * Connects with the bus configuration read from `env` (`NATS_URL`, `RUNPLANE_STREAM`,
   * `RUNPLANE_SUBJECT_PREFIX`, `NATS_USER`/`NATS_PASSWORD`, `NATS_CA_FILE`, validated by contracts'
   * `BusConfig`): how the CLI connects. Services get theirs from the injected configuration ({@link fromConfig}).
   * @param name the connection name shown by the NATS server (e.g. the service name).
   * @param opts `readOnly`: open the existing stream only, never create it (`create: false` of
   *   {@link connect}: auditors' tools, K11).
   * @throws as {@link connect}, and on invalid configuration.
   */
  static fromEnv(name: string, env: NodeJS.ProcessEnv = process.env, opts: { readOnly?: boolean } = {}): Promise<EventLog> {
    return EventLog.fromConfig(name, BusConfig.parse(env), opts);
  }

  /**
   * Connects with a parsed bus configuration (contracts `BusConfig`, as a service receives it by
   * injection): the one way a service or the CLI connects. A service (`name` an owner) signs its
   * appends with `RUNPLANE_SIGNING_KEY_FILE`; any process with `RUNPLANE_SIGNING_PUBLIC_KEYS_FILE`
   * refuses what is not signed by its owner (signing.ts).
   * @param name the connection name shown by the NATS server (e.g. the service name; an owner's name signs as that owner).
   * @param opts `readOnly`: open the existing stream only, never create it (`create: false` of
   *   {@link connect}: auditors' tools, K11); `awaitProvisioning`: a service's way, see
   *   {@link EventLogOptions.awaitProvisioning}.
   * @throws as {@link connect}; Error naming `RUNPLANE_SIGNING_KEY_FILE` when it is set for a
   *   process that owns no facts, or missing for an owner whose readers hold public keys.
   */
  static fromConfig(name: string, bus: BusConfig, opts: { readOnly?: boolean; awaitProvisioning?: boolean } = {}): Promise<EventLog> {
    const owner = Owner.safeParse(name);
    if (bus.RUNPLANE_SIGNING_KEY_FILE && !owner.success) {
      return Promise.reject(
        new Error(`RUNPLANE_SIGNING_KEY_FILE is set for ${name}, which owns no facts (${Owner.options.join(', ')} sign): unset it for this process`),
      );
    }
    if (owner.success && !opts.readOnly && bus.RUNPLANE_SIGNING_PUBLIC_KEYS_FILE && !bus.RUNPLANE_SIGNING_KEY_FILE) {
      return Promise.reject(
        new Error(
          `RUNPLANE_SIGNING_PUBLIC_KEYS_FILE is set but RUNPLANE_SIGNING_KEY_FILE is not: every reader would refuse ${name}'s unsigned events (mount ${name}'s signing key)`,
        ),
      );
    }
    return EventLog.connect({
      natsUrl: bus.NATS_URL,
      stream: bus.RUNPLANE_STREAM,
      prefix: bus.RUNPLANE_SUBJECT_PREFIX,
      name,
      duplicateWindowMs: bus.RUNPLANE_DUPLICATE_WINDOW_MS,
      partitions: bus.RUNPLANE_PARTITIONS,
      replicas: bus.RUNPLANE_NATS_REPLICAS,
      ...(bus.NATS_USER ? { user: bus.NATS_USER, pass: bus.NATS_PASSWORD } : {}),
      ...(bus.NATS_CA_FILE ? { caFile: bus.NATS_CA_FILE } : {}),
      ...(bus.RUNPLANE_SIGNING_KEY_FILE && owner.success ? { signingKeyFiles: { [owner.data]: bus.RUNPLANE_SIGNING_KEY_FILE } } : {}),
      ...(bus.RUNPLANE_SIGNING_PUBLIC_KEYS_FILE ? { publicKeysFile: bus.RUNPLANE_SIGNING_PUBLIC_KEYS_FILE } : {}),
      signaturesRequiredFromSeq: bus.RUNPLANE_SIGNING_REQUIRED_FROM_SEQ,
      // a service may leave verifying to the auditors and downstream consumers; a read-only tool (audit) always verifies
      verifySignatures: opts.readOnly ? true : bus.RUNPLANE_SIGNING_VERIFY,
      ...(opts.readOnly ? { create: false } : {}),
      // a service started before the admin's provisioning waits for the stream (the CLI is told at once)
      ...(opts.awaitProvisioning && !opts.readOnly ? { awaitProvisioning: true } : {}),
    });
  }

  /**
   * Opens the existing Run stream without creating or changing anything (the read-only
   * {@link connect}): reads its configuration as {@link ensureStream} does, and never calls
   * `streams.add` or `streams.update`.
   * @param server the NATS URL, for the message.
   * @throws StreamNotFound when the stream does not exist; as {@link ensureStream} when it
   *   captures other subjects or its partition count is invalid.
   */
  async openStream(server: string): Promise<void> {
    let info: StreamInfo;
    try {
      info = await this.jsm.streams.info(this.space.stream);
    } catch (e) {
      if (e instanceof JetStreamApiError && e.status === 404) throw new StreamNotFound(this.space.stream, server, { cause: e });
      throw e;
    }
    this.adoptStream(info);
  }

  /**
   * Creates the stream if missing (the shape of {@link runStreamConfig}): file storage,
   * {@link replicas} copies, the duplicate window, direct get and atomic batches (2.12+) allowed, no message can be deleted,
   * purged or rolled up through the JetStream API (the log is the truth, K11; only deleting the
   * whole stream remains: the admin's, and tests' clean-up), and the partition count in its
   * metadata (`runplane_partitions`, nats-server 2.10+). An existing stream is left as it is (its
   * replicas included; without `allow_atomic`, {@link appendBatch} appends one event after another
   * until the admin enables it, {@link enableAtomicBatches}), and its partition count becomes this log's (`space.partitions`), whatever
   * was configured: every process of a deployment must map a Run to the same partition.
   * @throws when the stream captures other subjects, or its partition count is not 1..256.
   */
  async ensureStream(): Promise<void> {
    try {
      this.adoptStream(await this.jsm.streams.info(this.space.stream));
    } catch (e) {
      if (!(e instanceof JetStreamApiError) || e.status !== 404) throw e;
      const config: Partial<ReturnType<typeof runStreamConfig>> & { name: string } = runStreamConfig(this.space, {
        replicas: this.replicas,
        duplicateWindowMs: this.duplicateWindowMs,
      });
      // a server before 2.10 keeps no metadata (nor runs partition consumers): the configured count holds
      if (!serverAtLeast(this.nc.info?.version, 2, 10)) delete config.metadata;
      // before 2.12 there is no atomic batch publish (appendBatch appends one by one there)
      if (!serverAtLeast(this.nc.info?.version, 2, 12)) delete config.allow_atomic;
      const info = await this.jsm.streams.add(config);
      this.leaderReads = this.replicas > 1;
      // a concurrent creator may have won with its own count: the stream's is the one
      this.adoptPartitions(info.config.metadata?.[PARTITIONS_METADATA_KEY]);
      this.atomicStream = info.config.allow_atomic === true;
      this.replicatedStream = (info.config.num_replicas ?? 1) > 1;
    }
  }

  /**
   * Allows atomic batch publish on an existing Run stream created without it (before 2.12, or by
   * an earlier Runplane), when the server supports it ({@link ATOMIC_BATCH_MIN_SERVER}): the
   * admin's step ({@link provisionBus}); services may not update streams and append a decision one
   * event after another until it is done (and they reconnect). On a cluster being upgraded, run it
   * once every node runs 2.12.1 or later: a stream leader of an older release stores the messages of
   * a batch one by one, not atomically.
   * @returns true when the stream allows atomic batches afterwards.
   * @throws NATS errors of the update (e.g. a user without the permission).
   */
  async enableAtomicBatches(): Promise<boolean> {
    if (!serverAtLeast(this.nc.info?.version, ...ATOMIC_BATCH_MIN_SERVER)) return false;
    const info = await this.jsm.streams.info(this.space.stream);
    if (info.config.allow_atomic !== true) await this.jsm.streams.update(this.space.stream, { allow_atomic: true });
    this.atomicStream = true;
    return true;
  }

  /**
   * Raises the Run stream's consumer limit to {@link RUN_STREAM_MAX_CONSUMERS} when it names a
   * lower one or none (a stream created before the limit was set: the server then holds it to its
   * default, 1,000 on 2.15): the admin's step ({@link provisionBus}), as services may not update
   * streams. A server that refuses the change (older than 2.12's editable limit) leaves it as it was.
   * @returns the stream's limit afterwards (as configured; -1: the server's default).
   */
  async raiseConsumerLimit(): Promise<number> {
    const info = await this.jsm.streams.info(this.space.stream);
    const have = info.config.max_consumers ?? -1;
    if (have > 0 && have >= RUN_STREAM_MAX_CONSUMERS) return have;
    try {
      // the client types the limit as fixed at creation; nats-server 2.12+ lets it change
      const raise = { max_consumers: RUN_STREAM_MAX_CONSUMERS } as Partial<StreamUpdateConfig>;
      return (await this.jsm.streams.update(this.space.stream, raise)).config.max_consumers;
    } catch (e) {
      process.stderr.write(
        `runplane event log: the consumer limit of ${this.space.stream} stays ${have} (the server's default when -1): ${e instanceof Error ? e.message : String(e)}\n`,
      );
      return have;
    }
  }

  /** True when {@link appendBatch} stores a decision of several events atomically (else one by one): the stream allows it and the connected server supports it. */
  get atomicBatches(): boolean {
    if (this.atomicBatchMode === 'never' || (this.atomicBatchMode === 'auto' && !this.replicatedStream)) return false;
    return this.atomicStream && serverAtLeast(this.nc.info?.version, ...ATOMIC_BATCH_MIN_SERVER);
  }
  /** True when the stream has more than one replica (a batch is then staged in memory by the server). */
  private replicatedStream = false;

  /** Takes what an existing stream says about itself: replicas, partitions, atomic batches. @throws when it captures other subjects. */
  private adoptStream(info: StreamInfo): void {
    this.leaderReads = (info.config.num_replicas ?? 1) > 1;
    const wanted = allRunsFilter(this.space);
    if (!info.config.subjects?.includes(wanted)) {
      throw new Error(
        `stream ${this.space.stream} captures ${JSON.stringify(info.config.subjects)}, not ${wanted}: RUNPLANE_STREAM and RUNPLANE_SUBJECT_PREFIX do not belong together`,
      );
    }
    this.adoptPartitions(info.config.metadata?.[PARTITIONS_METADATA_KEY]);
    this.atomicStream = info.config.allow_atomic === true;
    this.replicatedStream = (info.config.num_replicas ?? 1) > 1;
  }

  /** Takes the stream's partition count (absent: a server without metadata, or an older stream: the configured count). */
  private adoptPartitions(stored: string | undefined): void {
    if (stored === undefined) return;
    const n = Number(stored);
    if (!/^\d+$/.test(stored) || n < 1 || n > MAX_PARTITIONS) {
      throw new Error(
        `stream ${this.space.stream} has ${PARTITIONS_METADATA_KEY}=${JSON.stringify(stored)}, not a partition count 1..${MAX_PARTITIONS}`,
      );
    }
    if (n !== this.space.partitions) this.onPartitionsMismatch(this.space.partitions, n);
    this.space = { ...this.space, partitions: n };
  }

  /**
   * One stored message of the Run stream, by sequence or the last on a subject, or null. On one
   * server a direct get. On a replicated stream (a cluster) the leader's `STREAM.MSG.GET`: with
   * `allow_direct` every replica answers direct gets, and a follower a few ms behind answered the
   * read a service made on the delivery of an event without that event, so the decision the event
   * should have triggered was never taken (a finished Run left unsettled on the 3-node cluster,
   * seen in `npm run bench -- --nats-cluster`). The leader holds every message a consumer delivered.
   */
  async readMessage(query: { seq: number } | { last_by_subj: string }): Promise<StoredMsg | null> {
    const get = () =>
      this.leaderReads ? this.jsm.streams.getMessage(this.space.stream, query) : this.jsm.direct.getMessage(this.space.stream, query);
    const subject = 'last_by_subj' in query ? query.last_by_subj : null;
    const floor = subject === null ? 0 : (this.storedFloor.get(subject) ?? 0);
    // a stale answer (this process already saw a later message of that subject stored) is read
    // again under the staleRead policy, then handed back as RetryLater
    return retry(
      'staleRead',
      async () => {
        const msg = await get();
        if (floor === 0 || (msg !== null && msg.seq >= floor)) return msg;
        throw new RetryLater(
          `a read of ${subject} answered sequence ${msg?.seq ?? 'none'}, but ${floor} is stored there (a copy of the stream behind)`,
          250,
        );
      },
      { shouldRetry: ({ error }) => error instanceof RetryLater },
    );
  }

  /**
   * Highest sequence this process knows is stored on each Run subject: what a consumer delivered
   * to it ({@link noteStored}) and what it appended. A read of the last message of a subject that
   * answers below it came from a copy of the stream that is behind: {@link readMessage} reads
   * again, and past its retries throws {@link RetryLater}, so a decision is never taken from a
   * log that lacks the very event that triggered it (K10, K11: a wake is never swallowed).
   * Bounded: the oldest subjects are forgotten first.
   */
  private readonly storedFloor = new Map<string, number>();

  /** Records that `seq` is stored on `subject` (a delivered or appended message): later reads of that subject must reach it. */
  noteStored(subject: string, seq: number): void {
    const known = this.storedFloor.get(subject) ?? 0;
    if (seq <= known) return;
    this.storedFloor.delete(subject);
    this.storedFloor.set(subject, seq);
    if (this.storedFloor.size > STORED_FLOOR_MAX) this.storedFloor.delete(this.storedFloor.keys().next().value!);
  }

  /** Deletes the stream: test clean-up only. */
  async destroyStream(): Promise<void> {
    await this.jsm.streams.delete(this.space.stream).catch(() => undefined);
  }

  /** The key this log signs `event` with: its type's owner's, when this log holds it. */
  private signer(event: RunEvent): EventSigner | undefined {
    return this.signers.get(EventCatalog[event.type].owner);
  }

  /**
   * The headers of a single append: the signature of the event's owner (signing.ts) over the
   * subject, event id and `body`, and the trace context; undefined when this log holds no key for
   * the owner (the caller then sends the trace headers alone).
   */
  private signedHeaders(subject: string, event: RunEvent, body: string): MsgHdrs | undefined {
    const signer = this.signer(event);
    if (!signer) return undefined;
    const h = natsHeaders();
    for (const [name, value] of signatureHeaders(signer, subject, event.eventId, body)) h.set(name, value);
    injectTraceContext(h);
    return h;
  }

  subjectOf(event: RunEvent): string {
    return runSubject(this.space, event.runId, subjectTokenOf(event));
  }

  /**
   * Appends `event` to `<prefix>.run.<runId>.<owner>.<partition>` only if that subject's last sequence is
   * still `expectedLastSubjectSeq` (0 = the subject must be empty), stamped with `prevSeq` (that
   * expectation: the subject's verified back-link), `earlierSeqs` (the sequences of earlier
   * events on the subject the writer knows, newest first: read-ahead hints) and this log's
   * `writer` (with `epoch`, the fencing epoch of the lease the writer executes under, when given). K6, K11.
   *
   * An attempt whose outcome is unknown (timeout, NATS restarting) is retried with the same event
   * id, with backoff, for up to `appendRetryMs`: JetStream's de-duplication by `Nats-Msg-Id`
   * makes that safe. When JetStream answers "duplicate", the stored message is read at the
   * sequence it names and compared: this process's own earlier attempt of this append (its
   * acknowledgement was lost) counts as stored (`recovered`); anything else means the decision
   * was already recorded by another writer (or an earlier execution), and the caller must not
   * run the decision's side effect.
   * @throws AppendConflict (`kind` `wrong-last-sequence` or `decided-elsewhere`): re-read and decide again.
   * @throws AppendRefused (`size`) when the event is larger than the broker's `max_payload`: never attempted, never retried.
   * @throws the last transient error once `appendRetryMs` is spent; other NATS errors at once.
   */
  async append(event: RunEvent, expectedLastSubjectSeq: number, earlierSeqs: readonly number[] = [], epoch?: number): Promise<AppendResult> {
    const subject = this.subjectOf(event);
    return inSpan(
      `append ${event.type}`,
      { kind: SpanKind.PRODUCER, attributes: appendAttributes(subject, event, expectedLastSubjectSeq) },
      async (span) => {
        const result = await this.appendTraced(subject, event, expectedLastSubjectSeq, earlierSeqs, epoch);
        span.setAttributes({ 'runplane.seq': result.seq, 'runplane.recovered': result.recovered });
        return result;
      },
    );
  }

  /** {@link append} inside its span: the message carries the span's context (`traceparent`). */
  private async appendTraced(
    subject: string,
    event: RunEvent,
    expectedLastSubjectSeq: number,
    earlierSeqs: readonly number[],
    epoch: number | undefined,
  ): Promise<AppendResult> {
    const hints = earlierSeqs.filter((s) => s < expectedLastSubjectSeq).slice(0, MAX_EARLIER_SEQS);
    const writer = epoch === undefined ? this.writer : { ...this.writer, epoch };
    const stamped = { ...event, prevSeq: expectedLastSubjectSeq, ...(hints.length ? { earlierSeqs: hints } : {}), writer } as RunEvent;
    const body = JSON.stringify(stamped);
    // refused here, before any attempt: the client would refuse it on every retry (K11: the owner records why instead)
    const bytes = Buffer.byteLength(body, 'utf8');
    const maxPayload = this.nc.info?.max_payload;
    if (maxPayload && bytes > maxPayload) {
      throw new AppendRefused(subject, 'size', `${event.type} ${event.eventId} is ${bytes} bytes, over the broker's max_payload of ${maxPayload}`);
    }
    // signed once: every retry sends the same bytes with the same signature (de-duplication holds)
    const signedHeaders = this.signedHeaders(subject, event, body);
    const signed = signedHeaders !== undefined;
    const headers = signedHeaders ?? traceHeaders();
    let attempts = 0;
    const appended = retry(
      'transientAppend',
      async () => {
        attempts++;
        let ack;
        try {
          ack = await this.js.publish(subject, body, {
            msgID: event.eventId,
            expect: { lastSubjectSequence: expectedLastSubjectSeq },
            ...(headers ? { headers } : {}),
          });
        } catch (e) {
          // a wrong last sequence, or (on a replicated stream) another write on the subject still in
          // flight, whose expectation the server cannot check yet: either way another write came
          // first, a conflict to decide again from the log. Left unmapped, the in-flight refusal
          // failed the caller's handler: a trial's tools process lost tool results it held (K5).
          if (e instanceof JetStreamApiError && (e.code === WRONG_LAST_SEQUENCE || e.code === WRONG_LAST_SEQUENCE_IN_FLIGHT)) {
            // nats-server 2.11+ checks the expectation before Nats-Msg-Id: a retry of an attempt
            // that was stored (its ack lost) is refused as a wrong last sequence, not a duplicate.
            const own = attempts > 1 ? await this.ownLastOn(subject, event.eventId, expectedLastSubjectSeq) : null;
            if (own) return { seq: own.seq, stored: own, recovered: true };
            throw new AbortError(new AppendConflict(subject, expectedLastSubjectSeq, `${e.message} (${e.code})`, 'wrong-last-sequence'));
          }
          if (isTransientNatsError(e)) throw e;
          throw new AbortError(e as Error);
        }
        const stored: StoredEvent = { seq: ack.seq, subject, event: stamped };
        this.noteStored(subject, ack.seq);
        if (!ack.duplicate) {
          if (signed) this.signatures?.trustOwn(ack.seq, subject);
          return { seq: ack.seq, stored, recovered: false };
        }
        const existing = await this.getStored(ack.seq);
        if (attempts > 1 && existing?.event.eventId === event.eventId && existing.event.writer?.instance === this.writer.instance) {
          return { seq: ack.seq, stored: existing, recovered: true };
        }
        const by = existing?.event.writer ? `${existing.event.writer.service}/${existing.event.writer.instance}` : 'an unknown writer';
        throw new AbortError(
          new AppendConflict(
            subject,
            expectedLastSubjectSeq,
            `event ${event.eventId} is already stored at sequence ${ack.seq} by ${by}`,
            'decided-elsewhere',
          ),
        );
      },
      { maxRetryTime: this.appendRetryMs, shouldRetry: ({ error }) => isTransientNatsError(error) },
    );
    try {
      const result = await appended;
      recordAppend(event.owner, 'ok');
      return result;
    } catch (e) {
      if (e instanceof AppendConflict) recordAppend(event.owner, 'conflict');
      throw e;
    }
  }

  /**
   * Appends the events of one decision together: with an atomic batch publish (nats-server
   * 2.12.1+, ADR-50; the stream allows it, {@link atomicBatches}) all of them are stored, in order
   * and at consecutive sequences, or none is, in one request (the messages before the last go
   * without a reply; the last commits the batch and carries its acknowledgement). Each event goes
   * on its own subject (`<prefix>.run.<runId>.<owner>.<partition>`; a decision may hold events on
   * several, e.g. recovery's fences on the tools and runtime subjects), stamped as {@link append}
   * stamps it, with its id as `Nats-Msg-Id`:
   * - the first event of a subject in the batch is conditional on that subject's last sequence
   *   (`expectedLastSubjectSeq`, required; stamped `prevSeq`, with `earlierSeqs` hints), checked
   *   by the server when the batch commits (K6);
   * - a later event of the same subject must not name an expectation (the server refuses one on a
   *   subject the batch already writes, 10164): it follows the batch's previous event of that
   *   subject, stamped `prevInBatch` (that event's batch position); readers resolve its `prevSeq`
   *   ({@link verifyStored}), and so does the result.
   * A single event, a stream or server without atomic batches (the reason reported once through
   * `onSequentialBatches`), or more than {@link MAX_ATOMIC_BATCH} events: appended one after
   * another with {@link append} (each conditional on its predecessor), a prefix of them stored when
   * a later one conflicts, which `onStored` reports.
   *
   * Outcome unknown (timeout, NATS restarting, the batch abandoned or too many in flight): the
   * same events are sent again as a new batch, for up to `appendRetryMs`. An earlier attempt that
   * was stored makes the server refuse the retry (its ids are duplicates, 10201, or past the
   * duplicate window its expectations are stale, 10071): the stored batch is then read back, and
   * when it is this call's events, stored by this process in this order, it counts as stored
   * (`recovered`); otherwise the decision was recorded by another writer.
   * @param items the decision's events in order, with each subject's expectation on its first event.
   * @param epoch the fencing epoch stamped as `writer.epoch` (K6).
   * @param onStored called for each stored event in order, as soon as it is known stored (all at
   *   the commit; one by one when appended one by one, also before a later one conflicts).
   * @returns the stored events in order.
   * @throws AppendConflict (`wrong-last-sequence`: an expectation is stale, or another write on one
   *   of the subjects is in flight, 10164; `decided-elsewhere`: the event ids are stored, not by
   *   this call): nothing of this batch was stored by this call; re-read and decide again.
   * @throws AppendRefused (`size`) when an event is over the broker's `max_payload`: nothing attempted.
   * @throws RangeError when an expectation is missing on a subject's first event or given on a later one.
   * @throws the last transient error once `appendRetryMs` is spent; other NATS errors at once.
   */
  async appendBatch(items: readonly BatchItem[], epoch?: number, onStored?: (result: AppendResult) => void): Promise<AppendResult[]> {
    // one event: its append's own span is enough
    if (items.length < 2) return this.appendBatchTraced(items, epoch, onStored);
    const first = items[0]?.event;
    return inSpan(
      `append batch`,
      {
        kind: SpanKind.PRODUCER,
        attributes: {
          'messaging.system': 'nats',
          'messaging.operation.type': 'send',
          'messaging.batch.message_count': items.length,
          'runplane.event_types': items.map((i) => i.event.type),
          ...(first ? { 'runplane.run_id': first.runId } : {}),
        },
      },
      async (span) => {
        const results = await this.appendBatchTraced(items, epoch, onStored);
        if (results.length) span.setAttribute('runplane.seq', results[results.length - 1]!.seq);
        return results;
      },
    );
  }

  /** {@link appendBatch} inside its span: each message of an atomic batch carries the span's context. */
  private async appendBatchTraced(
    items: readonly BatchItem[],
    epoch: number | undefined,
    onStored: ((result: AppendResult) => void) | undefined,
  ): Promise<AppendResult[]> {
    const subjects = items.map((i) => this.subjectOf(i.event));
    const firstOf = new Map<string, number>();
    items.forEach((item, k) => {
      const first = !firstOf.has(subjects[k]!);
      if (first) firstOf.set(subjects[k]!, k);
      if (first !== (item.expectedLastSubjectSeq !== undefined)) {
        throw new RangeError(
          `event ${k + 1} of the batch (${item.event.type} on ${subjects[k]}) ${first ? 'needs an expectation: it is the first on its subject' : 'may not name an expectation: an earlier event of the batch is on its subject'}`,
        );
      }
    });
    if (items.length < 2 || items.length > MAX_ATOMIC_BATCH || !this.atomicBatches) {
      // said once, when atomic batches were wanted but cannot be used (not for the configured choice)
      const intended = this.atomicBatchMode === 'never' || (this.atomicBatchMode === 'auto' && !this.replicatedStream);
      if (items.length >= 2 && !intended && !this.sequentialReported) {
        this.sequentialReported = true;
        this.onSequentialBatches(
          items.length > MAX_ATOMIC_BATCH
            ? `a decision of ${items.length} events is over the ${MAX_ATOMIC_BATCH} of one atomic batch`
            : !serverAtLeast(this.nc.info?.version, ...ATOMIC_BATCH_MIN_SERVER)
              ? `nats-server ${this.nc.info?.version ?? '(unknown)'} has no atomic batch publish with de-duplication (${ATOMIC_BATCH_MIN_SERVER.join('.')}+)`
              : `the stream does not allow atomic batches (allow_atomic; the admin enables it: runplane provision)`,
        );
      }
      return this.appendOneByOne(items, subjects, epoch, onStored);
    }

    // stamp every event as append does; a later event of a subject links to the batch's previous one there
    const writer = epoch === undefined ? this.writer : { ...this.writer, epoch };
    const lastAt = new Map<string, number>(); // subject -> batch position (1-based) of its latest event so far
    const planned = items.map((item, k) => {
      const subject = subjects[k]!;
      const position = k + 1;
      const before = lastAt.get(subject);
      lastAt.set(subject, position);
      let stamped: RunEvent;
      if (before === undefined) {
        const expected = item.expectedLastSubjectSeq!;
        const hints = (item.earlierSeqs ?? []).filter((s) => s < expected).slice(0, MAX_EARLIER_SEQS);
        stamped = { ...item.event, prevSeq: expected, ...(hints.length ? { earlierSeqs: hints } : {}), writer };
      } else {
        // hints: what is known before the batch on this subject (the first event's expectation and its hints)
        // (only the second event of a subject: a third's predecessors in the batch have no known sequence yet)
        const first = items[firstOf.get(subject)!]!;
        const p0 = first.expectedLastSubjectSeq!;
        const hints =
          before === firstOf.get(subject)! + 1
            ? [p0, ...(first.earlierSeqs ?? []).filter((s) => s < p0)].filter((s) => s > 0).slice(0, MAX_EARLIER_SEQS)
            : [];
        const linked: Partial<RunEvent> = { ...item.event, prevInBatch: before, writer };
        delete linked.prevSeq;
        delete linked.earlierSeqs;
        stamped = { ...linked, ...(hints.length ? { earlierSeqs: hints } : {}) } as RunEvent;
      }
      const body = JSON.stringify(stamped);
      const bytes = Buffer.byteLength(body, 'utf8');
      const maxPayload = this.nc.info?.max_payload;
      if (maxPayload && bytes > maxPayload) {
        throw new AppendRefused(
          subject,
          'size',
          `${item.event.type} ${item.event.eventId} is ${bytes} bytes, over the broker's max_payload of ${maxPayload}`,
        );
      }
      // signed once per planned event: a retried batch sends the same bytes and signatures
      const signer = this.signer(stamped);
      const signature = signer ? signatureHeaders(signer, subject, stamped.eventId, body) : [];
      return {
        subject,
        stamped,
        body,
        signature,
        prevInBatch: before,
        expected: before === undefined ? item.expectedLastSubjectSeq! : undefined,
      };
    });
    const n = planned.length;
    const conflictAt = planned[0]!;
    /** The results once the batch's last message landed at `lastSeq`: sequences are consecutive. */
    const resultsAt = (lastSeq: number, recovered: boolean): AppendResult[] =>
      planned.map((p, k) => {
        const seq = lastSeq - (n - 1 - k);
        const prevSeq = p.prevInBatch === undefined ? p.expected! : lastSeq - (n - p.prevInBatch);
        return { seq, stored: { seq, subject: p.subject, event: { ...p.stamped, prevSeq } }, recovered };
      });
    const done = (results: AppendResult[]): AppendResult[] => {
      for (const [k, r] of results.entries()) {
        this.noteStored(r.stored.subject, r.seq);
        // stored by this batch's commit (not one found stored before): signed here, so not verified again when delivered
        if (!r.recovered && planned[k]!.signature.length > 0) this.signatures?.trustOwn(r.seq, r.stored.subject);
        onStored?.(r);
      }
      return results;
    };

    let attempts = 0;
    let disabled = false;
    const attempt = retry(
      'transientAppend',
      async (): Promise<AppendResult[] | null> => {
        attempts++;
        const batchId = randomUUID();
        let reply: BatchReply;
        try {
          for (let k = 0; k < n - 1; k++)
            this.nc.publish(planned[k]!.subject, planned[k]!.body, { headers: this.batchHeaders(batchId, k + 1, planned[k]!) });
          const commit = this.batchHeaders(batchId, n, planned[n - 1]!);
          commit.set(BATCH_COMMIT, '1');
          const msg = await this.nc.request(planned[n - 1]!.subject, planned[n - 1]!.body, { headers: commit, timeout: BATCH_COMMIT_TIMEOUT_MS });
          reply = msg.json<BatchReply>();
        } catch (e) {
          if (isTransientNatsError(e)) throw e;
          throw new AbortError(e as Error);
        }
        const code = reply.error?.err_code;
        if (code === undefined) {
          if (reply.count !== n || typeof reply.seq !== 'number') {
            throw new AbortError(new Error(`atomic batch of ${n} events acknowledged as ${JSON.stringify(reply)}`));
          }
          return resultsAt(reply.seq, false);
        }
        const detail = `${reply.error!.description} (${code})`;
        switch (code) {
          case WRONG_LAST_SEQUENCE:
          case WRONG_LAST_SEQUENCE_IN_FLIGHT: {
            // an earlier attempt stored past the duplicate window makes the expectations stale
            const own = attempts > 1 ? await this.ownBatch(planned) : null;
            if (own) return own;
            throw new AbortError(
              new AppendConflict(conflictAt.subject, conflictAt.expected!, `atomic batch of ${n} events: ${detail}`, 'wrong-last-sequence'),
            );
          }
          case BATCH_HAS_DUPLICATE: {
            // only a retry can find its own earlier attempt: a first attempt whose ids are stored
            // was decided by another call (this process's own included): its side effects are not ours
            const own = attempts > 1 ? await this.ownBatch(planned) : null;
            if (own) return own;
            throw new AbortError(
              new AppendConflict(
                conflictAt.subject,
                conflictAt.expected!,
                `atomic batch of ${n} events: an event id is already stored (${detail})`,
                'decided-elsewhere',
              ),
            );
          }
          case ATOMIC_PUBLISH_DISABLED:
          case BATCH_TOO_LARGE:
            // the stream no longer takes atomic batches (or not this long): nothing was stored by this attempt
            disabled = true;
            return null;
          case BATCH_INCOMPLETE:
          case BATCH_TOO_MANY_IN_FLIGHT:
          case DUPLICATE_IN_PROCESS:
            throw new BatchNotStored(detail);
          default:
            if (reply.error!.code === 503) throw new BatchNotStored(detail);
            throw new AbortError(new Error(`atomic batch of ${n} events refused: ${detail}`));
        }
      },
      { maxRetryTime: this.appendRetryMs, shouldRetry: ({ error }) => isTransientNatsError(error) },
    );
    let stored: AppendResult[] | null;
    try {
      stored = await attempt;
    } catch (e) {
      if (e instanceof AppendConflict) recordAppend(conflictAt.stamped.owner, 'conflict');
      throw e;
    }
    if (stored) {
      for (const p of planned) recordAppend(p.stamped.owner, 'ok');
      return done(stored);
    }
    if (disabled) {
      this.atomicStream = false;
      if (!this.sequentialReported) {
        this.sequentialReported = true;
        this.onSequentialBatches('the stream refused an atomic batch (allow_atomic off, or a smaller batch limit)');
      }
    }
    return this.appendOneByOne(items, subjects, epoch, onStored);
  }

  /** The headers of the `position`-th message of an atomic batch: batch id and position, the event id, and the subject expectation on a subject's first event. */
  private batchHeaders(
    batchId: string,
    position: number,
    planned: { stamped: RunEvent; expected: number | undefined; signature: readonly [string, string][] },
  ) {
    const h = natsHeaders();
    for (const [name, value] of planned.signature) h.set(name, value);
    h.set(BATCH_ID, batchId);
    h.set(BATCH_SEQUENCE, String(position));
    h.set('Nats-Msg-Id', planned.stamped.eventId);
    if (planned.expected !== undefined) h.set(EXPECTED_LAST_SUBJECT_SEQUENCE, String(planned.expected));
    injectTraceContext(h);
    return h;
  }

  /**
   * The stored batch when it is exactly this call's `planned` events, stored by this process in
   * this order at consecutive sequences ending with the last one as its subject's last message,
   * else null (read back after a retry was refused: {@link appendBatch}).
   */
  private async ownBatch(planned: readonly { subject: string; stamped: RunEvent }[]): Promise<AppendResult[] | null> {
    const n = planned.length;
    const last = await this.readMessage({ last_by_subj: planned[n - 1]!.subject });
    if (!last || last.header?.get(BATCH_SEQUENCE) !== String(n) || last.seq < n) return null;
    const first = last.seq - n + 1;
    const msgs = await Promise.all(planned.map((_, k) => (k === n - 1 ? Promise.resolve(last) : this.readMessage({ seq: first + k }))));
    const results: AppendResult[] = [];
    for (const [k, m] of msgs.entries()) {
      if (!m || m.subject !== planned[k]!.subject || m.header?.get(BATCH_SEQUENCE) !== String(k + 1)) return null;
      let stored: StoredEvent;
      try {
        stored = verifyStored(m.seq, m.subject, m.data, m.header, this.space.partitions, this.signatures);
      } catch {
        return null;
      }
      const mine = planned[k]!.stamped;
      if (stored.event.eventId !== mine.eventId || stored.event.writer?.instance !== this.writer.instance) return null;
      if ((mine.prevSeq !== undefined && stored.event.prevSeq !== mine.prevSeq) || stored.event.prevInBatch !== mine.prevInBatch) return null;
      results.push({ seq: m.seq, stored, recovered: true });
    }
    return results;
  }

  /** {@link appendBatch} without a batch: one conditional {@link append} after another, each expecting its subject's previous one. */
  private async appendOneByOne(
    items: readonly BatchItem[],
    subjects: readonly string[],
    epoch: number | undefined,
    onStored: ((result: AppendResult) => void) | undefined,
  ): Promise<AppendResult[]> {
    const known = new Map<string, { expected: number; hints: number[] }>();
    const results: AppendResult[] = [];
    for (const [k, item] of items.entries()) {
      const subject = subjects[k]!;
      const at = known.get(subject) ?? { expected: item.expectedLastSubjectSeq!, hints: [...(item.earlierSeqs ?? [])] };
      const result = await this.append(item.event, at.expected, at.hints, epoch);
      known.set(subject, { expected: result.seq, hints: [result.seq, ...at.hints] });
      results.push(result);
      onStored?.(result);
    }
    return results;
  }

  /** The subject's last event when it is this process's own append of `eventId` on top of `prevSeq`, else null. */
  private async ownLastOn(subject: string, eventId: string, prevSeq: number): Promise<StoredEvent | null> {
    const msg = await this.readMessage({ last_by_subj: subject });
    if (!msg) return null;
    try {
      const stored = verifyStored(msg.seq, msg.subject, msg.data, msg.header, this.space.partitions, this.signatures);
      const e = stored.event;
      return e.eventId === eventId && e.prevSeq === prevSeq && e.writer?.instance === this.writer.instance ? stored : null;
    } catch {
      return null;
    }
  }

  /** The stored event at stream sequence `seq` ({@link readMessage}: a direct get, from the leader on a replicated stream), or null when there is none or it is not a fact (not a valid event, or not appended by the log: {@link verifyStored}; reported through `onInvalid`). */
  async getStored(seq: number): Promise<StoredEvent | null> {
    const msg = await this.readMessage({ seq });
    if (!msg) return null;
    return this.factOrSkipped(msg.seq, msg.subject, msg.data, msg.header);
  }

  /**
   * A stored message as the fact it is ({@link verifyStored}), or null when it is not one
   * (garbled, wrong owner, published around the log): skipped, loudly, through `onInvalid`, so one
   * bad message cannot block folding, audits or rebuilds.
   * @throws what `verifyStored` throws other than {@link InvalidStoredEvent}.
   */
  private factOrSkipped(seq: number, subject: string, data: Uint8Array, headers: StoredHeaders | undefined): StoredEvent | null {
    try {
      return verifyStored(seq, subject, data, headers, this.space.partitions, this.signatures);
    } catch (e) {
      if (!(e instanceof InvalidStoredEvent)) throw e;
      this.onInvalid(e);
      return null;
    }
  }

  /** The last fact on one owner's subject of a Run ({@link readMessage}; when the last message is not a fact, {@link verifyStored}, found by reading the Run), or null. */
  async lastOf(runId: string, owner: Owner): Promise<StoredEvent | null> {
    const subject = runSubject(this.space, runId, owner);
    const msg = await this.readMessage({ last_by_subj: subject });
    if (!msg) return null;
    try {
      return verifyStored(msg.seq, msg.subject, msg.data, msg.header, this.space.partitions, this.signatures);
    } catch (e) {
      if (!(e instanceof InvalidStoredEvent)) throw e;
      // the subject's last message is not a fact (garbage, a forgery): the last event on it is
      // found by reading the Run, which skips and reports it
      const events = (await this.catchUp(runId, {})).events.filter((s) => s.subject === subject);
      return events[events.length - 1] ?? null;
    }
  }

  /**
   * Every event of one Run in stream order, as of the moment of the call (from `fromSeq`).
   * Costs one direct get per event of the Run plus one per owner subject, whatever else the
   * stream holds (see {@link catchUp}). With `{ headers: true }` each event carries its
   * message's {@link STORED_HEADERS} (for auditors: `runplane timeline --json`); the services'
   * reads leave it off and copy nothing.
   */
  readRun(runId: string, fromSeq: number, opts: ReadOptions & { headers: true }): Promise<StoredEventWithHeaders[]>;
  readRun(runId: string, fromSeq?: number, opts?: ReadOptions): Promise<StoredEvent[]>;
  async readRun(runId: string, fromSeq = 1, opts: ReadOptions = {}): Promise<StoredEvent[]> {
    return (await this.catchUp(runId, {}, fromSeq, opts)).events;
  }

  /**
   * The Run's events that the caller does not know yet. `known` gives, per owner subject, the
   * last sequence the caller already holds (absent = nothing). Every event records `prevSeq`,
   * the sequence its conditional append expected on its subject, which the server verified: so
   * each subject is a back-linked chain, read from its last event (direct get `last_by_subj`)
   * back to what is known (direct gets by sequence). The cost grows with the Run's new events
   * only, never with other Runs' events, before or interleaved (docs/event-log.md). When a link
   * cannot be followed (an event written before `prevSeq` existed, a message that is not a valid
   * event, a purge), the Run is read whole by a filtered scan instead and `full` is true.
   * `opts.headers`: each event carries its message's {@link STORED_HEADERS} ({@link StoredEventWithHeaders}).
   */
  async catchUp(runId: string, known: Partial<Record<Owner, number>>, fromSeq = 1, opts: ReadOptions = {}): Promise<CatchUp> {
    const lasts = Object.fromEntries(OWNERS.map((o) => [o, 0])) as Record<Owner, number>;
    const withHeaders = opts.headers === true;
    const chains = await Promise.all(
      OWNERS.map((owner) => this.walkBack(runSubject(this.space, runId, owner), known[owner] ?? 0, fromSeq, withHeaders)),
    );
    if (chains.every((c) => c !== null)) {
      OWNERS.forEach((owner, i) => (lasts[owner] = chains[i]!.last));
      const events = chains.flatMap((c) => c.events).sort((a, b) => a.seq - b.seq);
      return { events, lasts, full: false };
    }
    const events: StoredEvent[] = [];
    // every message counts for its subject's last sequence, an invalid one too: the next append
    // there must expect it, or it would conflict for ever
    // (only on the Run's own subjects: a message on another partition's subject is not on the
    // subject an append expects, and must not move its expectation)
    const seen = (subject: string, seq: number) => {
      const token = subject.split('.')[3] as Owner;
      if (token in lasts && subject === runSubject(this.space, runId, token)) lasts[token] = Math.max(lasts[token], seq);
    };
    const eventIds = new Set<string>();
    for await (const e of this.snapshot(runFilter(this.space, runId), 1, 512, seen, withHeaders)) {
      // a copy of an event already read (a replay under another message id) is not a second fact
      if (eventIds.has(e.event.eventId)) {
        this.onInvalid(new InvalidStoredEvent(e.seq, e.subject, `a copy of event ${e.event.eventId}, already stored earlier`, 'duplicate-event'));
        continue;
      }
      eventIds.add(e.event.eventId);
      if (e.seq >= fromSeq) events.push(e);
    }
    return { events, lasts, full: true };
  }

  /**
   * Follows one subject's back-links from its last event down to `stopAt` (exclusive) or below
   * `fromSeq`; null when a link is broken. `last` is the subject's last sequence (0 = empty).
   * A link is the `Nats-Expected-Last-Subject-Sequence` header stored with the message, which the
   * server checked when it stored it, and the event's `prevSeq` must say the same; a message
   * without that header (published by anything but a conditional append), or whose body says
   * otherwise, breaks the chain (a later event of its subject in an atomic batch links by
   * `prevInBatch` instead, resolved by {@link verifyStored}). Each event's `earlierSeqs` hints are fetched in parallel; the
   * result is accepted only where every fetched event's verified link points at the next older one.
   */
  private async walkBack(
    subject: string,
    stopAt: number,
    fromSeq: number,
    withHeaders = false,
  ): Promise<{ events: StoredEvent[]; last: number } | null> {
    const first = await this.readMessage({ last_by_subj: subject });
    if (!first) return stopAt === 0 ? { events: [], last: 0 } : null;
    const last = first.seq;
    if (last < stopAt) return null;
    const floor = Math.max(stopAt + 1, fromSeq);
    /** The event and its verified back-link ({@link verifyStored}: the checked expectation, or the resolved link inside an atomic batch), or null when the message is not a linked event of this subject. */
    const decode = (m: StoredMsg): { stored: StoredEvent; prev: number } | null => {
      if (m.subject !== subject) return null;
      let stored: StoredEvent;
      try {
        stored = verifyStored(m.seq, m.subject, m.data, m.header, this.space.partitions, this.signatures);
      } catch (e) {
        if (!(e instanceof InvalidStoredEvent)) throw e;
        return null; // the scan that follows reads (and reports) it
      }
      if (withHeaders) (stored as StoredEventWithHeaders).headers = storedHeadersOf(m.header);
      // an event without prevSeq (appended before it existed) has no link to follow
      const prev = stored.event.prevSeq;
      return prev === undefined ? null : { stored, prev };
    };
    const events: StoredEvent[] = [];
    let oldest = last >= floor ? decode(first) : null;
    if (last >= floor && !oldest) return null;
    while (oldest) {
      events.push(oldest.stored);
      const prev = oldest.prev;
      if (stopAt > 0 && prev < stopAt) return null; // the chain skips an event this reader knows: not consistent
      if (prev < floor) break;
      const wanted = [prev, ...(oldest.stored.event.earlierSeqs ?? [])].filter((s) => s >= floor);
      const fetched = await Promise.all(wanted.map((seq) => this.readMessage({ seq })));
      let expected = prev;
      oldest = null;
      for (const m of fetched) {
        const e = m ? decode(m) : null;
        // a hint that does not match the verified chain: stop using hints here, follow the link
        if (!e || e.stored.seq !== expected) break;
        if (oldest) events.push(oldest.stored);
        oldest = e;
        expected = e.prev;
        if (stopAt > 0 && expected < stopAt) return null;
        if (expected < floor) break;
      }
      if (!oldest) return null;
    }
    return { events, last };
  }

  /**
   * Follows one Run live from `fromSeq` (inclusive) with an ordered consumer: stored events
   * first, then new ones as they are appended, each once and in stream order. Messages that are
   * not facts (not events, or events the log did not append: {@link verifyStored}) are skipped,
   * reported through `onInvalid`, and the follow goes on. Returns a stop function, which also
   * deletes the consumer.
   *
   * An ordered consumer is one server's (not replicated). When its server stops answering but
   * keeps the connection open (a node of a cluster frozen, its VM paused), the NATS client only
   * asks that server again and again whether the consumer still exists, and the follow waits for
   * as long as the node hangs (a new user's trial: SSE streams silent 60-90 s, until the thaw,
   * while their Runs settled). So when the consumer has been silent for {@link FOLLOW_SILENCE_MS}
   * (no message, no idle heartbeat), the follow drops it and starts a new one at the sequence after
   * the last message it handled, on whichever node the stream's leader places it; it tries again
   * every {@link FOLLOW_RESTART_WAIT_MS} while no consumer can be made (NATS unreachable).
   * @throws what creating the first consumer throws (no stream, NATS unreachable).
   */
  async followRun(runId: string, fromSeq: number, onEvent: (e: StoredEvent) => void | Promise<void>): Promise<() => Promise<void>> {
    const open = async (from: number) => {
      const consumer = await this.js.consumers.get(this.space.stream, {
        filter_subjects: runFilter(this.space, runId),
        ...(from > 1 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from } : { deliver_policy: DeliverPolicy.All }),
      });
      // pulls expire after CONSUME_EXPIRES_MS: a follow whose consumer the server lost (a restart) is recreated within seconds
      return { consumer, messages: await consumer.consume({ expires: CONSUME_EXPIRES_MS }) };
    };
    let current = await open(fromSeq);
    let next = fromSeq;
    let stopped = false;
    let restartWait: ReturnType<typeof setTimeout> | null = null;
    let wake: (() => void) | null = null;
    const done = (async () => {
      for (;;) {
        const { consumer, messages } = current;
        // a watchdog on the consumer's signs of life (messages, idle heartbeats, answers to pulls):
        // the client's own missed-heartbeat notice stops after a reconnection whose consumer check
        // cannot be answered (its node hangs), so silence is timed here
        let stale = false;
        let lastLife = Date.now();
        void (async () => {
          for await (const s of messages.status())
            if (s.type === 'heartbeat' || s.type === 'discard' || s.type === 'flow_control') lastLife = Date.now();
        })().catch(() => undefined);
        const watchdog = setInterval(() => {
          if (Date.now() - lastLife <= FOLLOW_SILENCE_MS) return;
          stale = true;
          messages.stop();
        }, FOLLOW_WATCH_EVERY_MS);
        watchdog.unref();
        // a handler's error ends the follow (as it always did); only the consumer's own end starts a new one
        let handlerFailed: { error: unknown } | null = null;
        try {
          for await (const m of messages) {
            lastLife = Date.now();
            const stored = this.factOrSkipped(m.seq, m.subject, m.data, m.headers);
            if (stored) {
              try {
                await onEvent(stored);
              } catch (error) {
                handlerFailed = { error };
                break;
              }
            }
            next = m.seq + 1;
          }
        } catch {
          // the iterator ended in an error (the consumer or the connection went): a new consumer below, unless stopped
          stale = true;
        } finally {
          clearInterval(watchdog);
        }
        if (handlerFailed) throw handlerFailed.error;
        if (stopped || !stale) return;
        // not awaited: the old consumer's server may hang; an ordered consumer goes with its inactivity anyway
        void consumer.delete().catch(() => undefined);
        for (;;) {
          if (stopped) return;
          try {
            current = await open(next);
            break;
          } catch {
            await new Promise<void>((r) => {
              wake = r;
              restartWait = setTimeout(r, FOLLOW_RESTART_WAIT_MS);
            });
          }
        }
        if (stopped) {
          await current.messages.close().catch(() => undefined);
          await current.consumer.delete().catch(() => undefined);
          return;
        }
      }
    })();
    return async () => {
      stopped = true;
      if (restartWait) clearTimeout(restartWait);
      wake?.();
      await current.messages.close();
      await done.catch(() => undefined);
      // the server-side consumer goes with its observer, not after its inactivity threshold (5 minutes)
      await current.consumer.delete().catch(() => undefined);
    };
  }

  /** Last sequence of the whole stream (0 when empty). */
  async lastSeq(): Promise<number> {
    const info = await this.jsm.streams.info(this.space.stream);
    return info.state.last_seq;
  }

  /**
   * Reads every stored message of one Run by a filtered scan of its subjects, in stream order, as of
   * the moment of the call: for audits, which must see every message (a copy stored twice, a
   * message that is not a fact: reported through `onInvalid`) rather than follow the back-links the
   * audit checks ({@link readRun} follows them). Reads never append (K11).
   */
  readRunWhole(runId: string): AsyncGenerator<StoredEvent> {
    return this.snapshot(runFilter(this.space, runId), 1);
  }

  /**
   * Reads every stored event of every Run in stream order, as of the call (for projection
   * rebuilds and audits); with `{ headers: true }` each with its {@link STORED_HEADERS}.
   */
  readAll(opts: ReadOptions & { headers: true }): AsyncGenerator<StoredEventWithHeaders>;
  readAll(opts?: ReadOptions): AsyncGenerator<StoredEvent>;
  readAll(opts: ReadOptions = {}): AsyncGenerator<StoredEvent> {
    return this.snapshot(allRunsFilter(this.space), 1, 512, undefined, opts.headers === true, opts.fetchExpiresMs);
  }

  /**
   * Reads the events matching `filter` from `fromSeq` as of the moment of the call, in stream order,
   * with batched direct gets (`$JS.API.DIRECT.GET.<stream>` with `batch` and `next_by_subj`,
   * nats-server 2.11+): no consumer is made, so a reader needs no right to make one (the ops user
   * has none: bus.ts `opsImports`). "Now" is the last message matching the filter, asked before
   * the first batch ({@link readMessage}: of the leader on a replicated stream); the read ends at
   * it. A batch that ends short of it (a replica a little behind answered it) is asked again from
   * the next sequence, and one that stops arriving for `idleMs` (a server frozen or gone) too,
   * from the sequence after the last message received, a few times each. Reads never append (K11).
   * @throws Error when no batch gets further for {@link READ_STALLS} tries in a row (the read
   *   would otherwise wait for ever), and what the first read throws (no stream, NATS unreachable).
   */
  private async *snapshot(
    filter: string,
    fromSeq: number,
    batchSize = 512,
    seen?: (subject: string, seq: number) => void,
    withHeaders = false,
    idleMs = READ_FETCH_EXPIRES_MS,
  ): AsyncGenerator<StoredEvent> {
    const last = await this.readMessage({ last_by_subj: filter });
    if (!last || last.seq < fromSeq) return;
    /** The sequence after the last message read (where the next batch starts). */
    let position = fromSeq;
    let stalls = 0;
    let batch = batchSize;
    while (position <= last.seq) {
      let messages: Msg[];
      try {
        messages = await this.directBatch(filter, position, batch, idleMs);
      } catch (e) {
        if (!(e instanceof DirectBatchStalled) && !isTransientNatsError(e)) throw e;
        if (e instanceof DirectBatchStalled) messages = e.received;
        else messages = [];
        // one message, then silence: a broker that passes one reply per request (an account's import
        // of direct gets without `response: stream`, as brokers configured before it had) drops the
        // rest of every batch, and the read went on at one message per stall (an upgrade trial's
        // audit: 56 s for 11 events, and nothing said). The rest of this read asks one at a time.
        if (e instanceof DirectBatchStalled && batch > 1 && messages.length === 1 && position + 1 <= last.seq) {
          batch = 1;
          this.saySingleReplies();
        }
      }
      let got = 0;
      for (const m of messages) {
        // the server's own headers come after the stored message's, which a publisher may have
        // given the same names (a trial's `Nats-Sequence: 5` sent the read back to 5 for ever)
        const seq = Number(m.headers!.last('Nats-Sequence'));
        if (!Number.isSafeInteger(seq) || seq < position)
          throw new Error(`reading ${filter}: an answer from sequence ${position} names sequence ${m.headers!.last('Nats-Sequence')}`);
        if (seq > last.seq) break;
        const subject = m.headers!.last('Nats-Subject');
        got++;
        position = seq + 1;
        seen?.(subject, seq);
        const stored = this.factOrSkipped(seq, subject, m.data, m.headers);
        if (!stored) continue;
        if (withHeaders) (stored as StoredEventWithHeaders).headers = storedHeadersOf(m.headers);
        yield stored;
      }
      if (got > 0) {
        stalls = 0;
        continue;
      }
      if (++stalls > READ_STALLS)
        throw new Error(`reading ${filter}: no message at or after sequence ${position} in ${READ_STALLS} tries, but ${last.seq} is stored`);
      await new Promise((r) => setTimeout(r, 100 * stalls));
    }
  }

  /**
   * One batched direct get: up to `batch` stored messages matching `filter` from sequence `seq`,
   * in stream order, each with its own headers and the server's (`Nats-Sequence`, `Nats-Subject`).
   * Resolves when the server ends the batch (status 204) or has none (404).
   * @throws DirectBatchStalled (with what arrived) when nothing arrives for `idleMs`; an Error for
   *   any other status (a permission refused arrives as the connection's error).
   */
  private directBatch(filter: string, seq: number, batch: number, idleMs: number): Promise<Msg[]> {
    return new Promise((resolve, reject) => {
      const received: Msg[] = [];
      let timer: ReturnType<typeof setTimeout> | undefined;
      const finish = (error?: Error) => {
        clearTimeout(timer);
        sub.unsubscribe();
        if (error) reject(error);
        else resolve(received);
      };
      const arm = () => {
        clearTimeout(timer);
        timer = setTimeout(() => finish(new DirectBatchStalled(filter, seq, idleMs, received)), idleMs);
      };
      // the connection's own inbox prefix (the user's: natsUserOptions), as the client's requests use
      const prefix = (this.nc as NatsConnection & { options?: { inboxPrefix?: string } }).options?.inboxPrefix;
      const sub = this.nc.subscribe(createInbox(prefix), {
        callback: (err, msg) => {
          if (err) return finish(err);
          const h = msg.headers;
          if (h && msg.data.length === 0 && h.code >= 200 && !h.last('Nats-Sequence')) {
            if (h.code === 204 || h.code === 404) return finish();
            return finish(new Error(`reading ${filter} from sequence ${seq}: ${h.code} ${h.description}`));
          }
          received.push(msg);
          // the batch is whole: its end-of-batch status need not be waited for (a broker that
          // passes one reply per request never sends it)
          if (received.length >= batch) return finish();
          arm();
        },
      });
      arm();
      this.nc.publish(`$JS.API.DIRECT.GET.${this.space.stream}`, JSON.stringify({ seq, batch, next_by_subj: filter }), { reply: sub.getSubject() });
    });
  }

  private saidSingleReplies = false;

  /** Says once per log that batched reads come one message per request, and what to do about it. */
  private saySingleReplies(): void {
    if (this.saidSingleReplies) return;
    this.saidSingleReplies = true;
    process.stderr.write(
      `runplane event log: a batched read of ${this.space.stream} got one message per request (the broker passes one reply: ` +
        `this user's account imports direct gets without \`response: stream\`, as a broker configured by an earlier release does); ` +
        `reading one message at a time, slower. Apply the current NATS accounts (runplane docs nats-auth; deploy/nats/accounts.conf)\n`,
    );
  }

  /**
   * Closes the connection: drains it (what was sent is flushed, subscriptions end) when the server
   * answers within {@link CLOSE_DRAIN_MS}, else closes it anyway, so a process shutting down during
   * a NATS outage (the client reconnecting, or the server frozen) still exits. Never throws.
   */
  async close(): Promise<void> {
    await closeConnection(this.nc);
  }
}

/** Milliseconds a graceful close waits for the drain before closing the connection anyway. */
export const CLOSE_DRAIN_MS = 3_000;

/**
 * Drains `nc`, bounded by `drainMs`, then closes it whatever the drain did (a drain waits for the
 * server, which may be gone or frozen: then it would never end). Resolves once `nc` is closed;
 * never throws.
 */
export async function closeConnection(nc: NatsConnection, drainMs = CLOSE_DRAIN_MS): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<void>((resolve) => (timer = setTimeout(resolve, drainMs)));
  try {
    await Promise.race([nc.drain().catch(() => undefined), bound]);
  } finally {
    clearTimeout(timer);
  }
  if (!nc.isClosed()) await nc.close().catch(() => undefined);
}

export type { JsMsg };

/**
 * Headers carrying the active trace context (`traceparent`) for a publish, or undefined when no
 * span is active (tracing off): the message then goes without headers of its own, as before.
 */
export function traceHeaders(): MsgHdrs | undefined {
  const h = natsHeaders();
  return injectTraceContext(h) && h.keys().length > 0 ? h : undefined;
}

/** The attributes of an append's span (OpenTelemetry messaging conventions, and the Run's). */
function appendAttributes(subject: string, event: RunEvent, expectedLastSubjectSeq: number) {
  return {
    'messaging.system': 'nats',
    'messaging.operation.type': 'send',
    'messaging.destination.name': subject,
    'messaging.message.id': event.eventId,
    'runplane.run_id': event.runId,
    'runplane.event_type': event.type,
    'runplane.expected_last_subject_seq': expectedLastSubjectSeq,
  };
}
