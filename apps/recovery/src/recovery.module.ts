import { Module } from '@nestjs/common';
import { LeaseConfig, RecoveryConfig } from '@runplane/contracts';
import { EventLog, HeartbeatStore, LeaseStore } from '@runplane/eventlog';
import { EventLogModule } from '@runplane/eventlog/nest';
import { configToken, HealthModule, provideRunCommandHandler } from '@runplane/service-kit';
import { CancelController } from './cancel.controller.js';
import { ClosingController } from './closing.controller.js';
import { DeadlineStore } from './deadlines.js';
import { DeadlineWatcher, RECOVERY_DEADLINES } from './deadline-watcher.service.js';
import { LeaseWatcher, RECOVERY_HEARTBEATS, RECOVERY_LEASES, RECOVERY_SETTINGS, type RecoverySettings } from './lease-watcher.service.js';

/** Wires recovery: the event log, the lease, heartbeat and deadline buckets, its settings (LeaseConfig, RecoveryConfig), the lease and deadline watchers, its adapters on the events of its partitions (cancels, admissions, finished executions). */
@Module({
  imports: [EventLogModule.forService('recovery'), HealthModule],
  controllers: [CancelController, ClosingController],
  providers: [
    // one handler, one fold cache, for the watchers and both adapters
    provideRunCommandHandler('recovery'),
    LeaseWatcher,
    DeadlineWatcher,
    { provide: RECOVERY_LEASES, inject: [EventLog], useFactory: (log: EventLog) => LeaseStore.open(log) },
    { provide: RECOVERY_HEARTBEATS, inject: [EventLog], useFactory: (log: EventLog) => HeartbeatStore.open(log) },
    { provide: RECOVERY_DEADLINES, inject: [EventLog], useFactory: (log: EventLog) => DeadlineStore.open(log) },
    {
      provide: RECOVERY_SETTINGS,
      inject: [configToken(LeaseConfig), configToken(RecoveryConfig)],
      useFactory: (lease: LeaseConfig, recovery: RecoveryConfig): RecoverySettings => ({
        leaseTtlMs: lease.RUNPLANE_LEASE_TTL_MS,
        sweepMs: recovery.RUNPLANE_RECOVERY_SWEEP_MS,
      }),
    },
  ],
})
export class RecoveryModule {}
