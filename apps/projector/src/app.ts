import 'reflect-metadata';
import type { AddressInfo } from 'node:net';
import { NestFactory } from '@nestjs/core';
import type { INestApplication, LogLevel } from '@nestjs/common';
import { EventLog, allRunsFilter } from '@runplane/eventlog';
import { JetStreamEventTransport } from '@runplane/eventlog/nest';
import { ProblemDetailsFilter, serveOpenApi } from '@runplane/service-kit';
import { AppModule } from './app.module.js';
import { loadProjectorConfig } from './config.js';

/** Name of the projector's durable JetStream consumer (prefixed with the subject prefix by the log). */
export const PROJECTOR_DURABLE = 'projector';

export interface StartedProjector {
  app: INestApplication;
  /** The HTTP address actually bound (useful with `PROJECTOR_PORT=0`). */
  url: string;
}

export interface StartProjectorOptions {
  logger?: LogLevel[] | false;
  /** Install SIGTERM/SIGINT handlers that close the app and exit 0 (the process entry does). */
  shutdownHooks?: boolean;
}

/**
 * Starts the projector from environment configuration (BusConfig, DatabaseConfig, HOST,
 * PROJECTOR_PORT): connects NATS and PostgreSQL, migrates, starts the durable consumer
 * `projector` on `<prefix>.run.>` and serves `GET /healthz` on HOST:PROJECTOR_PORT.
 * @throws on invalid configuration, unreachable NATS/PostgreSQL or a failed migration.
 */
export async function startProjector(opts: StartProjectorOptions = {}): Promise<StartedProjector> {
  const cfg = loadProjectorConfig();
  const app = await NestFactory.create(AppModule, { logger: opts.logger ?? ['error', 'warn', 'log'] });
  if (opts.shutdownHooks) app.enableShutdownHooks([], { useProcessExit: true });
  app.useGlobalFilters(new ProblemDetailsFilter());
  serveOpenApi(app, 'projector');
  try {
    const log = app.get(EventLog);
    app.connectMicroservice(
      { strategy: new JetStreamEventTransport(log, { durable: PROJECTOR_DURABLE, filters: [allRunsFilter(log.space)] }) },
      { inheritAppConfig: true },
    );
    await app.startAllMicroservices();
    await app.listen(cfg.PROJECTOR_PORT, cfg.HOST);
  } catch (e) {
    await app.close().catch(() => undefined);
    throw e;
  }
  const address = app.getHttpServer().address() as AddressInfo;
  return { app, url: `http://${cfg.HOST}:${address.port}` };
}
