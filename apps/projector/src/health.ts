/**
 * The projector's probes: service-kit's health module (`/livez`, `/readyz`, `/healthz`, the same
 * `@nestjs/terminus` body as every service) with NATS, the stream and its partition consumers,
 * and one more required check, `postgres`: `select 1` on the projection database within 2 s.
 * Without PostgreSQL the projector cannot apply a single event, so a replica that cannot reach it
 * is not ready; `/livez` checks no dependency, so an outage never restarts the pod (the projector
 * retries its steps in process and resumes from its durable consumers).
 */
import { HealthModule, type ReadinessCheck } from '@runplane/service-kit';
import { ProjectionDatabase, ProjectionDatabaseModule } from './projection-database.js';

/** The `postgres` readiness check of the projection database. */
export function postgresCheck(db: Pick<ProjectionDatabase, 'ping'>): ReadinessCheck {
  return {
    key: 'postgres',
    dependency: 'PostgreSQL',
    check: async () => {
      await db.ping();
    },
  };
}

/** The projector's health module: the kit's checks and `postgres`. */
export const ProjectorHealthModule = HealthModule.withChecks({
  imports: [ProjectionDatabaseModule],
  inject: [ProjectionDatabase],
  useFactory: (db: ProjectionDatabase) => [postgresCheck(db)],
});
