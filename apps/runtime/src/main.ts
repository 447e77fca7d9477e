import { allRunsFilter } from '@runplane/eventlog';
import { main } from '@runplane/service-kit';
import { RuntimeModule } from './runtime.module.js';

main({
  name: 'runtime',
  module: RuntimeModule,
  portEnv: 'RUNTIME_PORT',
  defaultPort: 8083,
  consumer: { durable: 'runtime', filter: allRunsFilter },
});
