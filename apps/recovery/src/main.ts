import { LeaseConfig, RecoveryConfig } from '@runplane/contracts';
import { main } from '@runplane/service-kit';
import { RecoveryModule } from './recovery.module.js';

main({
  name: 'recovery',
  module: RecoveryModule,
  portEnv: 'RECOVERY_PORT',
  defaultPort: 8087,
  config: [LeaseConfig, RecoveryConfig],
  // one durable per filter: recovery-admission (cancel, deadlines), recovery-runtime (closing the executors' subjects)
  consumer: {},
});
