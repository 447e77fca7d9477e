// first, before anything loads @nestjs/common: ICU's locale data stays unmapped until used (service-kit locale-data.ts)
import '@runplane/service-kit/defer-locale-data';
import {
  AuthConfig,
  DatabaseConfig,
  GrantCeilingConfig,
  LimitsConfig,
  ModelConfig,
  ParkingToolsConfig,
  QuotaConfig,
  TestToolsConfig,
} from '@runplane/contracts';
import { main } from '@runplane/service-kit';
import { AdmissionModule } from './admission.module.js';
import { ADMISSION_PROBLEMS } from './problems.js';

main({
  name: 'admission',
  module: AdmissionModule,
  portEnv: 'ADMISSION_PORT',
  defaultPort: 8081,
  config: [AuthConfig, DatabaseConfig, GrantCeilingConfig, LimitsConfig, ModelConfig, ParkingToolsConfig, QuotaConfig, TestToolsConfig],
  // child Runs (K10): admits a child on its parent's `child.run.requested` (runtime subject) and
  // cancels the children still running when a parent settles (lifecycle subject)
  // message bodies are checked to be UTF-8 byte by byte (the JSON parser would substitute U+FFFD)
  rawBody: true,
  // the Run viewer (served by publication, another origin) calls this API: RUNPLANE_CORS_ORIGINS
  cors: true,
  consumer: {},
  // the decider's errors as problems, answered by the one ProblemDetailsFilter
  problems: ADMISSION_PROBLEMS,
});
