import { Injectable, type OnApplicationShutdown } from '@nestjs/common';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { z } from 'zod';
// a type only (erased): the module itself is loaded with the first read, below
import type { RunListQuery } from '@runplane/projections';
import type { MoneySettings } from './budget.js';
import { DatabaseConfig, type RunLimits, type RunView } from '@runplane/contracts';
import { dependencyUnavailable, InjectConfig, unavailableDependency } from '@runplane/service-kit';
import { QUOTA_DAY_MS, QUOTA_HOUR_MS, type QuotaLimits, type QuotaUsage } from './quota.js';

export const ADMISSION_SETTINGS = Symbol('ADMISSION_SETTINGS');

export interface AdmissionSettings {
  model: string;
  /** Test tools added to every Run's grant (`RUNPLANE_TEST_TOOLS`); none by default. */
  testTools?: string[];
  /** Parking tools (`ask_human`, `spawn_subagent`, K10) in every user Run's grant (`RUNPLANE_PARKING_TOOLS`); both by default. */
  parkingTools?: string[];
  limits: Omit<RunLimits, 'deadlineAt'> & { deadlineSeconds: number };
  /** Per-principal quotas (`RUNPLANE_QUOTA_*`); absent or null entries: no limit. */
  quotas?: QuotaLimits;
  /** The model's price and the money ceiling, for a client's money limit (`./budget.ts`, K7); no money limit is granted when absent. */
  money?: MoneySettings;
}

type Projections = typeof import('@runplane/projections');

/**
 * `@runplane/projections` (MikroORM, its PostgreSQL driver, migrations), loaded with the first
 * Run read: admitting Messages never needs it, and loading it at start-up cost admission about
 * 10 MiB of resident memory whether or not anyone reads a Run (docs/performance.md, idle RSS).
 */
let projections: Promise<Projections> | null = null;
function loadProjections(): Promise<Projections> {
  projections ??= import('@runplane/projections');
  return projections;
}

/** Reads Run projections from PostgreSQL (reads never append, K11); connects on the first read. */
@Injectable()
export class RunReader implements OnApplicationShutdown {
  private orm: Promise<MikroORM> | null = null;

  constructor(@InjectConfig(DatabaseConfig) private readonly db: z.infer<typeof DatabaseConfig>) {}

  private connect(): Promise<MikroORM> {
    if (!this.orm) {
      const orm = loadProjections().then(({ createProjectionOrm }) => createProjectionOrm({ databaseUrl: this.db.DATABASE_URL }));
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
    return this.read('the Run projections', (p, orm) => p.getRunView(orm, runId));
  }

  /**
   * One page of Run projections, newest first (see `listRunViews`): one principal's, or every
   * Run's when `principal` is null.
   * @throws 503 `dependency_unavailable` (with `Retry-After`) when PostgreSQL cannot be reached.
   */
  async list(q: RunListQuery): Promise<{ runs: RunView[]; more: boolean }> {
    return this.read('the Run projections', (p, orm) => p.listRunViews(orm, q));
  }

  /**
   * What the quotas count for `principal` at `now` (null: the Runs admitted without one), from the
   * projections (the Runs' costs only when `limits` sets `costMicrosPerDay`), and the ids of its
   * Runs they show admitted in the last hour (`known`). They follow the log by the projector's lag,
   * so a Run admitted a moment ago may not be counted yet: admission adds its own reservations
   * (`withReservations`, docs/configuration.md, "Quotas").
   * @throws 503 `dependency_unavailable` (with `Retry-After`) when PostgreSQL cannot be reached.
   */
  async quotaUsage(principal: string | null, now: Date, limits: QuotaLimits): Promise<{ usage: QuotaUsage; known: ReadonlySet<string> }> {
    return this.read('the Run projections the quotas count', async ({ quotaUsageOf, costChargesOf }, orm) => {
      const [usage, charges] = await Promise.all([
        quotaUsageOf(orm, principal, new Date(now.getTime() - QUOTA_HOUR_MS)),
        limits.costMicrosPerDay === null ? [] : costChargesOf(orm, principal, new Date(now.getTime() - QUOTA_DAY_MS)),
      ]);
      return {
        usage: { activeRuns: usage.activeRuns, admittedInLastHour: usage.admittedSince, costInLastDay: charges, awaitingHuman: usage.awaitingHuman },
        known: new Set(usage.admittedSinceRunIds),
      };
    });
  }

  /**
   * Runs `query` with the projections module and the connected ORM.
   * @throws 503 `dependency_unavailable` (with `Retry-After`) naming PostgreSQL and `what` when PostgreSQL cannot be reached; anything else `query` throws, as it is.
   */
  private async read<T>(what: string, query: (projections: Projections, orm: MikroORM) => Promise<T>): Promise<T> {
    try {
      const orm = await this.connect();
      return await query(await loadProjections(), orm);
    } catch (e) {
      if (unavailableDependency(e) === 'PostgreSQL') throw dependencyUnavailable(`PostgreSQL (${what})`);
      throw e;
    }
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.orm) await (await this.orm).close();
  }
}
