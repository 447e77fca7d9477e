import { Injectable, Module, type OnApplicationShutdown } from '@nestjs/common';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { z } from 'zod';
// a type only (erased): the module itself is loaded with the first read, below
import type { RunListQuery } from '@runplane/projections';
import type { MoneySettings } from './budget.js';
import { DatabaseConfig, QuotaConfig, type RunLimits, type RunView } from '@runplane/contracts';
import { inSpan, SpanKind } from '@runplane/eventlog';
import { configToken, dependencyUnavailable, HealthModule, InjectConfig, unavailableDependency, type ReadinessCheck } from '@runplane/service-kit';
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

/** The database name in a PostgreSQL URL (`db.namespace` of the read spans); '' when it has none or is not a URL. */
function databaseOf(url: string): string {
  try {
    return decodeURIComponent(new URL(url).pathname.slice(1));
  } catch {
    return '';
  }
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
    return this.read('the Run projections', 'select run', (p, orm) => p.getRunView(orm, runId), { 'runplane.run_id': runId });
  }

  /**
   * One page of Run projections, newest first (see `listRunViews`): one principal's, or every
   * Run's when `principal` is null.
   * @throws 503 `dependency_unavailable` (with `Retry-After`) when PostgreSQL cannot be reached.
   */
  async list(q: RunListQuery): Promise<{ runs: RunView[]; more: boolean }> {
    return this.read('the Run projections', 'select run list', (p, orm) => p.listRunViews(orm, q));
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
    return this.read('the Run projections the quotas count', 'select quota usage', async ({ quotaUsageOf, costChargesOf }, orm) => {
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
   * Whether PostgreSQL answers `select 1` (admission's `postgres` readiness check): once connected
   * (the first Run read, or this check when `connect` is true); before that, `{connected: false}`
   * without connecting, so that admission loads its database module only when something reads.
   * @throws when PostgreSQL does not answer.
   */
  async ping(connect: boolean): Promise<{ connected: boolean }> {
    if (!this.orm && !connect) return { connected: false };
    const orm = await this.connect();
    await orm.em.fork().execute('select 1');
    return { connected: true };
  }

  /**
   * Runs `query` with the projections module and the connected ORM, in a client span `operation`
   * (`db.system.name` postgresql, `db.namespace` the database): a POST's quota read and a GET's
   * Run read show in the request's trace (docs/operations.md#traces).
   * @throws 503 `dependency_unavailable` (with `Retry-After`) naming PostgreSQL and `what` when PostgreSQL cannot be reached; anything else `query` throws, as it is.
   */
  private async read<T>(
    what: string,
    operation: string,
    query: (projections: Projections, orm: MikroORM) => Promise<T>,
    attributes: Record<string, string> = {},
  ): Promise<T> {
    try {
      return await inSpan(
        operation,
        {
          kind: SpanKind.CLIENT,
          attributes: {
            'db.system.name': 'postgresql',
            'db.namespace': databaseOf(this.db.DATABASE_URL),
            'db.operation.name': operation,
            ...attributes,
          },
        },
        async () => {
          const orm = await this.connect();
          return await query(await loadProjections(), orm);
        },
      );
    } catch (e) {
      if (unavailableDependency(e) === 'PostgreSQL') throw dependencyUnavailable(`PostgreSQL (${what})`);
      throw e;
    }
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.orm) await (await this.orm).close();
  }
}

/** Provides the one {@link RunReader} of admission (its routes and its readiness check share it). */
@Module({ providers: [RunReader], exports: [RunReader] })
export class RunReaderModule {}

/** Whether any quota is configured (`RUNPLANE_QUOTA_*`): then every admission reads PostgreSQL first. */
export function quotasConfigured(
  q: Pick<QuotaConfig, 'RUNPLANE_QUOTA_CONCURRENT_RUNS' | 'RUNPLANE_QUOTA_RUNS_PER_HOUR' | 'RUNPLANE_QUOTA_COST_MICROS_PER_DAY'>,
): boolean {
  return q.RUNPLANE_QUOTA_CONCURRENT_RUNS != null || q.RUNPLANE_QUOTA_RUNS_PER_HOUR != null || q.RUNPLANE_QUOTA_COST_MICROS_PER_DAY != null;
}

/**
 * Admission's `postgres` readiness check (docs/operations.md, "Health probes"). With a quota
 * configured every admission reads the quota usage from PostgreSQL, so a replica that cannot
 * reach it admits nothing: the check is required (503 naming PostgreSQL). Without quotas,
 * admitting needs NATS only and PostgreSQL serves the Run reads alone: the check is reported in
 * `details` (`required: false`) and never makes the replica unready, so that a PostgreSQL outage
 * does not stop admissions; before the first Run read it says `connected: false` without connecting.
 */
export function admissionPostgresCheck(reader: Pick<RunReader, 'ping'>, quotas: boolean): ReadinessCheck {
  return { key: 'postgres', dependency: 'PostgreSQL', required: () => quotas, check: () => reader.ping(quotas) };
}

/** Admission's health module: the kit's checks and `postgres` ({@link admissionPostgresCheck}). */
export const AdmissionHealthModule = HealthModule.withChecks({
  imports: [RunReaderModule],
  inject: [RunReader, configToken(QuotaConfig)],
  useFactory: (reader: RunReader, quotas: QuotaConfig) => [admissionPostgresCheck(reader, quotasConfigured(quotas))],
});
