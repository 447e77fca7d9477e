export * from './decide.js';
export * from './quota.js';
export * from './budget.js';
export * from './problems.js';
export * from './run-reader.js';
