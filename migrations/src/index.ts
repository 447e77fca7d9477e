/**
 * The projection migrations, in order, as an explicit list for MikroORM's migrator
 * (`migrations: { migrationsList }`): no file globbing of compiled or TypeScript paths at run
 * time. Add a new migration class here, after the existing ones; never edit an applied one.
 */
import type { MigrationObject } from '@mikro-orm/core';
import { Migration20261130000000_projections } from './Migration20261130000000_projections.js';
import { Migration20261130120000_tool_call_observations } from './Migration20261130120000_tool_call_observations.js';
import { Migration20261130130000_parked_status } from './Migration20261130130000_parked_status.js';
import { Migration20261130140000_run_usage } from './Migration20261130140000_run_usage.js';
import { Migration20261130150000_run_clocks } from './Migration20261130150000_run_clocks.js';
import { Migration20261130161000_run_clarification } from './Migration20261130161000_run_clarification.js';
import { Migration20261201150000_run_subject_seqs } from './Migration20261201150000_run_subject_seqs.js';
import { Migration20261202050000_run_principal } from './Migration20261202050000_run_principal.js';
import { Migration20261202140000_run_quota_index } from './Migration20261202140000_run_quota_index.js';
import { Migration20261202150000_run_cost } from './Migration20261202150000_run_cost.js';

export {
  Migration20261130000000_projections,
  Migration20261130120000_tool_call_observations,
  Migration20261130130000_parked_status,
  Migration20261130140000_run_usage,
  Migration20261130150000_run_clocks,
  Migration20261130161000_run_clarification,
  Migration20261201150000_run_subject_seqs,
  Migration20261202050000_run_principal,
  Migration20261202140000_run_quota_index,
  Migration20261202150000_run_cost,
};

/** Every projection migration, oldest first; the name is what the migrations table records. */
export const migrationsList: MigrationObject[] = [
  { name: 'Migration20261130000000_projections', class: Migration20261130000000_projections },
  { name: 'Migration20261130120000_tool_call_observations', class: Migration20261130120000_tool_call_observations },
  { name: 'Migration20261130130000_parked_status', class: Migration20261130130000_parked_status },
  { name: 'Migration20261130140000_run_usage', class: Migration20261130140000_run_usage },
  { name: 'Migration20261130150000_run_clocks', class: Migration20261130150000_run_clocks },
  { name: 'Migration20261130161000_run_clarification', class: Migration20261130161000_run_clarification },
  { name: 'Migration20261201150000_run_subject_seqs', class: Migration20261201150000_run_subject_seqs },
  { name: 'Migration20261202050000_run_principal', class: Migration20261202050000_run_principal },
  { name: 'Migration20261202140000_run_quota_index', class: Migration20261202140000_run_quota_index },
  { name: 'Migration20261202150000_run_cost', class: Migration20261202150000_run_cost },
];
