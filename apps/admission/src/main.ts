import { main } from '@runplane/service-kit';
import { AdmissionModule } from './admission.module.js';

main({ name: 'admission', module: AdmissionModule, portEnv: 'ADMISSION_PORT', defaultPort: 8081 });
