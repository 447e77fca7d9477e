/**
 * PostgreSQL projections of the Run log (K11): tables `runs`, `messages`, `passages`, `model_turns`,
 * `tool_calls`, derived from events only. Pure view rules (`evolve*`), the idempotent adapter
 * (`applyStoredEvent`), reads (`getRunView`, `dumpProjectionRows`) and the rebuild check
 * (`rebuildProjections`), and whether a database was built from a given log (`projectionsFromAnotherLog`).
 */
export * from './rows.js';
export * from './evolve.js';
export * from './entities.js';
export * from './orm.js';
export * from './apply.js';
export * from './continuity.js';
export * from './queries.js';
export * from './database.js';
export * from './rebuild.js';
export * from './embedded.js';
export * from './row-sql.js';
export * from './source.js';
