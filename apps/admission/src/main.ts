import { DatabaseConfig, LimitsConfig, ModelConfig } from '@runplane/contracts';
import { main } from '@runplane/service-kit';
import { AdmissionModule } from './admission.module.js';

main({
  name: 'admission',
  module: AdmissionModule,
  portEnv: 'ADMISSION_PORT',
  defaultPort: 8081,
  config: [DatabaseConfig, LimitsConfig, ModelConfig],
});
