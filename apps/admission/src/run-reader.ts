import { Injectable, type OnApplicationShutdown } from '@nestjs/common';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { z } from 'zod';
import { DatabaseConfig, type RunLimits, type RunView } from '@runplane/contracts';
import { createProjectionOrm, getRunView } from '@runplane/projections';
import { dependencyUnavailable, InjectConfig, unavailableDependency } from '@runplane/service-kit';

export const ADMISSION_SETTINGS = Symbol('ADMISSION_SETTINGS');

export interface AdmissionSettings {
  model: string;
  limits: Omit<RunLimits, 'deadlineAt'> & { deadlineSeconds: number };
}

/** Reads Run projections from PostgreSQL (reads never append, K11). */
@Injectable()
export class RunReader implements OnApplicationShutdown {
  private orm: Promise<MikroORM> | null = null;

  constructor(@InjectConfig(DatabaseConfig) private readonly db: z.infer<typeof DatabaseConfig>) {}

  private connect(): Promise<MikroORM> {
    if (!this.orm) {
      const orm = createProjectionOrm({ databaseUrl: this.db.DATABASE_URL });
      // a failed start is not kept: the next read tries again (PostgreSQL may be back)
      orm.catch(() => {
        if (this.orm === orm) this.orm = null;
      });
      this.orm = orm;
    }
    return this.orm;
  }

  /**
   * The Run's projection, or null when it is unknown or not projected yet.
   * @throws 503 `dependency_unavailable` (with `Retry-After`) when PostgreSQL cannot be reached.
   */
  async get(runId: string): Promise<RunView | null> {
    try {
      return await getRunView(await this.connect(), runId);
    } catch (e) {
      if (unavailableDependency(e) === 'PostgreSQL') throw dependencyUnavailable('PostgreSQL (the Run projections)');
      throw e;
    }
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.orm) await (await this.orm).close();
  }
}
