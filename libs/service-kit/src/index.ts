/**
 * Bootstrapping shared by every Runplane service process. Each service is a Nest application
 * with a small HTTP surface (at least `GET /healthz` for Kubernetes probes) and, when it reacts to
 * events, a microservice transport over its own durable JetStream consumer.
 */
import 'reflect-metadata';
import { ConsoleLogger, Controller, Get, Module, type INestApplication, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { AddressInfo } from 'node:net';
import { z } from 'zod';
import { BusConfig, envInt, HttpConfig, loadConfig, type HttpService, type Owner } from '@runplane/contracts';
import { dependencyUnavailable, ProblemDetailsFilter, serveOpenApi } from './problems.js';
import { EventLog, type SubjectSpace } from '@runplane/eventlog';
import { JetStreamEventTransport } from '@runplane/eventlog/nest';

/** `GET /healthz`: 200 `{status:"ok"}` while the NATS connection is open, else 503 `dependency_unavailable` (contracts `HealthBody`). */
@Controller()
export class HealthController {
  constructor(private readonly log: EventLog) {}

  @Get('healthz')
  health(): { status: 'ok' } {
    if (this.log.nc.isClosed()) throw dependencyUnavailable('NATS', 'the connection is closed');
    return { status: 'ok' };
  }
}

@Module({ controllers: [HealthController] })
export class HealthModule {}

export * from './problems.js';

export interface ServiceSpec {
  /** Service name: appears in logs, the NATS connection name and the ready line. */
  name: Owner | 'projector';
  module: Type<unknown>;
  /** Env variable holding the HTTP port, and its default (0 = any free port). */
  portEnv: string;
  defaultPort: number;
  /** Configuration schemas validated before anything starts (a bad value fails in one line). */
  config?: z.ZodObject[];
  /** Durable consumer feeding `@EventPattern` handlers, if the service reacts to events. */
  consumer?: { durable: string; filter: (space: SubjectSpace) => string | string[] };
}

/**
 * Starts a service: Nest app, optional JetStream consumer, HTTP listener. Prints exactly one line
 * `<name> ready on http://<host>:<port>` to stdout once it serves (process supervisors and the
 * demo wait for it). SIGTERM/SIGINT shut down gracefully: the consumer stops fetching, in-flight
 * handlers finish, connections drain.
 */
export async function runService(spec: ServiceSpec): Promise<INestApplication> {
  for (const schema of [BusConfig, ...(spec.config ?? [])]) loadConfig(schema);
  const { HOST } = loadConfig(HttpConfig);
  const port = loadConfig(z.object({ [spec.portEnv]: envInt(spec.defaultPort, 0, 65535) }))[spec.portEnv] as number;
  const app = await NestFactory.create(spec.module, {
    abortOnError: false,
    logger: new ConsoleLogger(spec.name, {
      logLevels: process.env.LOG_LEVEL === 'debug' ? ['error', 'warn', 'log', 'debug'] : ['error', 'warn', 'log'],
      json: process.env.LOG_FORMAT === 'json',
      colors: process.env.NO_COLOR === undefined && process.stdout.isTTY,
    }),
  });
  app.enableShutdownHooks();
  app.useGlobalFilters(new ProblemDetailsFilter());
  serveOpenApi(app, spec.name as HttpService);
  if (spec.consumer) {
    const log = app.get(EventLog);
    app.connectMicroservice(
      { strategy: new JetStreamEventTransport(log, { durable: spec.consumer.durable, filters: [spec.consumer.filter(log.space)].flat() }) },
    );
    await app.startAllMicroservices();
  }
  await app.listen(port, HOST);
  const address = app.getHttpServer().address() as AddressInfo;
  process.stdout.write(`${spec.name} ready on http://${HOST}:${address.port}\n`);
  return app;
}

/** Process entry helper: runs the service, or prints the start-up error in one line and exits 1. */
export function main(spec: ServiceSpec): void {
  runService(spec).catch((e: unknown) => {
    process.stderr.write(`${spec.name} failed to start: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  });
}

export * from './command-handler.js';
