export * from './decide.js';
export { DeadlineStore, type DeadlineEntry } from './deadlines.js';
export { nextProgressCheck } from './progress-checks.js';
