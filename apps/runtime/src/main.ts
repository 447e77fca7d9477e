import { consumerFilters } from '@runplane/eventlog';
import { LeaseConfig, ModelConfig } from '@runplane/contracts';
import { main } from '@runplane/service-kit';
import { RuntimeModule } from './runtime.module.js';

main({
  name: 'runtime',
  module: RuntimeModule,
  portEnv: 'RUNTIME_PORT',
  defaultPort: 8083,
  config: [ModelConfig, LeaseConfig],
  consumer: { durable: 'runtime', filter: (space) => consumerFilters(space, 'runtime') },
});
