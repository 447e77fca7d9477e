// first, before anything loads @nestjs/common: ICU's locale data stays unmapped until used (service-kit locale-data.ts)
import '@runplane/service-kit/defer-locale-data';
import { ContextConfig, DrainConfig, GrantCeilingConfig, LeaseConfig, ModelConfig, WaitConfig } from '@runplane/contracts';
import { main } from '@runplane/service-kit';
import { RuntimeModule } from './runtime.module.js';

main({
  name: 'runtime',
  module: RuntimeModule,
  portEnv: 'RUNTIME_PORT',
  defaultPort: 8083,
  config: [ModelConfig, LeaseConfig, WaitConfig, ContextConfig, DrainConfig, GrantCeilingConfig],
  // admission, tools, lifecycle (`child.run.settled`, a wake: K10) and its own runtime subject (`run.handed_over`, a wake) of its partitions: libs/eventlog/src/bus.ts
  consumer: {},
});
