import { Controller, Get, HttpException, HttpStatus } from '@nestjs/common';
import { EventLog } from '@runplane/eventlog';
import { ProjectionDatabase } from './projection-database.js';

export interface ProjectorHealth {
  status: 'ok' | 'unavailable';
  nats: 'up' | 'down';
  postgres: 'up' | 'down';
}

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
 * `select 1` on the projection database both answer within 2 s; otherwise 503 with the same
 * shape, `status: "unavailable"` and the failing side `down`.
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
    if (body.status !== 'ok') throw new HttpException(body, HttpStatus.SERVICE_UNAVAILABLE);
    return body;
  }
}
