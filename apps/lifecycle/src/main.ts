// first, before anything loads @nestjs/common: ICU's locale data stays unmapped until used (service-kit locale-data.ts)
import '@runplane/service-kit/defer-locale-data';
import { main } from '@runplane/service-kit';
import { LifecycleModule } from './lifecycle.module.js';

main({
  name: 'lifecycle',
  module: LifecycleModule,
  portEnv: 'LIFECYCLE_PORT',
  defaultPort: 8086,
  consumer: {},
});
