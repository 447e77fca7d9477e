// first, before anything loads @nestjs/common: ICU's locale data stays unmapped until used (service-kit locale-data.ts)
import '@runplane/service-kit/defer-locale-data';
import { fileURLToPath } from 'node:url';
import { AuthConfig, loadConfig, ObserverConfig, ViewerConfig } from '@runplane/contracts';
import { main } from '@runplane/service-kit';
import { PublicationModule } from './publication.module.js';

main({
  name: 'publication',
  module: PublicationModule,
  portEnv: 'PUBLICATION_PORT',
  defaultPort: 8082,
  config: [AuthConfig, ObserverConfig, ViewerConfig],
  consumer: {},
  // the Run viewer: static files (apps/publication/viewer, beside dist/), no build step; its API
  // calls carry the token the user gives it (the event stream here, same origin; admission by CORS),
  // to the admission origins configured here only (the page's config.json and its CSP: the viewer sends the token nowhere else)
  staticFiles: {
    prefix: '/viewer/',
    dir: fileURLToPath(new URL('../viewer/', import.meta.url)),
    options: () => {
      const admissionOrigins = loadConfig(ViewerConfig).RUNPLANE_VIEWER_ADMISSION_ORIGINS;
      return { connectOrigins: admissionOrigins, pageConfig: { admissionOrigins } };
    },
  },
});
