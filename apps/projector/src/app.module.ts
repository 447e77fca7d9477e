import { Module } from '@nestjs/common';
import { EventLogModule } from '@runplane/eventlog/nest';
import { configToken } from '@runplane/service-kit';
import { ProjectorConfig } from './config.js';
import { ProjectorHealthModule } from './health.js';
import { ProjectionDatabaseModule } from './projection-database.js';
import { ProjectorController } from './projector.controller.js';
import { ProjectionSourceCheck } from './projection-source.js';
import { PROJECTOR_BATCH_LINGER, ProjectorService } from './projector.service.js';

/** The projector: EventLog (NATS) + projection database (PostgreSQL), the check that the database is this log's, the consumer handler and the probes (`/livez`, `/readyz`, `/healthz`). */
@Module({
  imports: [EventLogModule.forService('projector'), ProjectionDatabaseModule, ProjectorHealthModule],
  controllers: [ProjectorController],
  providers: [
    ProjectionSourceCheck,
    ProjectorService,
    { provide: PROJECTOR_BATCH_LINGER, useFactory: (cfg: ProjectorConfig) => cfg.PROJECTOR_BATCH_LINGER_MS, inject: [configToken(ProjectorConfig)] },
  ],
})
export class AppModule {}
