// first, before anything loads @nestjs/common: ICU's locale data stays unmapped until used (service-kit locale-data.ts)
import '@runplane/service-kit/defer-locale-data';
import { LeaseConfig, RecoveryConfig } from '@runplane/contracts';
import { main } from '@runplane/service-kit';
import { RecoveryModule } from './recovery.module.js';

main({
  name: 'recovery',
  module: RecoveryModule,
  portEnv: 'RECOVERY_PORT',
  defaultPort: 8087,
  config: [LeaseConfig, RecoveryConfig],
  // one durable per partition, `<prefix>-recovery-p<N>`, on the admission (cancel, deadlines) and
  // runtime (closing the executors' subjects) subjects
  consumer: {},
});
