import { main } from '@runplane/service-kit';
import { LifecycleModule } from './lifecycle.module.js';

main({
  name: 'lifecycle',
  module: LifecycleModule,
  portEnv: 'LIFECYCLE_PORT',
  defaultPort: 8086,
  consumer: {},
});
