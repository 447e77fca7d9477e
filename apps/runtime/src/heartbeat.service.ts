import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { BusConfig, loadConfig } from '@runplane/contracts';
import { EventLog, ProcessHeartbeat } from '@runplane/eventlog';
import { RUNTIME_SETTINGS, type RuntimeSettings } from './execution.controller.js';

/**
 * This runtime process's heartbeat (K10: recovery tells a late holder from a gone one): beaten by
 * a worker thread with its own NATS connection every third of the lease TTL, apart from the
 * per-Run lease renewals, so that nothing the main thread does for one Run (a long streamed reply,
 * a burst of appends) or a loaded machine's scheduling can make every Run of a live process look
 * abandoned. Started before the consumers deliver (bootstrap), stopped (its key deleted) after the
 * leases were released at shutdown.
 */
@Injectable()
export class RuntimeHeartbeat implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger('runtime');
  private heartbeat: ProcessHeartbeat | null = null;

  constructor(
    private readonly log: EventLog,
    @Inject(RUNTIME_SETTINGS) private readonly settings: RuntimeSettings,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    const bus = loadConfig(BusConfig);
    this.heartbeat = await ProcessHeartbeat.start(
      { natsUrl: bus.NATS_URL, ...(bus.NATS_USER ? { user: bus.NATS_USER, pass: bus.NATS_PASSWORD ?? '' } : {}) },
      this.log.space,
      this.log.writer,
      this.settings.leaseTtlMs,
    );
    this.logger.log(
      { instance: this.log.writer.instance, everyMs: Math.floor(this.settings.leaseTtlMs / 3) },
      'process heartbeat started (worker thread)',
    );
  }

  async onApplicationShutdown(): Promise<void> {
    await this.heartbeat?.stop();
    this.heartbeat = null;
  }
}
