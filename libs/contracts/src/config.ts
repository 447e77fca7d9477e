/**
 * Configuration from environment variables, validated at start-up. Every variable is documented
 * in the README's configuration table; a bad value stops the process with the zod reason.
 */
import { z } from 'zod';

const port = z.coerce.number().int().min(0).max(65535);
const positiveInt = z.coerce.number().int().positive();

export const BusConfig = z.object({
  NATS_URL: z.string().default('nats://127.0.0.1:4222'),
  /** Credentials of this service's NATS user (deploy/nats/accounts.conf), when the server requires them. */
  NATS_USER: z.string().min(1).optional(),
  NATS_PASSWORD: z.string().optional(),
  /** JetStream stream holding every Run's subjects. */
  RUNPLANE_STREAM: z.string().regex(/^[A-Za-z0-9_-]+$/).default('RUNPLANE'),
  /** First subject token; the stream captures `<prefix>.run.>`. */
  RUNPLANE_SUBJECT_PREFIX: z.string().regex(/^[A-Za-z0-9_-]+$/).default('rp'),
});
export type BusConfig = z.infer<typeof BusConfig>;

export const DatabaseConfig = z.object({
  DATABASE_URL: z.string().default('postgresql://postgres@127.0.0.1:5432/runplane'),
});

export const ModelConfig = z.object({
  OPENAI_BASE_URL: z.string().url().default('http://127.0.0.1:8090/v1'),
  OPENAI_API_KEY: z.string().default('runplane-scripted'),
  RUNPLANE_MODEL: z.string().default('runplane-scripted-research'),
  /** Per model request, milliseconds. */
  RUNPLANE_MODEL_TIMEOUT_MS: positiveInt.default(120_000),
});

export const LimitsConfig = z.object({
  RUNPLANE_MAX_MODEL_REQUESTS: positiveInt.default(8),
  RUNPLANE_MAX_TOOL_CALLS: z.coerce.number().int().nonnegative().default(16),
  /** Overall Run deadline, seconds from admission. */
  RUNPLANE_RUN_DEADLINE_SECONDS: positiveInt.default(900),
});

export const HttpConfig = z.object({ HOST: z.string().default('127.0.0.1') });
export const AdmissionPort = z.object({ ADMISSION_PORT: port.default(8081) });
export const PublicationPort = z.object({ PUBLICATION_PORT: port.default(8082) });

/**
 * Parses `env` with `schema`; on failure throws an Error listing every bad variable, e.g.
 * `Invalid configuration: NATS_URL: Required`.
 */
export function loadConfig<S extends z.ZodObject>(schema: S, env: NodeJS.ProcessEnv = process.env): z.infer<S> {
  const parsed = schema.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    throw new Error(`Invalid configuration: ${lines.join('; ')}`);
  }
  return parsed.data;
}
