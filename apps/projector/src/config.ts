/**
 * Projector configuration from environment variables, validated with zod at start-up
 * (a bad value stops the process with the reason, see `loadConfig`).
 */
import { z } from 'zod';
import { BusConfig, DatabaseConfig, envInt, HttpConfig, loadConfig } from '@runplane/contracts';

export const ProjectorConfig = BusConfig.extend(DatabaseConfig.shape)
  .extend(HttpConfig.shape)
  .extend({
    /** HTTP port of `GET /healthz` (0 = any free port). */
    PROJECTOR_PORT: envInt(8085, 0, 65535),
    /** Create the projection database if it is missing (via the server's `postgres` database). */
    PROJECTOR_ENSURE_DATABASE: z.enum(['true', 'false']).default('true'),
  });
export type ProjectorConfig = z.infer<typeof ProjectorConfig>;

/**
 * Reads and validates the projector's configuration.
 * @throws Error `Invalid configuration: ...` listing every bad variable.
 */
export function loadProjectorConfig(env: NodeJS.ProcessEnv = process.env): ProjectorConfig {
  return loadConfig(ProjectorConfig, env);
}
