import { Module } from '@nestjs/common';
import { EventLogModule } from '@runplane/eventlog/nest';
import { HealthController } from './health.controller.js';
import { ProjectionDatabaseModule } from './projection-database.js';
import { ProjectorController } from './projector.controller.js';
import { ProjectorService } from './projector.service.js';

/** The projector: EventLog (NATS) + projection database (PostgreSQL), the consumer handler and `/healthz`. */
@Module({
  imports: [EventLogModule.forService('projector'), ProjectionDatabaseModule],
  controllers: [ProjectorController, HealthController],
  providers: [ProjectorService],
})
export class AppModule {}
