/**
 * The projector as a service of the shared bootstrap (`@runplane/service-kit`): its module, its
 * configuration and its partition consumers `<prefix>-projector-p<N>` (every subject of a partition).
 */
import { startService, type ServiceSpec, type StartedService, type StartServiceOptions } from '@runplane/service-kit';
import { AppModule } from './app.module.js';
import { ProjectorConfig } from './config.js';

/** The projector's durable consumers are `<prefix>-<PROJECTOR_DURABLE>-p<N>`, one per partition. */
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
  // handlers take deliveries as they arrive (several events of one Run in one flush, see ProjectorService)
  consumer: { onArrival: true },
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
