/**
 * Thin Nest adapters: an EventLog provider and a custom microservice transport that feeds a
 * durable JetStream consumer's events to `@EventPattern('<event type>')` handlers.
 */
import { Catch, Logger, Module, type DynamicModule, type OnApplicationShutdown, type RpcExceptionFilter } from '@nestjs/common';
import { Server, type CustomTransportStrategy } from '@nestjs/microservices';
import { lastValueFrom, throwError, type Observable } from 'rxjs';
import { BusConfig, loadConfig, type StoredEvent } from '@runplane/contracts';
import { recordAnomaly } from './anomalies.js';
import { durableFor } from './bus.js';
import { DurableConsumer } from './consumer.js';
import { EventLog } from './event-log.js';

/** Provides one connected {@link EventLog} (configured from BusConfig env vars) and closes it on shutdown. */
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
          useFactory: async () => {
            loadConfig(BusConfig); // a bad value fails here in one readable line
            const log = await EventLog.fromEnv(serviceName);
            const logger = new Logger('EventLog');
            log.onInvalid = (e) => {
              const anomaly = e.anomaly;
              logger.warn(
                { seq: e.seq, subject: e.subject, runId: e.subject.split('.').at(-2), anomaly, anomalies: recordAnomaly(anomaly), reason: e.message },
                'skipping a stored message that is not a fact (an anomaly)',
              );
            };
            EventLogModule.instance = log;
            return log;
          },
        },
      ],
      exports: [EventLog],
    };
  }

  async onApplicationShutdown(): Promise<void> {
    await EventLogModule.instance?.close();
    EventLogModule.instance = null;
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

/**
 * Nest microservice transport over a JetStream durable consumer. Each stored event is routed by
 * its `type` to the `@EventPattern(type)` handler (`@Payload()` is the {@link StoredEvent});
 * events without a handler are acknowledged and skipped. A handler that throws makes the message
 * redeliver (see DurableConsumer).
 */
export class JetStreamEventTransport extends Server implements CustomTransportStrategy {
  private consumers: DurableConsumer[] = [];
  private readonly nestLogger = new Logger('JetStreamEventTransport');

  /**
   * @param spec the durable name and one or more subject filters; with several filters (NATS 2.9
   *   allows one per consumer) one durable consumer is made per filter, named
   *   `<durable>-<last token of the filter>`, and they share one per-Run handler chain.
   */
  constructor(
    private readonly log: EventLog,
    private readonly spec: { durable: string; filters: string[]; ackWaitMs?: number },
    private readonly logging: EventTransportLogging = {},
  ) {
    super();
  }

  async listen(callback: (...optionalParams: unknown[]) => unknown): Promise<void> {
    try {
      const chains = new Map<string, Promise<void>>();
      const logger = {
        warn: (fields: object, m: string) => this.nestLogger.warn(fields, m),
        error: (fields: object, m: string) => this.nestLogger.error(fields, m),
      };
      const { durable, filters, ackWaitMs } = this.spec;
      this.consumers = filters.map((filter) => {
        const name = durableFor(durable, filter, filters.length);
        return new DurableConsumer(
          this.log,
          { durable: name, filter, ...(ackWaitMs ? { ackWaitMs } : {}) },
          (stored) => this.dispatch(stored),
          logger,
          chains,
        );
      });
      for (const c of this.consumers) await c.start();
      callback();
    } catch (e) {
      callback(e);
    }
  }

  private async dispatch(stored: StoredEvent): Promise<void> {
    const handler = this.getHandlerByPattern(stored.event.type) ?? this.getHandlerByPattern(ALL_EVENTS);
    if (!handler) return;
    const run = async () => {
      const result: unknown = await handler(stored);
      await lastValueFrom(this.transformToObservable(result), { defaultValue: undefined });
    };
    const fields = { runId: stored.event.runId, eventType: stored.event.type, seq: stored.seq };
    await (this.logging.inLogContext ? this.logging.inLogContext(fields, run) : run());
  }

  async close(): Promise<void> {
    await Promise.all(this.consumers.map((c) => c.stop()));
  }

  on(): void {}

  unwrap<T>(): T {
    return this.consumers as T;
  }
}
