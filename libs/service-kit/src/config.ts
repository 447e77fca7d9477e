/**
 * Validated configuration as Nest providers: the bootstrap parses each schema from the
 * environment once, before anything starts, and classes receive the parsed value by injection
 * (`@InjectConfig(DatabaseConfig) cfg: z.infer<typeof DatabaseConfig>`) instead of reading
 * `process.env` themselves.
 */
import { Inject, Module, type DynamicModule } from '@nestjs/common';
import type { z } from 'zod';
import { loadConfig } from '@runplane/contracts';

const tokens = new WeakMap<z.ZodObject, symbol>();

/** The injection token of a configuration schema's parsed value (one token per schema object). */
export function configToken(schema: z.ZodObject): symbol {
  let token = tokens.get(schema);
  if (!token) {
    token = Symbol(`config:${Object.keys(schema.shape).join(',')}`);
    tokens.set(schema, token);
  }
  return token;
}

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
