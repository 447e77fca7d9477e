import { Module } from '@nestjs/common';
import { EventLogModule } from '@runplane/eventlog/nest';
import { ProjectorHealthModule } from './health.js';
import { ProjectionDatabaseModule } from './projection-database.js';
import { ProjectorController } from './projector.controller.js';
import { ProjectorService } from './projector.service.js';

/** The projector: EventLog (NATS) + projection database (PostgreSQL), the consumer handler and the probes (`/livez`, `/readyz`, `/healthz`). */
@Module({
  imports: [EventLogModule.forService('projector'), ProjectionDatabaseModule, ProjectorHealthModule],
  controllers: [ProjectorController],
  providers: [ProjectorService],
})
export class AppModule {}
