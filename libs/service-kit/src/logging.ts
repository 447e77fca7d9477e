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
import type { Principal } from './auth.js';

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
 * The fields a request's log line gets for its caller: `principal` (the token's `sub`) and `admin:
 * true` for an operator; nothing before the guard ran (a request it refused, a public route) or
 * with authentication off.
 */
export function principalFields(p: Pick<Principal, 'sub' | 'admin' | 'unauthenticated'> | undefined): Record<string, unknown> {
  if (!p || p.unauthenticated) return {};
  return p.admin ? { principal: p.sub, admin: true } : { principal: p.sub };
}

/**
 * The logger module of service `name`: JSON lines on stderr with `service: name`, HTTP requests
 * logged when they complete (except `GET /healthz`, which probes call every few seconds), their
 * {@link REDACTED_HEADERS} as `[redacted]`, with the caller ({@link principalFields}).
 */
export function serviceLoggerModule(name: string, level: LogLevel): DynamicModule {
  return LoggerModule.forRoot({
    pinoHttp: [
      {
        level,
        base: { service: name, pid: process.pid },
        autoLogging: { ignore: (req) => req.url === '/healthz' },
        // who asked (the token's sub, and `admin` for an operator): an admin's reads of other
        // people's Runs append nothing, so the request line is their only record (a trial's
        // request lines named no principal at all)
        customProps: (req) => principalFields((req as { principal?: Principal }).principal),
        redact: { paths: [...REDACTED_HEADERS.map((h) => `req.headers["${h}"]`), 'res.headers["set-cookie"]'], censor: '[redacted]' },
      },
      // Synchronous: the last lines before an exit are not lost.
      pino.destination({ dest: 2, sync: true }),
    ],
  });
}
