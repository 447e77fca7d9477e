/**
 * Structured logs for every service: pino through nestjs-pino, one JSON object per line on
 * stderr (stdout carries only the `<name> ready on <url>` line that supervisors wait for).
 * Nest's own `Logger` instances write through it, so `logger.warn({ runId, seq }, 'message')`
 * gives `runId` and `seq` as fields. The bootstrap runs each event handler inside a log context
 * carrying the event's `runId`, `eventType` and `seq`.
 */
import type { DynamicModule } from '@nestjs/common';
import { LoggerModule } from 'nestjs-pino';
import pino from 'pino';
import { z } from 'zod';

/** `LOG_LEVEL` (pino's levels; default `info`) and `LOG_FORMAT` (`json`, the only format). */
export const LogConfig = z.object({
  LOG_LEVEL: z.preprocess((v) => (v === '' ? undefined : v), z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info')),
  LOG_FORMAT: z.preprocess((v) => (v === '' ? undefined : v), z.enum(['json']).default('json')),
});
export type LogLevel = z.infer<typeof LogConfig>['LOG_LEVEL'];

/**
 * Request headers that carry credentials, never logged: a bearer token can be replayed by anyone
 * who reads the log until it expires (the local stack's live 12 h).
 */
export const REDACTED_HEADERS = ['authorization', 'proxy-authorization', 'cookie'] as const;

/**
 * The logger module of service `name`: JSON lines on stderr with `service: name`, HTTP requests
 * logged when they complete (except `GET /healthz`, which probes call every few seconds), their
 * {@link REDACTED_HEADERS} as `[redacted]`.
 */
export function serviceLoggerModule(name: string, level: LogLevel): DynamicModule {
  return LoggerModule.forRoot({
    pinoHttp: [
      {
        level,
        base: { service: name, pid: process.pid },
        autoLogging: { ignore: (req) => req.url === '/healthz' },
        redact: { paths: [...REDACTED_HEADERS.map((h) => `req.headers["${h}"]`), 'res.headers["set-cookie"]'], censor: '[redacted]' },
      },
      // Synchronous: the last lines before an exit are not lost.
      pino.destination({ dest: 2, sync: true }),
    ],
  });
}
