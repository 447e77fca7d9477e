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
    /**
     * Longest a delivery waits for others to share its flush (one transaction), ms (0 = flush at
     * once). Under load flushes follow each other and are full anyway; a quiet projector would
     * otherwise write one transaction per event, since a Run's events arrive a few ms apart.
     */
    PROJECTOR_BATCH_LINGER_MS: envInt(50, 0, 1000),
  })
  .superRefine((v, ctx) => {
    // a delivery waits the linger, then its flush, before it is acknowledged: well inside the ack
    // wait, or the server sends it again while it is still queued here
    if (v.PROJECTOR_BATCH_LINGER_MS * 2 >= v.RUNPLANE_ACK_WAIT_MS) {
      ctx.addIssue({
        code: 'custom',
        path: ['PROJECTOR_BATCH_LINGER_MS'],
        message: `must be less than half of RUNPLANE_ACK_WAIT_MS (${v.RUNPLANE_ACK_WAIT_MS}): a delivery waits this long before its flush, and unacknowledged past the ack wait it is sent again`,
      });
    }
  });
export type ProjectorConfig = z.infer<typeof ProjectorConfig>;

/**
 * Reads and validates the projector's configuration.
 * @throws Error `Invalid configuration: ...` listing every bad variable.
 */
export function loadProjectorConfig(env: NodeJS.ProcessEnv = process.env): ProjectorConfig {
  return loadConfig(ProjectorConfig, env);
}
