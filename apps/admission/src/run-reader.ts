import { Injectable, type OnApplicationShutdown } from '@nestjs/common';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { z } from 'zod';
import { DatabaseConfig, type RunLimits, type RunView } from '@runplane/contracts';
import { createProjectionOrm, getRunView } from '@runplane/projections';
import { InjectConfig } from '@runplane/service-kit';

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
    this.orm ??= createProjectionOrm({ databaseUrl: this.db.DATABASE_URL });
    return this.orm;
  }

  /** The Run's projection, or null when it is unknown or not projected yet. */
  async get(runId: string): Promise<RunView | null> {
    return getRunView(await this.connect(), runId);
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.orm) await (await this.orm).close();
  }
}
