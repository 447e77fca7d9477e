/**
 * The facts of one Run, folded from its events in stream order, and what every owner reads from
 * them: the fold (`fold.ts`), the queries (`queries.ts`), the one usage ledger (`ledger.ts`, K7),
 * the clocks (`clocks.ts`) and the honesty rules of results (`honesty.ts`).
 */
export * from './fold.js';
export * from './queries.js';
export * from './ledger.js';
export * from './clocks.js';
export * from './honesty.js';
