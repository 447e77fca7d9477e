/**
 * Health of a service through `@nestjs/terminus` (docs/operations.md "Health probes"): `GET /livez` (the process answers:
 * for the liveness probe), `GET /readyz` (what it needs answers: a NATS round trip and the Run
 * stream, each within 2 s; for the readiness probe) and `GET /healthz` (the same as `/readyz`,
 * kept for existing probes). A check that fails is 503 `dependency_unavailable` naming it, with
 * every check's result in `checks` and `Retry-After`. A connection that is open but whose server
 * is frozen fails the round trip: the service says so within 2 s instead of answering 200.
 */
import { Controller, Get, Module, ServiceUnavailableException } from '@nestjs/common';
import { HealthCheckService, HealthIndicatorService, TerminusModule, type HealthCheckResult, type HealthIndicatorResult } from '@nestjs/terminus';
import { EventLog } from '@runplane/eventlog';
import { dependencyUnavailable } from './problems.js';

/** How long one readiness check may take, ms. */
export const HEALTH_CHECK_TIMEOUT_MS = 2_000;

/** `fn` within {@link HEALTH_CHECK_TIMEOUT_MS}, else an Error saying it did not answer in time. */
async function withinTimeout<T>(what: string, fn: () => Promise<T>): Promise<T> {
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

/** The names of the services' dependencies as a problem names them. */
const DEPENDENCY: Record<string, string> = { nats: 'NATS', stream: 'NATS JetStream' };

@Controller()
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly indicators: HealthIndicatorService,
    private readonly log: EventLog,
  ) {}

  /** `GET /livez`: 200 `{status: "ok"}` while the process answers HTTP. */
  @Get('livez')
  livez(): Promise<HealthCheckResult> {
    return this.health.check([]);
  }

  /** `GET /readyz`: 200 when NATS answers a round trip and the Run stream answers, each within 2 s; else 503 `dependency_unavailable`. */
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
    try {
      return await this.health.check([() => this.nats(), () => this.stream()]);
    } catch (e) {
      if (!(e instanceof ServiceUnavailableException)) throw e;
      const result = e.getResponse() as HealthCheckResult;
      const down = Object.keys(result.error ?? {});
      throw dependencyUnavailable(down.map((k) => DEPENDENCY[k] ?? k).join(' and ') || 'a dependency', undefined, { checks: result.details });
    }
  }

  private async nats(): Promise<HealthIndicatorResult> {
    const check = this.indicators.check('nats');
    try {
      if (this.log.nc.isClosed()) throw new Error('the connection is closed');
      await withinTimeout('NATS', () => this.log.nc.flush());
      return check.up();
    } catch (e) {
      return check.down({ reason: (e as Error).message });
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
}

/** `/livez`, `/readyz` and `/healthz` for services whose dependencies are NATS and the Run stream. */
@Module({ imports: [TerminusModule.forRoot({ logger: false })], controllers: [HealthController] })
export class HealthModule {}
