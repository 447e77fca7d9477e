import { Controller, Get } from '@nestjs/common';
import type { ProjectorHealthBody } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { dependencyUnavailable } from '@runplane/service-kit';
import { ProjectionDatabase } from './projection-database.js';

/** The projector's health body (contracts `ProjectorHealthBody`). */
export type ProjectorHealth = ProjectorHealthBody;

const CHECK_TIMEOUT_MS = 2_000;

async function probe(check: () => Promise<unknown>): Promise<'up' | 'down'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('timeout')), CHECK_TIMEOUT_MS);
  });
  try {
    await Promise.race([check(), timeout]);
    return 'up';
  } catch {
    return 'down';
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The projector's probes, the same three paths as every other service (service-kit's
 * `HealthController`), with the projector's own readiness body because it also needs PostgreSQL:
 * - `GET /livez`: 200 `{status:"ok"}` while the process answers HTTP. No dependency is checked, so
 *   a NATS or PostgreSQL outage makes the pod unready, never restarts it (the projector retries its
 *   steps in process and resumes from its durable consumer).
 * - `GET /readyz` (and `GET /healthz`, the same): 200 `{status:"ok", nats:"up", postgres:"up"}` when
 *   a NATS round trip and `select 1` on the projection database both answer within 2 s; otherwise
 *   503 problem details `dependency_unavailable` naming the failing side, with `Retry-After` and the
 *   extension members `nats` and `postgres` (`up`/`down`).
 */
@Controller()
export class HealthController {
  constructor(
    private readonly log: EventLog,
    private readonly db: ProjectionDatabase,
  ) {}

  /** `GET /livez`: 200 `{status:"ok"}` while the process answers HTTP (no dependency checked). */
  @Get('livez')
  livez(): { status: 'ok' } {
    return { status: 'ok' };
  }

  /** `GET /healthz`: the same as `/readyz`. */
  @Get('healthz')
  healthz(): Promise<ProjectorHealth> {
    return this.readyz();
  }

  /** `GET /readyz`: NATS and PostgreSQL each answer within 2 s, else 503 `dependency_unavailable`. */
  @Get('readyz')
  async readyz(): Promise<ProjectorHealth> {
    const [nats, postgres] = await Promise.all([
      probe(async () => {
        if (this.log.nc.isClosed()) throw new Error('closed');
        await this.log.nc.flush();
      }),
      probe(() => this.db.ping()),
    ]);
    const body: ProjectorHealth = { status: nats === 'up' && postgres === 'up' ? 'ok' : 'unavailable', nats, postgres };
    if (body.status !== 'ok') {
      const down = [nats === 'down' ? 'NATS' : null, postgres === 'down' ? 'PostgreSQL' : null].filter(Boolean).join(' and ');
      throw dependencyUnavailable(down, undefined, { nats, postgres });
    }
    return body;
  }
}
