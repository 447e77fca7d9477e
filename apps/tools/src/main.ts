// first, before anything loads @nestjs/common: ICU's locale data stays unmapped until used (service-kit locale-data.ts)
import '@runplane/service-kit/defer-locale-data';
import { DrainConfig, loadConfig, ToolsConfig } from '@runplane/contracts';
import { main } from '@runplane/service-kit';
import { ToolsModule } from './tools.module.js';

main({
  name: 'tools',
  module: ToolsModule,
  portEnv: 'TOOLS_PORT',
  defaultPort: 8084,
  config: [ToolsConfig, DrainConfig],
  consumer: {
    ackWaitMs: () => loadConfig(ToolsConfig).RUNPLANE_TOOLS_ACK_WAIT_MS,
  },
});
