/**
 * Following Runs durably from a downstream service (docs/consumers.md): a durable JetStream pull
 * consumer on the Run stream, named with `DOWNSTREAM_CONSUMER_PREFIX`, whose handlers are
 * typed per event type by the zod catalogue of @runplane/contracts. It is the services' own
 * {@link DurableConsumer} (heartbeats while a handler runs, consuming again after a leader change
 * or a reconnection, one Run's events one at a time) under a name of the downstream user's.
 */
import { JetStreamApiError } from '@nats-io/jetstream';
import type { EventType, Owner, RunEvent, RunEventOf, StoredEvent } from '@runplane/contracts';
import {
  allRunsFilter,
  downstreamConsumerNames,
  DOWNSTREAM_PRIORITY_GROUP,
  DurableConsumer,
  ownerFilter,
  type ConsumerLogger,
  type DeliveryInfo,
  type InvalidStoredEvent,
  type AnomalyKind,
} from '@runplane/eventlog';
import { RunStream, type RunStreamOptions } from './stream.js';

/**
 * Checks a downstream durable consumer name: `DOWNSTREAM_CONSUMER_PREFIX` (`downstream-`) then 1-64 of
 * `A-Z a-z 0-9 _ -` (a consumer name is one token of the JetStream API subjects; the broker's
 * downstream users may use only the names its deployment lists, default `downstream-1` to `-4`).
 * @returns the name.
 * @throws RangeError otherwise.
 */
export function downstreamConsumerName(name: string): string {
  return downstreamConsumerNames([name])[0]!;
}

/** Where a handled event stands and how it arrived. */
export interface EventMeta extends DeliveryInfo {
  /** The event's id: stable per fact, also its `Nats-Msg-Id`; the key for "processed once" ({@link processedOnce}). */
  eventId: string;
  runId: string;
  /** Its stream sequence: a total order over all Runs, increasing within a Run. */
  seq: number;
  /** `<prefix>.run.<runId>.<owner>.<partition>`. */
  subject: string;
}

/** A handler of one event type. Throwing leaves the event unacknowledged: it comes again after a backoff. */
export type RunEventHandler<T extends EventType> = (event: RunEventOf<T>, meta: EventMeta) => void | Promise<void>;
/** The handler of every event type without a handler of its own (`on('*', ...)`). */
export type AnyRunEventHandler = (event: RunEvent, meta: EventMeta) => void | Promise<void>;

/** A stored message that is not a fact of the log, terminated without reaching a handler. */
export interface InvalidMessage {
  seq: number;
  subject: string;
  /**
   * `invalid-message` (not a Runplane event, or its subject disagrees), `unverified-event` (not
   * appended by the event log: a replay or forgery), `wrong-partition`; with public keys
   * (`RunStreamOptions.publicKeysFile`) also `unsigned-event`, `bad-signature`, `wrong-signer`.
   */
  anomaly: AnomalyKind;
  reason: string;
}

/**
 * An event newer than this library's catalogue (docs/contract/README.md, additive changes): `type`,
 * a type it does not know (passed over: acknowledged, no handler), or `value`, a known type with
 * enum values it does not know at `paths` (`data.outcome`; handed to the handler as stored).
 */
export interface NewerEvent {
  seq: number;
  subject: string;
  type: string;
  eventId: string;
  kind: 'type' | 'value';
  paths: string[];
}

export interface RunConsumerOptions {
  /** The durable consumer's name ({@link downstreamConsumerName}); the same name resumes where it acknowledged. */
  name: string;
  /**
   * Read only these owners' subjects (`<prefix>.run.*.<owner>.*`), e.g. `['lifecycle']` for
   * settlements; default every Run subject (`<prefix>.run.>`). An event stands on its owner's
   * subject, except recovery's `run.fenced` (on the fenced executor's) and `lease.parked` (on the
   * runtime's). A changed list takes effect on the next start, from where the consumer stands.
   */
  owners?: readonly Owner[];
  /** How long a delivered event may stay unacknowledged, ms (default 30,000); a running handler keeps it. */
  ackWaitMs?: number;
  /** Told of every message that is not a fact (default: the error line of the logger only). */
  onInvalid?: (message: InvalidMessage) => void;
  /**
   * Told of every event newer than this library's catalogue, before it is passed over (a new type)
   * or handed to its handler (a new enum value); the logger says each type once either way.
   */
  onNewer?: (event: NewerEvent) => void;
  /** Where problems are written (default {@link stderrLines}: one line each on stderr). */
  logger?: ConsumerLogger;
}

/**
 * The default {@link RunConsumerOptions.logger}: one line per problem on stderr, the message then
 * its fields as JSON (`runplane-consumer: terminating a message that is not a fact (an anomaly)
 * {"durable":"downstream-1","seq":157,...}`), where `console` printed a multi-line object dump.
 */
export const stderrLines: ConsumerLogger = {
  warn: (fields, message) => process.stderr.write(`runplane-consumer: ${message} ${lineFields(fields)}\n`),
  error: (fields, message) => process.stderr.write(`runplane-consumer: ${message} ${lineFields(fields)}\n`),
};

/** `fields` as one line of JSON; an `Error` among them as its message. */
function lineFields(fields: object): string {
  return JSON.stringify(fields, (_key, value: unknown) => (value instanceof Error ? value.message : value));
}

/**
 * A durable consumer of Run events for a downstream service. Register handlers with {@link on},
 * then {@link start}. Delivery is at least once: an event is acknowledged after its handler
 * returns, and comes again (same `eventId`) when the handler threw (after 250 ms, doubling up to
 * 15 s; the Run's later events wait for it meanwhile), when the process died before the
 * acknowledgement, or when it was lost. Events of one Run reach the handlers one at a time in
 * stream order, also after a handler threw; different Runs' events are handled concurrently. Every message is verified as the event log's own readers verify it
 * (`verifyStored`): one the log did not append is reported ({@link RunConsumerOptions.onInvalid})
 * and terminated, never handed to a handler. An event whose type has no handler is acknowledged.
 * An authentic event newer than this library (docs/contract/README.md: a new event type or enum
 * value is an additive change) is not refused: a new type is passed over (acknowledged, no
 * handler, not even `'*'`), a known type with a new enum value reaches its handler as stored, so
 * `event.data` may hold a value outside its TypeScript union there: treat one you do not know as
 * "other" ({@link RunConsumerOptions.onNewer}).
 */
export class RunConsumer {
  private readonly handlers = new Map<EventType | '*', (event: RunEvent, meta: EventMeta) => void | Promise<void>>();
  private consumer: DurableConsumer | null = null;
  /** Set when it uses a provisioned durable as it is: the owners whose subjects it handles (null: all). */
  private selectOwners: Set<Owner> | null = null;
  /** The connection this consumer opened itself ({@link connect}), closed by {@link close}. */
  private owned: RunStream | null = null;

  /**
   * @param stream an open {@link RunStream} (several consumers may share one).
   * @throws RangeError when the name is not a downstream name.
   */
  constructor(
    readonly stream: RunStream,
    private readonly opts: RunConsumerOptions,
  ) {
    downstreamConsumerName(opts.name);
  }

  /**
   * Opens its own connection ({@link RunStream.open}; named after the consumer unless
   * `connectionName` says otherwise) and makes a consumer on it; {@link close} closes both.
   * @throws as {@link RunStream.open}, and RangeError for a name that is not a downstream name.
   */
  static async connect(opts: RunStreamOptions & RunConsumerOptions): Promise<RunConsumer> {
    downstreamConsumerName(opts.name);
    const stream = await RunStream.open({ ...opts, connectionName: opts.connectionName ?? opts.name });
    const consumer = new RunConsumer(stream, opts);
    consumer.owned = stream;
    return consumer;
  }

  /** The durable consumer's name on the server. */
  get name(): string {
    return this.opts.name;
  }

  /**
   * Handles events of `type` (typed by the catalogue: `event.data` is that type's data), or with
   * `'*'` every type that has no handler of its own. One handler per type.
   * @throws Error when `type` has a handler already, or the consumer has started.
   */
  on<T extends EventType>(type: T, handler: RunEventHandler<T>): this;
  on(type: '*', handler: AnyRunEventHandler): this;
  on(type: EventType | '*', handler: (event: never, meta: EventMeta) => void | Promise<void>): this {
    if (this.consumer) throw new Error(`consumer ${this.name} has started: register handlers before start()`);
    if (this.handlers.has(type)) throw new Error(`consumer ${this.name} has a handler for ${type} already`);
    this.handlers.set(type, handler as AnyRunEventHandler);
    return this;
  }

  /**
   * Creates the durable consumer (or updates it to these options) and starts handling: from the
   * stream's first event for a new name, else from the first event it has not acknowledged. As the
   * broker's downstream user (`downstream-1`..), which may not create or change consumers (docs/consumers.md), it
   * uses the durable the admin provisioned as it is: `owners` then selects events here (the others
   * are acknowledged and skipped) and the ack wait is the durable's.
   * @throws Error naming the consumer and the stream when the broker refuses the name (the
   *   consumer role is granted listed names only: `downstream-1`..`downstream-4` unless the
   *   deployment lists others, and the admin provisions them); other NATS errors as they come.
   */
  async start(): Promise<void> {
    if (this.consumer) throw new Error(`consumer ${this.name} has started already`);
    const space = this.stream.space;
    const filter = this.opts.owners?.length ? this.opts.owners.map((o) => ownerFilter(space, o)) : allRunsFilter(space);
    const onInvalid = this.opts.onInvalid;
    const make = (bind: { ackWaitMs: number } | null) =>
      new DurableConsumer(
        this.stream,
        {
          durable: this.name,
          exactName: true,
          filter,
          ackWaitMs: bind?.ackWaitMs ?? this.opts.ackWaitMs ?? 30_000,
          // a Run's events reach the handlers in order, also after a handler threw (the docs' promise)
          retryInPlace: true,
          // a provisioned durable is in the downstream priority group: every pull names it
          ...(bind ? { bind: true, group: DOWNSTREAM_PRIORITY_GROUP } : {}),
          ...(onInvalid
            ? { onInvalid: (e: InvalidStoredEvent) => onInvalid({ seq: e.seq, subject: e.subject, anomaly: e.anomaly, reason: e.message }) }
            : {}),
        },
        (stored, delivery) => this.dispatch(stored, delivery),
        this.opts.logger ?? stderrLines,
      );
    let consumer = make(null);
    try {
      await consumer.start();
    } catch (e) {
      const text = e instanceof Error ? e.message : String(e);
      if (!/permissions violation/i.test(text)) throw e;
      // the consumer account: no create; the provisioned durable, when this name has one
      const info = await this.stream.jsm.consumers.info(space.stream, this.name).catch(() => null);
      if (!info)
        throw new Error(
          `the broker refused durable consumer ${this.name} on stream ${space.stream}: this NATS user may not create it ` +
            `(each downstream NATS user may use only its own provisioned durable, named as the user: by default downstream-1 to ` +
            `downstream-4, which the admin's \`runplane provision\` creates; a deployment grants others with ` +
            `\`runplane docs nats-auth --downstream\`): ${text}`,
          { cause: e },
        );
      this.selectOwners = this.opts.owners?.length ? new Set(this.opts.owners) : null;
      consumer = make({ ackWaitMs: Math.round((info.config.ack_wait ?? 30_000_000_000) / 1_000_000) });
      await consumer.start();
    }
    this.consumer = consumer;
  }

  private async dispatch(stored: StoredEvent, delivery: DeliveryInfo): Promise<void> {
    // a provisioned durable reads every Run subject: `owners` selects here (the owner token of the subject)
    if (this.selectOwners && !this.selectOwners.has(stored.subject.split('.').at(-2) as Owner)) return;
    if (stored.newer && !this.noteNewer(stored)) return;
    const handler = this.handlers.get(stored.event.type) ?? this.handlers.get('*');
    if (!handler) return;
    const e = stored.event;
    await handler(e, { eventId: e.eventId, runId: e.runId, seq: stored.seq, subject: stored.subject, ...delivery });
  }

  /** Event types and enum values newer than this library, said once each. */
  private readonly newerSaid = new Set<string>();

  /**
   * An event newer than this library's catalogue (docs/contract/README.md): a new type is passed
   * over (acknowledged, no handler: false), a new enum value is handed to the handler as stored
   * (true); each said once per type (and paths) on the logger, and to `onNewer`.
   */
  private noteNewer(stored: StoredEvent): boolean {
    const newer = stored.newer!;
    const paths = newer.kind === 'value' ? newer.paths : [];
    const key = `${stored.event.type} ${paths.join(',')}`;
    const fields = { durable: this.name, seq: stored.seq, type: stored.event.type, ...(paths.length ? { paths } : {}) };
    if (!this.newerSaid.has(key)) {
      this.newerSaid.add(key);
      (this.opts.logger ?? stderrLines).warn(
        fields,
        newer.kind === 'type'
          ? 'passing over an event type newer than this library (upgrade @runplane/consumer to handle it)'
          : 'handing an event with an enum value newer than this library to its handler as stored (treat a value you do not know as other)',
      );
    }
    this.opts.onNewer?.({
      seq: stored.seq,
      subject: stored.subject,
      type: stored.event.type,
      eventId: stored.event.eventId,
      kind: newer.kind,
      paths,
    });
    return newer.kind === 'value';
  }

  /**
   * Stops pulling and waits for the running handlers (their events are acknowledged or handed
   * back); the durable consumer stays on the server, so a new start with the same name resumes.
   */
  async stop(): Promise<void> {
    await this.consumer?.stop();
    this.consumer = null;
  }

  /** {@link stop}, then closes the connection when {@link connect} opened it. */
  async close(): Promise<void> {
    await this.stop();
    await this.owned?.close();
  }

  /**
   * Deletes the durable consumer from the server: its position is forgotten, and a later start
   * with the same name begins again at the stream's first event. The broker refuses it to the
   * downstream users (their account may not delete a durable: docs/consumers.md); it works for a user
   * that may (the admin, or a server without users).
   * @returns false when there was none.
   */
  async deleteDurable(): Promise<boolean> {
    try {
      return await this.stream.jsm.consumers.delete(this.stream.space.stream, this.name);
    } catch (e) {
      if (e instanceof JetStreamApiError && e.status === 404) return false;
      throw e;
    }
  }
}
