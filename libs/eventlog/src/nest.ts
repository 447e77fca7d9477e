/**
 * Thin Nest adapters: an EventLog provider and a custom microservice transport that feeds a
 * durable JetStream consumer's events to `@EventPattern('<event type>')` handlers.
 */
import { Catch, Logger, Module, type DynamicModule, type OnApplicationShutdown, type RpcExceptionFilter } from '@nestjs/common';
import { Server, type CustomTransportStrategy, type MessageHandler } from '@nestjs/microservices';
import { lastValueFrom, throwError, type Observable } from 'rxjs';
import { BusConfig, configToken, type EventType, type StoredEvent } from '@runplane/contracts';
import { permissionViolationOf, retry } from '@runplane/kit';
import { recordAnomaly } from './anomalies.js';
import { recordConnectionChange } from './log-metrics.js';
import { consumerFilters, HEARTBEAT_PLACEMENT, SERVICE_CONSUMERS, type BusService } from './bus.js';
import { DurableConsumer, describeError, ServedConsumers } from './consumer.js';
import { EventLog } from './event-log.js';
import { assignPartitions, PartitionOwnership, type OwnershipChange } from './partitions.js';
import { inSpan, SpanKind } from './tracing.js';

/**
 * Provides one connected {@link EventLog}, configured from the injected `BusConfig` (contracts
 * `configToken(BusConfig)`, provided by the service bootstrap's ConfigModule), and closes it on shutdown.
 */
@Module({})
export class EventLogModule implements OnApplicationShutdown {
  private static instance: EventLog | null = null;

  static forService(serviceName: string): DynamicModule {
    return {
      module: EventLogModule,
      global: true,
      providers: [
        {
          provide: EventLog,
          inject: [configToken(BusConfig)],
          useFactory: async (bus: BusConfig) => {
            // started before the admin's provisioning, a service waits for the stream (not ready)
            const log = await EventLog.fromConfig(serviceName, bus, { awaitProvisioning: true });
            const logger = new Logger('EventLog');
            if (bus.RUNPLANE_SIGNING_PUBLIC_KEYS_FILE && !log.signatures)
              logger.warn(
                { setting: 'RUNPLANE_SIGNING_VERIFY' },
                'signature verification is OFF: this service acts on what the broker stored without verifying its signature (docs/guarantees.md)',
              );
            log.onInvalid = (e) => {
              const anomaly = e.anomaly;
              logger.warn(
                { seq: e.seq, subject: e.subject, runId: e.subject.split('.')[2], anomaly, anomalies: recordAnomaly(anomaly), reason: e.message },
                'skipping a stored message that is not a fact (an anomaly)',
              );
            };
            log.onPartitionsMismatch = (configured, stream) =>
              logger.warn(
                { configured, stream: log.space.stream, partitions: stream },
                'RUNPLANE_PARTITIONS differs from the partition count the stream was created with: the stream wins',
              );
            // where an operator sees that this process left its NATS server and where it is now
            void logConnectionChanges(
              log.nc.status(),
              logger,
              () => log.nc.info?.server_name,
              () => log.nc.getServer() || undefined,
            );
            EventLogModule.instance = log;
            return log;
          },
        },
        // the durable consumers this application serves (readiness checks them)
        { provide: ServedConsumers, useValue: new ServedConsumers() },
        {
          // this process's share of the partitions of its service (libs/eventlog partitions.ts)
          provide: PartitionOwnership,
          inject: [EventLog, configToken(BusConfig)],
          useFactory: async (log: EventLog, bus: BusConfig) => {
            const logger = new Logger('partitions');
            const ownership = await PartitionOwnership.start(
              log,
              serviceName,
              // the runtime beats on a thread of its own, the others on their main thread (HEARTBEAT_PLACEMENT)
              HEARTBEAT_PLACEMENT[serviceName as BusService] === 'thread'
                ? {
                    natsUrl: bus.NATS_URL,
                    ...(bus.NATS_USER ? { user: bus.NATS_USER, pass: bus.NATS_PASSWORD ?? '' } : {}),
                    ...(bus.NATS_CA_FILE ? { caFile: bus.NATS_CA_FILE } : {}),
                  }
                : 'main-thread',
              bus.RUNPLANE_MEMBER_TTL_MS,
              { log: (f, m) => logger.log(f, m), warn: (f, m) => logger.warn(f, m) },
            );
            EventLogModule.ownership = ownership;
            return ownership;
          },
        },
      ],
      exports: [EventLog, PartitionOwnership, ServedConsumers],
    };
  }

  private static ownership: PartitionOwnership | null = null;

  async onApplicationShutdown(): Promise<void> {
    await EventLogModule.ownership?.stop();
    EventLogModule.ownership = null;
    await EventLogModule.instance?.close();
    EventLogModule.instance = null;
  }
}

/** A NATS client's status change, as `NatsConnection.status()` yields them (only what is logged is read). */
export interface ConnectionStatus {
  type: string;
  server?: string;
  error?: Error;
}

/**
 * Logs the changes of a service's NATS connection an operator needs to see (pino-style fields,
 * then a constant message): `staleConnection` (the server stopped answering pings while the
 * connection stayed open: a hung node, left for another; stale-connection.ts), `disconnect` (with
 * the server left) and `reconnect` (with the server now used), and `error` (what a server refused:
 * this service's credentials on one node, an operation its permissions do not allow). Each names the
 * server by address (`server`, host:port) and, where `nodeName` tells it (the connected server's
 * `server_name`, as the `nats` readiness check reports it), by name (`node`): for a disconnection
 * the node left, the last one known. A disconnection from a server this client was not connected
 * to (`connectedServer` at the start, then the last reconnection's) is an attempt that failed after
 * the server answered (its credentials refused, say): logged as such, without a node name, which
 * would be the last node's. The client's other notices (each reconnection attempt, pings, server
 * updates) are not logged. Resolves when the connection closes.
 */
export async function logConnectionChanges(
  statuses: AsyncIterable<ConnectionStatus>,
  logger: { warn(fields: object, message: string): void; log(fields: object, message: string): void },
  nodeName: () => string | undefined = () => undefined,
  connectedServer: () => string | undefined = () => undefined,
): Promise<void> {
  let node = nodeName();
  let connected = connectedServer();
  const named = (n: string | undefined) => (n ? { node: n } : {});
  try {
    for await (const s of statuses) {
      if (s.type === 'staleConnection') {
        recordConnectionChange('stale');
        logger.warn({ ...named(node) }, 'the NATS server stopped answering pings: leaving it (a stale connection)');
      } else if (s.type === 'disconnect') {
        if (connected !== undefined && s.server !== connected) {
          recordConnectionChange('attempt-failed');
          logger.warn({ server: s.server }, 'NATS connection attempt failed after the server answered: trying another');
        } else {
          recordConnectionChange('lost');
          logger.warn({ server: s.server, ...named(node) }, 'NATS connection lost: reconnecting');
        }
      } else if (s.type === 'reconnect') {
        recordConnectionChange('back');
        node = nodeName();
        connected = s.server;
        logger.log({ server: s.server, ...named(node) }, 'NATS connection back');
      } else if (s.type === 'error' && s.error) {
        recordConnectionChange('error');
        logger.warn(
          { err: s.error.message, kind: s.error.name },
          'the NATS server reported an error for this connection (credentials refused, an operation not permitted)',
        );
      }
    }
  } catch {
    // the status stream of a closed connection: nothing more to log
  }
}

/**
 * Hands a handler's error to the durable consumer as it was thrown (Nest's default turns it into
 * `{status: 'error', message: 'Internal server error'}`), so that an `AppendConflict` is re-read
 * after 50 ms instead of being logged as a crash and redelivered with backoff. Put it on every
 * event controller: `@UseFilters(PassThroughEventErrors)`.
 */
@Catch()
export class PassThroughEventErrors implements RpcExceptionFilter<unknown> {
  catch(exception: unknown): Observable<never> {
    return throwError(() => exception);
  }
}

/** `@EventPattern(ALL_EVENTS)` receives every event type that has no handler of its own. */
export const ALL_EVENTS = '*';

/** Logger wiring of {@link JetStreamEventTransport}, supplied by the service bootstrap. */
export interface EventTransportLogging {
  /** Runs one handler inside a log context whose every line carries `fields`. */
  inLogContext?: (fields: { runId: string; eventType: string; seq: number }, handle: () => Promise<void>) => Promise<void>;
}

/** What {@link JetStreamEventTransport} consumes. */
export interface EventTransportSpec {
  /** The service whose partition consumers these are (bus.ts `SERVICE_CONSUMERS` gives what it reads). */
  service: BusService;
  /** Ack wait of every partition consumer, ms (`RUNPLANE_ACK_WAIT_MS`). */
  ackWaitMs?: number;
  /**
   * How long the server keeps a partition pinned to a client that stopped pulling (a dead replica)
   * before it pins the next one, ms (default 5,000). A replica pulls at least every
   * `pinTimeoutMs / 2.5` to keep its pin.
   */
  pinTimeoutMs?: number;
  /**
   * Handlers start as their messages arrive, not after the Run's earlier ones finished
   * (consumer.ts {@link DurableConsumerSpec.onArrival}): for a service that batches what it gets
   * (the projector). Default false.
   */
  onArrival?: boolean;
}

/** The priority group every partition consumer pins its one client in. */
export const PARTITION_GROUP = 'owner';

/**
 * A partition consumer the broker refuses this service's NATS user: its permissions name the
 * consumers of another stream, subject prefix or partition count than the service is configured
 * with (deploy/nats/accounts.conf rendered for another deployment). Permanent until the
 * permissions change; the message says how to render them for this one.
 */
export class ConsumerRefused extends Error {
  constructor(log: EventLog, durable: string, partition: number, detail: string, cause: unknown) {
    const { stream, prefix, partitions } = log.space;
    super(
      `the NATS server refuses this service the consumer ${durable} of stream ${stream} (partition ${partition} of ${partitions}): ${detail}. ` +
        `Its permissions must name this deployment's stream, subject prefix and partition count: render them with ` +
        `runplane docs nats-auth --stream ${stream} --prefix ${prefix} --partitions ${partitions} (deploy/nats/accounts.conf)`,
      { cause },
    );
    this.name = 'ConsumerRefused';
  }
}

/**
 * Nest microservice transport over the service's partition consumers. For every partition this
 * replica owns ({@link PartitionOwnership}) it consumes the durable `<prefix>-<service>-p<N>`
 * (the owners' subjects the service reads, of that partition only; pinned to one client at a time
 * by the server); when the membership of the service changes it releases the partitions that are
 * no longer its (in-flight handlers finish and are acknowledged, the rest is handed back, the pin
 * is dropped at once) and starts the new ones, unpinning a partition whose previous owner is gone.
 * Each stored event is routed by its `type` to the `@EventPattern(type)` handler (`@Payload()` is
 * the {@link StoredEvent}); events without a handler are acknowledged and skipped. A handler that
 * throws makes the message redeliver (see DurableConsumer). One Run's events are handled one at a
 * time, in order: they are all in one partition (with {@link EventTransportSpec.onArrival}, each as
 * it arrives, in order).
 */
export class JetStreamEventTransport extends Server implements CustomTransportStrategy {
  private readonly consumers = new Map<number, DurableConsumer>();
  /** Per partition, the chain of start/release steps (so that a partition that moves away and back is handled in order). */
  private readonly steps = new Map<number, Promise<void>>();
  private readonly chains = new Map<string, Promise<void>>();
  private readonly nestLogger = new Logger('JetStreamEventTransport');
  private unsubscribe: (() => void) | null = null;
  private closed = false;
  /** Set once {@link close} has released every partition consumer. */
  private released = false;
  /** The events whose handlers run now (for a stopping process's last log line). */
  private readonly inFlight = new Set<StoredEvent>();

  constructor(
    private readonly log: EventLog,
    private readonly spec: EventTransportSpec,
    private readonly ownership: PartitionOwnership,
    private readonly logging: EventTransportLogging = {},
    /** Where the consumers it serves are registered for readiness (service-kit's `consumers` check). */
    private readonly served: ServedConsumers = new ServedConsumers(),
  ) {
    super();
  }

  async listen(callback: (...optionalParams: unknown[]) => unknown): Promise<void> {
    try {
      this.previousMembers = this.ownership.members();
      this.unsubscribe = this.ownership.onChange((c) => this.onChange(c));
      await Promise.all(this.ownership.partitions().map((p) => this.step(p, () => this.startPartition(p, null, []))));
      // a consumer the broker refuses this service (its permissions name another stream, prefix or
      // partition count) is refused again at every try: the start fails, saying so
      if (this.refusal) throw this.refusal;
      callback();
    } catch (e) {
      callback(e);
    }
  }

  /** The partitions whose consumers run now (started, not released). */
  consuming(): number[] {
    return [...this.consumers.keys()].sort((a, b) => a - b);
  }

  private onChange(change: OwnershipChange): void {
    if (this.closed) return;
    for (const p of change.removed) void this.step(p, () => this.releasePartition(p));
    const previous = this.previousMembers;
    for (const p of change.added) void this.step(p, () => this.startPartition(p, change.stale, previous));
    this.previousMembers = change.members;
  }

  private previousMembers: string[] = [];

  /** The first partition consumer the broker refused this service (a permissions violation), if any. */
  private refusal: Error | null = null;

  private step(p: number, fn: () => Promise<void>): Promise<void> {
    const next = (this.steps.get(p) ?? Promise.resolve()).then(fn).catch((e: unknown) => {
      if (e instanceof ConsumerRefused) this.refusal ??= e;
      this.nestLogger.error({ partition: p, err: describeError(e) }, 'partition step failed');
    });
    this.steps.set(p, next);
    return next;
  }

  private durable(p: number): string {
    return `${this.spec.service}-p${p}`;
  }

  /**
   * @param stale the members that went stale in the change (null at start-up)
   * @param previous the live members before it: when the partition's owner among them went stale, its pin is dropped
   */
  private async startPartition(p: number, stale: string[] | null, previous: string[]): Promise<void> {
    if (this.closed || this.consumers.has(p) || !this.ownership.ownsPartition(p)) return;
    const logger = {
      warn: (fields: object, m: string) => this.nestLogger.warn(fields, m),
      error: (fields: object, m: string) => this.nestLogger.error(fields, m),
    };
    const pinTimeoutMs = this.spec.pinTimeoutMs ?? 5_000;
    // every subject of the partition: what this process kept of its Runs may lack what another
    // process handled while it was not the partition's owner; its folds start again from the log
    const wholeRuns = SERVICE_CONSUMERS[this.spec.service] === 'all';
    if (wholeRuns) this.log.deliveries.partitionMoved(p);
    const consumer = new DurableConsumer(
      this.log,
      {
        durable: this.durable(p),
        filter: consumerFilters(this.log.space, this.spec.service, p),
        ...(this.spec.ackWaitMs ? { ackWaitMs: this.spec.ackWaitMs } : {}),
        pinned: { group: PARTITION_GROUP, timeoutMs: pinTimeoutMs, pullExpiresMs: Math.max(1_000, Math.floor(pinTimeoutMs / 2.5)) },
        wholeRuns,
        ...(this.spec.onArrival ? { onArrival: true } : {}),
        // a consumer that keeps no folds hands its handlers only their types: the rest of the
        // catalogue's is acknowledged unread; a type outside it (only a forgery names one) goes the
        // whole way and is terminated, and is never looked up (consumer.ts payloadTypeOf)
        ...(wholeRuns ? {} : { handles: (type: EventType) => this.handlerOf(type) !== null }),
      },
      (stored) => this.dispatch(stored),
      logger,
      this.chains,
    );
    const wanted = () => !this.closed && this.ownership.ownsPartition(p);
    const started = await retry('startupConnect', () => consumer.start(), {
      // refused by the broker's permissions: refused again at every try (a trial's lifecycle tried for ever, never ready)
      shouldRetry: ({ error }) => wanted() && !permissionViolationOf(error),
      onFailedAttempt: ({ error, attemptNumber }) => {
        if (wanted())
          this.nestLogger.warn(
            { partition: p, attempt: attemptNumber, err: describeError(error) },
            'could not start a partition consumer yet; retrying',
          );
      },
    }).then(
      () => true,
      (e: unknown) => {
        const refused = permissionViolationOf(e);
        if (refused && wanted()) throw new ConsumerRefused(this.log, consumer.durableName, p, refused.message, e);
        if (wanted()) throw e;
        return false; // no longer this process's partition, or closing
      },
    );
    if (!started) return;
    this.consumers.set(p, consumer);
    this.served.add(consumer);
    // the partition's owner before this change went stale (killed, frozen): its pin is dropped now,
    // not after the priority timeout. A live previous owner, or one that left gracefully, unpins
    // itself once its in-flight work is done, so one Run's events stay in order.
    if (stale?.length && previous.length) {
      const owner = [...assignPartitions(this.log.space.partitions, previous)].find(([, ps]) => ps.includes(p))?.[0];
      // judged again now: a member seen stale by a recomputation that a newer one has superseded
      // (its beats came in after all) keeps its pin
      const goneStill = () => !this.ownership.members().includes(owner!) && this.ownership.ownsPartition(p);
      if (owner && owner !== this.log.writer.instance && stale.includes(owner) && goneStill()) {
        this.nestLogger.log({ partition: p, previousOwner: owner }, 'the previous owner of a partition is gone: unpinning it');
        await consumer.unpin();
      }
    }
  }

  private async releasePartition(p: number): Promise<void> {
    const consumer = this.consumers.get(p);
    if (!consumer) return;
    this.consumers.delete(p);
    this.served.delete(consumer);
    await consumer.release();
    if (SERVICE_CONSUMERS[this.spec.service] === 'all') this.log.deliveries.partitionMoved(p);
  }

  /**
   * The handler of each event type, looked up once per type: Nest's `getHandlerByPattern` first
   * tries `JSON.parse` on the pattern, which throws (and builds a SyntaxError) for every plain
   * event type, twice per delivery when the service has a catch-all handler. Handlers are all
   * registered before `listen`, so the answer for a type never changes once deliveries start.
   */
  private readonly handlers = new Map<string, MessageHandler | null>();

  private handlerOf(type: string): MessageHandler | null {
    let handler = this.handlers.get(type);
    if (handler === undefined) {
      handler = this.getHandlerByPattern(type) ?? this.getHandlerByPattern(ALL_EVENTS) ?? null;
      this.handlers.set(type, handler);
    }
    return handler;
  }

  private async dispatch(stored: StoredEvent): Promise<void> {
    const handler = this.handlerOf(stored.event.type);
    if (!handler) return;
    // one consumer span per handled event, a child of the message's trace context (DurableConsumer made it active)
    const run = () =>
      inSpan(
        `handle ${stored.event.type}`,
        {
          kind: SpanKind.CONSUMER,
          attributes: {
            'messaging.system': 'nats',
            'messaging.operation.type': 'process',
            'messaging.destination.name': stored.subject,
            'messaging.consumer.group.name': this.spec.service,
            'messaging.message.id': stored.event.eventId,
            'runplane.run_id': stored.event.runId,
            'runplane.event_type': stored.event.type,
            'runplane.seq': stored.seq,
          },
        },
        async () => {
          const result: unknown = await handler(stored);
          await lastValueFrom(this.transformToObservable(result), { defaultValue: undefined });
        },
      );
    const fields = { runId: stored.event.runId, eventType: stored.event.type, seq: stored.seq };
    this.inFlight.add(stored);
    try {
      await (this.logging.inLogContext ? this.logging.inLogContext(fields, run) : run());
    } finally {
      this.inFlight.delete(stored);
    }
  }

  /**
   * Where the transport is: `consuming`, `closing` ({@link close} waits for the handlers in
   * flight) or `closed`; and those handlers, oldest first.
   */
  progress(): { state: 'consuming' | 'closing' | 'closed'; handlers: { runId: string; eventType: string; seq: number }[] } {
    return {
      state: this.released ? 'closed' : this.closed ? 'closing' : 'consuming',
      handlers: [...this.inFlight].map((s) => ({ runId: s.event.runId, eventType: s.event.type, seq: s.seq })),
    };
  }

  /**
   * Leaves the service's partitions (graceful stop): deregisters this replica (the others
   * recompute and start pulling its partitions), then releases every partition consumer
   * (in-flight handlers finish and are acknowledged, the rest is handed back, the pin dropped).
   */
  async close(): Promise<void> {
    this.closed = true;
    this.unsubscribe?.();
    await Promise.all([...this.steps.values()]);
    await Promise.all([this.ownership.stop(), ...[...this.consumers.keys()].map((p) => this.releasePartition(p))]);
    this.released = true;
  }

  on(): void {}

  unwrap<T>(): T {
    return [...this.consumers.values()] as T;
  }
}
