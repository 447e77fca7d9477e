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
 * `GET /healthz`: 200 `{status:"ok", nats:"up", postgres:"up"}` when a NATS round trip and
 * `select 1` on the projection database both answer within 2 s; otherwise 503 problem details
 * `dependency_unavailable` naming the failing side, with `Retry-After` and the extension members
 * `nats` and `postgres` (`up`/`down`).
 */
@Controller()
export class HealthController {
  constructor(
    private readonly log: EventLog,
    private readonly db: ProjectionDatabase,
  ) {}

  @Get('healthz')
  async healthz(): Promise<ProjectorHealth> {
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
