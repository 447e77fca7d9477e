import { setTimeout as sleep } from 'node:timers/promises';
import { AckPolicy, DeliverPolicy, JetStreamApiError, type ConsumerConfig, type ConsumerMessages, type JsMsg } from '@nats-io/jetstream';
import { EventTypes, type EventType, type StoredEvent } from '@runplane/contracts';
import { AbortError, retry, retryPolicies } from '@runplane/kit';
import { recordAnomaly, type AnomalyKind } from './anomalies.js';
import { AppendConflict, InvalidStoredEvent, RetryLater } from './errors.js';
import { CONSUME_EXPIRES_MS, verifyStored, type EventLog } from './event-log.js';
import { deliveryCountsOf, type DeliveryCounts } from './log-metrics.js';
import { extractTraceContext, traceContext } from './tracing.js';

/**
 * What a durable consumer uses of the event log: the connection, the stream's subject space and
 * partitions (for {@link verifyStored}), and where it tells what it delivered. An {@link EventLog}
 * is one; a downstream reader that may not create or append anything builds its own (libs/consumer).
 */
export type ConsumerSource = Pick<EventLog, 'nc' | 'js' | 'jsm' | 'space' | 'noteStored' | 'deliveries' | 'signatures'> & {
  /**
   * True for a downstream reader: an event newer than this catalogue (a new type, a new enum
   * value) is delivered with `newer` set ({@link verifyStored}), not terminated. The services' own
   * consumers leave it unset.
   */
  readonly acceptNewer?: boolean;
};

export interface DurableConsumerSpec {
  /** Durable consumer name (e.g. `runtime-p3`); prefixed with the subject prefix unless {@link exactName}. */
  durable: string;
  /**
   * True: the server-side name is {@link durable} as given (downstream consumers, whose names the
   * broker grants one by one: `downstream-...`), and the consumer is created or updated to this
   * configuration in one request (a changed filter takes effect on the next start).
   */
  exactName?: boolean;
  /**
   * True: use the durable as it is on the server and create or update nothing (a user that may
   * not create consumers: the downstream consumer account, whose durables the admin provisions).
   */
  bind?: boolean;
  /**
   * Told of every message terminated because it is not a fact ({@link verifyStored}), after the
   * error line: a downstream service's own report. The message never reaches the handler.
   */
  onInvalid?: (e: InvalidStoredEvent) => void;
  /**
   * Subject filter(s): e.g. `rp.run.>`, or `['rp.run.*.admission.3', 'rp.run.*.tools.3']`
   * (several filters on one consumer, `filter_subjects`: nats-server 2.10+).
   */
  filter: string | string[];
  /** Milliseconds before an unacknowledged message is redelivered; handlers heartbeat meanwhile. */
  ackWaitMs?: number;
  /**
   * One pull client at a time (a priority group with the pinned-client policy, nats-server 2.11+):
   * the server delivers to the first client that pulls and refuses the others until that one is
   * unpinned ({@link DurableConsumer.release}) or has not pulled for `timeoutMs`.
   */
  pinned?: { group: string; timeoutMs: number; pullExpiresMs: number };
  /**
   * The priority group every pull names, for a durable provisioned in one with the overflow policy
   * (a downstream durable, downstream.ts `DOWNSTREAM_PRIORITY_GROUP`); with {@link bind} only (this
   * consumer neither creates nor changes such a durable).
   */
  group?: string;
  /**
   * True when the filter takes every subject of the Runs it delivers (a whole partition): each
   * delivery is then told to the log's {@link EventLog.deliveries} before its handler, which runs
   * in the delivery's scope (the folds of the service decide from it without reading: deliveries.ts).
   */
  wholeRuns?: boolean;
  /**
   * The event types the handler acts on, when it ignores the rest (a consumer that keeps no folds:
   * not {@link wholeRuns}). A delivery whose payload names another type is acknowledged at once,
   * neither decoded, validated nor its signature checked: nothing in this process reads it, and the
   * services that do (every whole-partition consumer) check it, and terminate and count it when it
   * is not a fact. A payload that names no type of the catalogue goes the whole way (and is
   * terminated): `handles` is asked only about the catalogue's types ({@link payloadTypeOf}).
   */
  handles?: (type: EventType) => boolean;
  /**
   * True: each message's handler starts as the message arrives, in arrival order, without waiting
   * for the handlers of the Run's earlier messages to finish; each message is still acknowledged
   * only when its own handler resolves. For a handler that queues what it gets and writes it in
   * batches (the projector: several events of one Run in one transaction), which must then accept
   * a Run's events out of order after a failure (its continuity check reads the Run again).
   * Only for a service that keeps no folds (service-kit `RunFolds`): a fold told of a Run's next
   * delivery while the previous one is still handled reads the log instead.
   * Default false: a Run's messages are handled one at a time, in delivery order.
   */
  onArrival?: boolean;
  /**
   * True: a handler that throws is called again here, after the same backoff, before any later
   * message of its Run is handled, so a Run's events reach the handler in delivery order even
   * across failures (a downstream consumer: `@runplane/consumer`). The message stays in progress
   * meanwhile (heartbeats), and the later attempts see the delivery count plus the attempts made
   * here. A stop or a release during the wait hands it back (nak) instead. Default false: the
   * message is handed back with that delay (nak) and the Run's later messages go on, which the
   * services' handlers accept because each decides from the Run's folded log.
   */
  retryInPlace?: boolean;
}

/** Every event type of the catalogue: the only types {@link payloadTypeOf} names. */
const CATALOGUE_TYPES: ReadonlySet<string> = new Set(EventTypes);

/**
 * The catalogue's event type a message's payload names, or null when it is not a JSON object
 * whose `type` is one of the catalogue's. Only a forgery names another type: it then goes the
 * whole way (decoded, refused, terminated), and a {@link DurableConsumerSpec.handles} never sees
 * it (so a lookup cached per type cannot be made to keep attacker-chosen strings).
 */
export function payloadTypeOf(data: Uint8Array): EventType | null {
  try {
    const body: unknown = JSON.parse(textDecoder.decode(data));
    const type = typeof body === 'object' && body !== null ? (body as { type?: unknown }).type : undefined;
    return typeof type === 'string' && CATALOGUE_TYPES.has(type) ? (type as EventType) : null;
  } catch {
    return null;
  }
}

const textDecoder = new TextDecoder();

/** How a message reached its handler: the server's delivery count (1 on the first delivery, more after a nak or an expired ack wait). */
export interface DeliveryInfo {
  deliveryCount: number;
  redelivered: boolean;
}

export type StoredEventHandler = (stored: StoredEvent, delivery: DeliveryInfo) => Promise<void>;

/**
 * Where the consumer reports problems: structured fields (`durable`, and for a stored event its
 * `runId`, `eventType` and `seq`) apart from a constant message, pino-style. `console` fits.
 */
export interface ConsumerLogger {
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

/** A readable line for anything thrown (Nest hands non-Error objects back from handlers). */
export function describeError(e: unknown): string {
  if (e instanceof Error) return e.stack ?? e.message;
  try {
    return JSON.stringify(e);
  } catch {
    return String(e);
  }
}

/** Redelivery delay after a failed handler: exponential from 250 ms, capped at 15 s. */
export function redeliveryDelayMs(deliveryCount: number): number {
  return Math.min(15_000, 250 * 2 ** Math.max(0, deliveryCount - 1));
}

/**
 * The durable consumers this process serves now (the partition consumers its transport started
 * and has not released): what service-kit's readiness check `consumers` looks up on the server
 * and whose pull loops it checks. One per service application (EventLogModule provides it).
 */
export class ServedConsumers {
  private readonly served = new Set<DurableConsumer>();

  add(consumer: DurableConsumer): void {
    this.served.add(consumer);
  }

  delete(consumer: DurableConsumer): void {
    this.served.delete(consumer);
  }

  /** The consumers served now, by durable name. */
  list(): DurableConsumer[] {
    return [...this.served].sort((a, b) => a.durableName.localeCompare(b.durableName));
  }
}

/** How long, ms, a finished delivery's acknowledgement may wait for others to go out with it ({@link AckCoalescer}). */
export const ACK_COALESCE_MS = 5;

/**
 * Sends the acknowledgements of finished deliveries together: {@link later} holds a message's
 * `ack()` for at most `windowMs` (one timer for every consumer of the process), then
 * {@link flush} sends all held ones in the same turn, which the NATS client writes to its socket
 * as one write (it flushes its outbound buffer once per microtask). At low load each delivery's
 * acknowledgement was a write (and a TLS record) of its own: about 24 per service per W1 Run,
 * most of a service's writes (docs/performance.md, "What TLS and the acknowledgements cost a
 * Run"). A message is acknowledged only after its handler resolved, as before; a process that
 * dies holding some sees them redelivered, as it would dying between a handler and its ack
 * (handlers are idempotent, K11).
 */
export class AckCoalescer {
  private held: JsMsg[] = [];
  private timer: NodeJS.Timeout | null = null;
  /** Acknowledgements handed to the client in a batch beyond its first (one write when connected; lost with the rest while disconnected). */
  coalesced = 0;

  constructor(private readonly windowMs = ACK_COALESCE_MS) {}

  /** Acknowledges `m` within `windowMs` (at once when the window is 0). */
  later(m: JsMsg): void {
    if (this.windowMs <= 0) {
      m.ack();
      return;
    }
    this.held.push(m);
    this.timer ??= setTimeout(() => this.flush(), this.windowMs);
  }

  /** Acknowledges every held message now (a consumer's stop or release calls it before it returns). */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const held = this.held;
    this.held = [];
    if (held.length > 1) this.coalesced += held.length - 1;
    for (const m of held) {
      try {
        m.ack();
      } catch {
        // should the client throw for one (it does not today: while disconnected it buffers the
        // acknowledgement and drops it at the reconnection), the others still go; a lost
        // acknowledgement's message is redelivered after the ack wait, as before this window
      }
    }
  }
}

/** The process's {@link AckCoalescer}, shared by every {@link DurableConsumer}. */
export const acks = new AckCoalescer();

/**
 * A durable pull consumer with explicit ack. Messages of one Run are handled one at a time in
 * delivery order (unless {@link DurableConsumerSpec.onArrival}: then each as it arrives); different
 * Runs proceed concurrently. A handler that throws gets its message redelivered (nak with
 * backoff): handlers must be idempotent (K11), which Runplane's are because each decides from the
 * Run's folded log, not from the message alone.
 */
export class DurableConsumer {
  private messages: ConsumerMessages | null = null;
  private loop: Promise<void> | null = null;
  /** Set by {@link release}: messages not yet started are given back (nak), not handled. */
  private releasing = false;
  /** This consumer's own handler chains (a subset of the shared `chains`), to wait for on release. */
  private readonly mine = new Set<Promise<void>>();
  /** Set by {@link stop}. */
  private stopping = false;
  /** This durable's delivery counts in this process (`runplane_consumer_*` metrics), updated in place on every delivery. */
  private counts: DeliveryCounts | null = null;
  /** True while the loop of {@link consume} reads the client's stream of messages (see {@link pulling}). */
  private reading = false;
  /** Aborted by {@link stop} and {@link release}: ends the waits of {@link DurableConsumerSpec.retryInPlace}. */
  private readonly halted = new AbortController();

  /**
   * @param chains per-Run handler chains; consumers of one service that share it handle one Run's
   *   messages one at a time even when they arrive through different consumers.
   */
  constructor(
    private readonly log: ConsumerSource,
    private readonly spec: DurableConsumerSpec,
    private readonly handler: StoredEventHandler,
    private readonly logger: ConsumerLogger = console,
    private readonly chains: Map<string, Promise<void>> = new Map(),
  ) {}

  get durableName(): string {
    return this.spec.exactName ? this.spec.durable : `${this.log.space.prefix}-${this.spec.durable}`;
  }

  /**
   * Whether this consumer pulls now: its loop reads the client's stream of messages (the client
   * keeps pulling, and keeps looking for a durable that went missing, until it is stopped). False
   * before {@link start}, after {@link stop} or {@link release}, and while the loop is between a
   * stream that ended or failed and the next one (logged, retried): readiness reports that.
   */
  get pulling(): boolean {
    return this.reading && !this.stopping && !this.releasing;
  }

  /** Creates (or updates) the durable consumer, unless {@link DurableConsumerSpec.bind}, and starts consuming. */
  async start(): Promise<void> {
    const ackWaitMs = this.spec.ackWaitMs ?? 30_000;
    const filters = [this.spec.filter].flat();
    const pinned = this.spec.pinned;
    if (this.spec.bind) {
      // the durable is as the server has it
    } else if (filters.length > 1 || pinned || this.spec.exactName) await this.createOrUpdate(filters, ackWaitMs);
    else await this.createOrUpdateSingle(filters[0]!, ackWaitMs);
    await this.consume(ackWaitMs);
  }

  /**
   * Pulls and schedules messages until {@link stop} or {@link release}. When the client ends the
   * stream of messages on its own (it gives up on a consumer it cannot reach, e.g. while a cluster
   * moves it), that is logged and consuming starts again a second later: a service never silently
   * stops reacting. Pulls expire after {@link CONSUME_EXPIRES_MS} (a pinned consumer: its
   * `pullExpiresMs`), so a consumer whose leader moved is pulled from again within seconds.
   */
  private async consume(ackWaitMs: number): Promise<void> {
    const pinned = this.spec.pinned;
    const ended = () => this.stopping || this.releasing;
    // a stop or release may come while either request is under way (consuming again during a NATS
    // outage can take seconds): then nothing is consumed, or the new stream is closed at once, so
    // no stopped or released consumer keeps pulling behind its caller's back
    const consumer = await this.log.js.consumers.get(this.log.space.stream, this.durableName);
    if (ended()) return;
    const messages = await consumer.consume(
      pinned
        ? { max_messages: 100, group: pinned.group, expires: pinned.pullExpiresMs }
        : { max_messages: 100, expires: CONSUME_EXPIRES_MS, ...(this.spec.group ? { group: this.spec.group } : {}) },
    );
    if (ended()) {
      await messages.close().catch(() => undefined);
      return;
    }
    this.messages = messages;
    this.loop = (async () => {
      this.reading = true;
      try {
        for await (const m of messages) this.schedule(m, ackWaitMs);
      } catch (e) {
        if (!ended()) this.logger.error({ durable: this.durableName, err: describeError(e) }, 'consuming failed; starting again');
      } finally {
        this.reading = false;
      }
      if (ended()) return;
      this.logger.warn({ durable: this.durableName }, 'the consumer stream ended; consuming again');
      await new Promise((r) => setTimeout(r, retryPolicies.consumeAgain.minTimeout));
      await retry(
        'consumeAgain',
        () => {
          if (ended()) throw new AbortError('the consumer is stopping');
          return this.consume(ackWaitMs);
        },
        {
          onFailedAttempt: ({ error }) =>
            this.logger.error({ durable: this.durableName, err: describeError(error) }, 'cannot consume yet; trying again'),
        },
      ).catch(() => undefined); // stopping
    })();
  }

  /**
   * One request to `$JS.API.CONSUMER.CREATE.<stream>.<durable>` (create, or update to this
   * configuration): the client library sends a consumer with several filters to the legacy
   * `CONSUMER.DURABLE.CREATE` subject, which the services' users may not use (bus.ts).
   */
  private async createOrUpdate(filters: string[], ackWaitMs: number): Promise<void> {
    const pinned = this.spec.pinned;
    const config: Partial<ConsumerConfig> = {
      name: this.durableName,
      durable_name: this.durableName,
      ...(filters.length > 1 ? { filter_subjects: filters } : { filter_subject: filters[0]! }),
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: ackWaitMs * 1_000_000,
      max_ack_pending: 1000,
      ...(pinned ? { priority_groups: [pinned.group], priority_policy: 'pinned_client', priority_timeout: pinned.timeoutMs * 1_000_000 } : {}),
    };
    const subject = `$JS.API.CONSUMER.CREATE.${this.log.space.stream}.${this.durableName}`;
    const reply = await this.log.nc.request(subject, JSON.stringify({ stream_name: this.log.space.stream, config }), { timeout: 10_000 });
    const body = reply.json<{ error?: { code: number; err_code: number; description: string } }>();
    if (body.error) throw new Error(`creating consumer ${this.durableName}: ${body.error.description} (${body.error.err_code})`);
  }

  private async createOrUpdateSingle(filter: string, ackWaitMs: number): Promise<void> {
    const config = {
      durable_name: this.durableName,
      filter_subject: filter,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: ackWaitMs * 1_000_000,
      max_ack_pending: 1000,
    };
    try {
      await this.log.jsm.consumers.info(this.log.space.stream, this.durableName);
      await this.log.jsm.consumers.update(this.log.space.stream, this.durableName, {
        ack_wait: config.ack_wait,
        max_ack_pending: config.max_ack_pending,
      });
    } catch (e) {
      if (!(e instanceof JetStreamApiError) || e.status !== 404) throw e;
      await this.log.jsm.consumers.add(this.log.space.stream, config);
    }
  }

  /**
   * Terminates a message that is not a fact, once, and logs it as an anomaly with its running count.
   * The reason travels with the term (into the server's `MSG_TERMINATED` advisory): the supported
   * server honours a term with a reason (2.9.10 redelivered it for ever); terminated, the message
   * no longer counts against `max_ack_pending`. test/e2e/broker.test.ts terminates 1,200 and
   * checks that none is redelivered.
   */
  private terminate(m: JsMsg, kind: AnomalyKind, reason: string): void {
    const tokens = m.subject.split('.');
    const count = recordAnomaly(kind);
    this.logger.error(
      { durable: this.durableName, seq: m.seq, subject: m.subject, runId: tokens[2], anomaly: kind, anomalies: count, reason },
      'terminating a message that is not a fact (an anomaly)',
    );
    m.term(`runplane ${kind}: ${reason}`.slice(0, 256));
  }

  private schedule(m: JsMsg, ackWaitMs: number): void {
    const counts = (this.counts ??= deliveryCountsOf(this.durableName));
    counts.delivered++;
    if (m.redelivered) counts.redelivered++;
    counts.pending = m.info.pending;
    if (this.spec.handles && !this.spec.wholeRuns) {
      const type = payloadTypeOf(m.data);
      if (type !== null && !this.spec.handles(type)) {
        counts.ignored++;
        acks.later(m);
        return;
      }
    }
    let stored: StoredEvent;
    try {
      // the same check as every reader of facts (verifyStored): a valid event that the event log
      // appended, with the back-link the server verified
      stored = verifyStored(m.seq, m.subject, m.data, m.headers, this.log.space.partitions, this.log.signatures, this.log.acceptNewer ?? false);
    } catch (e) {
      if (!(e instanceof InvalidStoredEvent)) throw e;
      this.terminate(m, e.anomaly, e.message);
      this.spec.onInvalid?.(e);
      return;
    }
    // the handler's reads of this Run must include this event (a stream copy behind is read again)
    this.log.noteStored(m.subject, m.seq);
    // told at once, before it waits behind the Run's earlier deliveries (a cancel of a Run whose model request is under way)
    if (this.spec.wholeRuns) this.log.deliveries.arrived(stored);
    if (this.spec.onArrival) {
      const now = this.process(m, stored, ackWaitMs);
      this.mine.add(now);
      void now.finally(() => this.mine.delete(now));
      return;
    }
    const key = stored.event.runId;
    const prev = this.chains.get(key) ?? Promise.resolve();
    const next = prev.then(() => this.process(m, stored, ackWaitMs));
    this.chains.set(key, next);
    this.mine.add(next);
    void next.finally(() => {
      this.mine.delete(next);
      if (this.chains.get(key) === next) this.chains.delete(key);
    });
  }

  private async process(m: JsMsg, stored: StoredEvent, ackWaitMs: number): Promise<void> {
    if (this.releasing || this.stopping) {
      // received but not started: handed back at once, for the partition's next owner (released)
      // or the next process (stopped); a stop waits only for the handlers already running, not for
      // every message pulled behind them (a trial's slow handlers kept a stop going for 32 s)
      m.nak();
      return;
    }
    const heartbeat = setInterval(() => m.working(), Math.max(1000, Math.floor(ackWaitMs / 3)));
    try {
      for (let attempt = 0; ; attempt++) {
        const deliveryCount = m.info.deliveryCount + attempt;
        const delivery: DeliveryInfo = { deliveryCount, redelivered: m.redelivered || attempt > 0 };
        try {
          // the handler continues the trace of the message it handles (its spans and appends carry it on)
          await traceContext.with(extractTraceContext(m.headers), async () => {
            if (this.spec.wholeRuns) await this.log.deliveries.handle(stored, () => this.handler(stored, delivery));
            else await this.handler(stored, delivery);
          });
          acks.later(m);
          return;
        } catch (e) {
          const delay = e instanceof AppendConflict ? 50 : e instanceof RetryLater ? e.delayMs : redeliveryDelayMs(deliveryCount);
          const fields = { durable: this.durableName, runId: stored.event.runId, eventType: stored.event.type, seq: stored.seq };
          const again = this.spec.retryInPlace ? 'retrying before the Run goes on' : 'redelivering';
          if (e instanceof AppendConflict) this.logger.warn({ ...fields, reason: e.message }, 'append conflict; will re-read');
          else if (e instanceof RetryLater)
            this.logger.warn({ ...fields, delivery: deliveryCount, redeliveryMs: delay, reason: e.message }, `not yet actionable; ${again}`);
          else
            this.logger.error(
              { ...fields, delivery: deliveryCount, redeliveryMs: delay, err: e instanceof Error ? e : describeError(e) },
              `handler failed; ${again}`,
            );
          if (!this.spec.retryInPlace) {
            m.nak(delay);
            return;
          }
          if (!(await this.pause(delay))) {
            // stopped or released while waiting: handed back, for the next process or owner
            m.nak();
            return;
          }
        }
      }
    } finally {
      clearInterval(heartbeat);
    }
  }

  /** Waits `ms`; false when the consumer was stopped or released meanwhile (or before). */
  private pause(ms: number): Promise<boolean> {
    return sleep(ms, true, { signal: this.halted.signal }).catch(() => false);
  }

  /**
   * Stops fetching, waits for the handlers already running (and acknowledges what they finished),
   * hands back (nak) what was received but not started, and leaves the durable consumer in place:
   * the next process that consumes it gets those again.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.counts) this.counts.pending = null;
    this.halted.abort();
    await this.endConsuming();
    await Promise.allSettled([...this.chains.values(), ...this.mine]);
    acks.flush();
  }

  /**
   * Gives the consumer up to another client (a partition moving away): stops pulling, lets the
   * handlers already running finish (and acknowledge), hands back (nak) what was received but not
   * started, then, for a pinned consumer, unpins this client so that the server pins the next
   * client that pulls at once instead of after the priority timeout. Never throws (an unpin that
   * fails leaves the pin to expire).
   */
  async release(): Promise<void> {
    this.releasing = true;
    // another replica consumes it now: what this process last saw of its backlog is not reported
    if (this.counts) this.counts.pending = null;
    this.halted.abort();
    await this.endConsuming();
    await Promise.allSettled([...this.mine]);
    // what finished here is acknowledged before the next owner is let in (no redelivery to it)
    acks.flush();
    if (this.spec.pinned) await this.unpin();
  }

  /**
   * Closes the stream of messages and waits for its loop. The loop may be starting a new stream when
   * this is called (its last one ended on its own): `consume()` then starts nothing once the stop
   * or release is set, so the loop ends with no new stream; the re-check below is only a guard.
   */
  private async endConsuming(): Promise<void> {
    for (;;) {
      const messages = this.messages;
      const loop = this.loop;
      await messages?.close().catch(() => undefined);
      await loop?.catch(() => undefined);
      if (this.messages === messages && this.loop === loop) return;
    }
  }

  /** Unpins whatever client the server has pinned (this one, or a dead one); false when the server refused. */
  async unpin(): Promise<boolean> {
    if (!this.spec.pinned) return false;
    return this.log.jsm.consumers.unpin(this.log.space.stream, this.durableName, this.spec.pinned.group).then(
      () => true,
      () => false,
    );
  }
}
