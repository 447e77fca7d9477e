import { AuthConfig } from '@runplane/contracts';
import { main } from '@runplane/service-kit';
import { PublicationModule } from './publication.module.js';

main({
  name: 'publication',
  module: PublicationModule,
  portEnv: 'PUBLICATION_PORT',
  defaultPort: 8082,
  config: [AuthConfig],
  consumer: {},
});
