/**
 * Validated configuration as Nest providers: the bootstrap parses each schema from the
 * environment once, before anything starts, and classes receive the parsed value by injection
 * (`@InjectConfig(DatabaseConfig) cfg: z.infer<typeof DatabaseConfig>`) instead of reading
 * `process.env` themselves.
 */
import { Inject, Module, type DynamicModule } from '@nestjs/common';
import type { z } from 'zod';
import { configToken, loadConfig } from '@runplane/contracts';

// the token lives in contracts (one place for every library); re-exported for the services
export { configToken };

/** Parameter decorator: injects the parsed value of `schema` (provided by {@link ConfigModule}). */
export function InjectConfig(schema: z.ZodObject): ParameterDecorator {
  return Inject(configToken(schema));
}

/** Global module providing each schema's parsed value under {@link configToken}. */
@Module({})
export class ConfigModule {
  /**
   * Parses every schema from `env` now.
   * @throws Error `Invalid configuration: ...` listing every bad variable (see `loadConfig`).
   */
  static forRoot(schemas: readonly z.ZodObject[], env: NodeJS.ProcessEnv = process.env): DynamicModule {
    const providers = [...new Set(schemas)].map((schema) => ({ provide: configToken(schema), useValue: loadConfig(schema, env) }));
    return { module: ConfigModule, global: true, providers, exports: providers.map((p) => p.provide) };
  }
}
