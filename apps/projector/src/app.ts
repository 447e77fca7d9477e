/**
 * The projector as a service of the shared bootstrap (`@runplane/service-kit`): its module, its
 * configuration and its durable consumer `projector` on `<prefix>.run.>`.
 */
import { allRunsFilter } from '@runplane/eventlog';
import { startService, type ServiceSpec, type StartedService, type StartServiceOptions } from '@runplane/service-kit';
import { AppModule } from './app.module.js';
import { ProjectorConfig } from './config.js';

/** Name of the projector's durable JetStream consumer (prefixed with the subject prefix by the log). */
export const PROJECTOR_DURABLE = 'projector';

/** A started projector: the Nest app and the HTTP address it bound. */
export type StartedProjector = StartedService;

/** What the shared bootstrap needs to start the projector (`main.ts` hands it to `main`). */
export const projectorService: ServiceSpec = {
  name: 'projector',
  module: AppModule,
  portEnv: 'PROJECTOR_PORT',
  defaultPort: 8085,
  config: [ProjectorConfig],
  consumer: { durable: PROJECTOR_DURABLE, filter: allRunsFilter },
};

/**
 * Starts the projector in this process from environment configuration (BusConfig,
 * DatabaseConfig, HOST, PROJECTOR_PORT): connects NATS and PostgreSQL, migrates, starts the
 * durable consumer and serves `GET /healthz`. Tests use it; the process entry is `main.ts`.
 * @throws on invalid configuration, unreachable NATS/PostgreSQL or a failed migration.
 */
export function startProjector(opts: StartServiceOptions = {}): Promise<StartedProjector> {
  return startService(projectorService, opts);
}
