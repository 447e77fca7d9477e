import { consumerFilters } from '@runplane/eventlog';
import { ContextConfig, DrainConfig, LeaseConfig, ModelConfig, WaitConfig } from '@runplane/contracts';
import { main } from '@runplane/service-kit';
import { RuntimeModule } from './runtime.module.js';

main({
  name: 'runtime',
  module: RuntimeModule,
  portEnv: 'RUNTIME_PORT',
  defaultPort: 8083,
  config: [ModelConfig, LeaseConfig, WaitConfig, ContextConfig, DrainConfig],
  // admission, tools and lifecycle subjects (the lifecycle's carries `child.run.settled`, a wake: K10): libs/eventlog/src/bus.ts
  consumer: { durable: 'runtime', filter: (space) => consumerFilters(space, 'runtime') },
});
