/**
 * Health of a service through `@nestjs/terminus` (docs/operations.md "Health probes"): `GET /livez` (the process answers:
 * for the liveness probe), `GET /readyz` (what it needs answers: for the readiness probe) and
 * `GET /healthz` (the same as `/readyz`, kept for existing probes). Readiness checks, each within 2 s:
 * - `nats`: a NATS round trip (`server`: the `server_name` of the node the connection is on);
 * - `stream`: the Run stream answers;
 * - `consumers`: every durable consumer this replica serves (its partition consumers) exists on the
 *   server and its pull loop runs (the server lookup is cached {@link CONSUMER_LOOKUP_TTL_MS});
 * - the service's own checks ({@link HealthModule.withChecks}: the projector's `postgres`), each
 *   required (fails readiness) or reported only (in `details`, never failing it).
 * A check that fails is 503 `dependency_unavailable` naming it, with every check's result in
 * `checks` and `Retry-After`. A connection that is open but whose server is frozen fails the
 * round trip: the service says so within 2 s instead of answering 200.
 */
import { Controller, Get, Inject, Module, Optional, ServiceUnavailableException, type DynamicModule, type ModuleMetadata } from '@nestjs/common';
import { HealthCheckService, HealthIndicatorService, TerminusModule, type HealthCheckResult, type HealthIndicatorResult } from '@nestjs/terminus';
import { EventLog, ServedConsumers } from '@runplane/eventlog';
import { dependencyUnavailable } from './problems.js';

/** How long one readiness check may take, ms. */
export const HEALTH_CHECK_TIMEOUT_MS = 2_000;

/**
 * How long the `consumers` check trusts what the server said of a durable consumer, ms: probes
 * of every replica every few seconds cost at most one `CONSUMER.INFO` request per durable per
 * 5 s, and a consumer deleted on the server shows within that.
 */
export const CONSUMER_LOOKUP_TTL_MS = 5_000;

/** `fn` within {@link HEALTH_CHECK_TIMEOUT_MS}, else an Error saying it did not answer in time. */
export async function withinTimeout<T>(what: string, fn: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      fn(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what} did not answer within ${HEALTH_CHECK_TIMEOUT_MS} ms`)), HEALTH_CHECK_TIMEOUT_MS);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * One more readiness check of a service (beside `nats`, `stream` and `consumers`).
 * `check` resolves with details to report (it is up) or rejects (it is down, the error's message
 * the reason); it is given {@link HEALTH_CHECK_TIMEOUT_MS}.
 */
export interface ReadinessCheck {
  /** The key in the body (`postgres`). */
  key: string;
  /** How a 503 names it (`PostgreSQL`). */
  dependency: string;
  /**
   * Whether it being down makes the replica unready (default true). When false it is reported in
   * `details` (`required: false`) and the replica stays ready: what the service does without it
   * still works. Asked on every probe.
   */
  required?: () => boolean;
  check(): Promise<Record<string, unknown> | void>;
}

/** The service's own readiness checks ({@link HealthModule.withChecks}). */
export const READINESS_CHECKS = Symbol('READINESS_CHECKS');

/** The names of the services' dependencies as a problem names them. */
const DEPENDENCY: Record<string, string> = { nats: 'NATS', stream: 'NATS JetStream' };

/** What the server last said of one durable consumer. */
interface ConsumerLookup {
  at: number;
  /** null: not known (the lookup failed without a "not found"; the nats and stream checks report that). */
  exists: boolean | null;
  reason?: string;
}

@Controller()
export class HealthController {
  private readonly lookups = new Map<string, ConsumerLookup>();
  private readonly inFlight = new Map<string, Promise<ConsumerLookup>>();
  /**
   * How long this controller trusts what the server said of a durable consumer, ms
   * ({@link CONSUMER_LOOKUP_TTL_MS} unless changed: a test that deletes a consumer shortens it to
   * see the deletion, and the recreation, without waiting out 5 s each).
   */
  consumerLookupTtlMs = CONSUMER_LOOKUP_TTL_MS;

  constructor(
    private readonly health: HealthCheckService,
    private readonly indicators: HealthIndicatorService,
    private readonly log: EventLog,
    @Optional() private readonly served?: ServedConsumers,
    @Optional() @Inject(READINESS_CHECKS) private readonly extra: ReadinessCheck[] = [],
  ) {}

  /** `GET /livez`: 200 `{status: "ok"}` while the process answers HTTP. */
  @Get('livez')
  livez(): Promise<HealthCheckResult> {
    return this.health.check([]);
  }

  /** `GET /readyz`: 200 when every required check is up (NATS, the stream, the consumers, the service's own); else 503 `dependency_unavailable`. */
  @Get('readyz')
  readyz(): Promise<HealthCheckResult> {
    return this.ready();
  }

  /** `GET /healthz`: the same as `/readyz`. */
  @Get('healthz')
  healthz(): Promise<HealthCheckResult> {
    return this.ready();
  }

  private async ready(): Promise<HealthCheckResult> {
    const extra = this.extra ?? [];
    const required = extra.filter((c) => c.required?.() ?? true);
    const reported = extra.filter((c) => !required.includes(c));
    // reported-only checks run beside the required ones and join the details, never the errors
    const reportedResults = Promise.all(reported.map((c) => this.run(c, false)));
    try {
      const result = await this.health.check([
        () => this.nats(),
        () => this.stream(),
        () => this.consumers(),
        ...required.map((c) => () => this.run(c, true)),
      ]);
      const more = Object.assign({}, ...(await reportedResults)) as HealthIndicatorResult;
      return { ...result, info: { ...result.info, ...more }, details: { ...result.details, ...more } };
    } catch (e) {
      if (!(e instanceof ServiceUnavailableException)) throw e;
      const result = e.getResponse() as HealthCheckResult;
      const more = Object.assign({}, ...(await reportedResults)) as HealthIndicatorResult;
      const down = Object.entries(result.error ?? {}).map(([k, v]) => this.dependencyOf(k, v as Record<string, unknown>));
      throw dependencyUnavailable(down.join(' and ') || 'a dependency', undefined, { checks: { ...result.details, ...more } });
    }
  }

  private dependencyOf(key: string, result: Record<string, unknown>): string {
    if (key === 'consumers') {
      const bad = (result.down as string[] | undefined) ?? [];
      return `the durable consumer${bad.length === 1 ? '' : 's'} ${bad.join(', ')}`;
    }
    return DEPENDENCY[key] ?? this.extra?.find((c) => c.key === key)?.dependency ?? key;
  }

  private async run(c: ReadinessCheck, required: boolean): Promise<HealthIndicatorResult> {
    const check = this.indicators.check(c.key);
    const flag = required ? {} : { required: false };
    try {
      const details = await withinTimeout(c.dependency, () => c.check());
      return check.up({ ...flag, ...(details ?? {}) });
    } catch (e) {
      return check.down({ ...flag, reason: (e as Error).message });
    }
  }

  /** The `nats` check: a round trip, reporting the server (its `server_name`) the connection is on, so an operator sees which node of a cluster each replica uses. */
  private async nats(): Promise<HealthIndicatorResult> {
    const check = this.indicators.check('nats');
    const server = (): Record<string, string> => (this.log.nc.info?.server_name ? { server: this.log.nc.info.server_name } : {});
    try {
      if (this.log.nc.isClosed()) throw new Error('the connection is closed');
      await withinTimeout('NATS', () => this.log.nc.flush());
      return check.up(server());
    } catch (e) {
      return check.down({ ...server(), reason: (e as Error).message });
    }
  }

  private async stream(): Promise<HealthIndicatorResult> {
    const check = this.indicators.check('stream');
    try {
      await withinTimeout(`stream ${this.log.space.stream}`, () => this.log.jsm.streams.info(this.log.space.stream));
      return check.up({ name: this.log.space.stream });
    } catch (e) {
      return check.down({ name: this.log.space.stream, reason: (e as Error).message });
    }
  }

  /**
   * Every durable consumer this replica serves: it exists on the server (a `CONSUMER.INFO` at most
   * every {@link consumerLookupTtlMs} per durable) and its pull loop runs. Down, naming each
   * durable that is missing (deleted by an operator: the client keeps looking for it and pulls
   * again once it is recreated) or not pulling. A lookup that fails otherwise (a timeout) keeps
   * the last answer: NATS being slow is the `nats` and `stream` checks' to report, not a reason
   * for this one to flap.
   */
  private async consumers(): Promise<HealthIndicatorResult> {
    const check = this.indicators.check('consumers');
    const consumers = this.served?.list() ?? [];
    const durables: Record<string, { exists: boolean | null; pulling: boolean; reason?: string }> = {};
    await Promise.all(
      consumers.map(async (c) => {
        const lookup = await this.lookup(c.durableName);
        durables[c.durableName] = { exists: lookup.exists, pulling: c.pulling, ...(lookup.reason ? { reason: lookup.reason } : {}) };
      }),
    );
    const down = Object.entries(durables)
      .filter(([, d]) => d.exists === false || !d.pulling)
      .map(([name]) => name)
      .sort();
    // names that are no longer served are forgotten
    for (const name of this.lookups.keys()) if (!(name in durables)) this.lookups.delete(name);
    return down.length ? check.down({ durables, down }) : check.up({ durables });
  }

  private lookup(durable: string): Promise<ConsumerLookup> {
    const known = this.lookups.get(durable);
    if (known && Date.now() - known.at < this.consumerLookupTtlMs) return Promise.resolve(known);
    let pending = this.inFlight.get(durable);
    if (!pending) {
      pending = withinTimeout(`consumer ${durable}`, () => this.log.jsm.consumers.info(this.log.space.stream, durable))
        .then(
          (): ConsumerLookup => ({ at: Date.now(), exists: true }),
          (e: unknown): ConsumerLookup =>
            (e as { status?: unknown }).status === 404 || /consumer not found/i.test((e as Error).message)
              ? { at: Date.now(), exists: false, reason: 'not found on the server' }
              : { at: Date.now(), exists: known?.exists ?? null, reason: `lookup failed: ${(e as Error).message}` },
        )
        .then((l) => {
          this.lookups.set(durable, l);
          return l;
        })
        .finally(() => this.inFlight.delete(durable));
      this.inFlight.set(durable, pending);
    }
    return pending;
  }
}

/**
 * `/livez`, `/readyz` and `/healthz` for services whose dependencies are NATS, the Run stream and
 * their durable consumers; {@link HealthModule.withChecks} adds a service's own checks.
 */
@Module({ imports: [TerminusModule.forRoot({ logger: false })], controllers: [HealthController] })
export class HealthModule {
  /**
   * The health module with the service's own readiness checks (the projector's `postgres`), built
   * by `useFactory` from what it injects (provided by `imports`).
   */
  static withChecks(opts: {
    imports?: ModuleMetadata['imports'];
    inject?: (string | symbol | (abstract new (...args: never[]) => unknown))[];
    useFactory: (...deps: never[]) => ReadinessCheck[];
  }): DynamicModule {
    return {
      module: HealthModule,
      // Terminus and the controller come from the decorator's metadata
      imports: opts.imports ?? [],
      providers: [{ provide: READINESS_CHECKS, inject: opts.inject ?? [], useFactory: opts.useFactory }],
    };
  }
}
