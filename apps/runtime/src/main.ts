import { ownerFilter } from '@runplane/eventlog';
import { LeaseConfig, ModelConfig, WaitConfig } from '@runplane/contracts';
import { main } from '@runplane/service-kit';
import { RuntimeModule } from './runtime.module.js';

main({
  name: 'runtime',
  module: RuntimeModule,
  portEnv: 'RUNTIME_PORT',
  defaultPort: 8083,
  config: [ModelConfig, LeaseConfig, WaitConfig],
  // the lifecycle subject carries a child's settlement recorded on its parent (`child.run.settled`, a wake: K10)
  consumer: {
    durable: 'runtime',
    filter: (space) => [ownerFilter(space, 'admission'), ownerFilter(space, 'tools'), ownerFilter(space, 'lifecycle')],
  },
});
