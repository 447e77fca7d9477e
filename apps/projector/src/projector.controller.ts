import { Controller, UseFilters } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { StoredEvent } from '@runplane/contracts';
import { ALL_EVENTS, PassThroughEventErrors } from '@runplane/eventlog/nest';
import { ProjectorService } from './projector.service.js';

/** Thin adapter: every stored event from the `projector` durable consumer goes to the projections. */
@Controller()
@UseFilters(PassThroughEventErrors)
export class ProjectorController {
  constructor(private readonly projector: ProjectorService) {}

  /** Resolving acknowledges the message; throwing makes it redeliver (see ProjectorService). */
  @EventPattern(ALL_EVENTS)
  async onEvent(@Payload() stored: StoredEvent): Promise<void> {
    await this.projector.catchUp(stored);
  }
}
