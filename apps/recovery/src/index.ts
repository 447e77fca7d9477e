export * from './decide.js';
export { DeadlineStore, type DeadlineEntry } from './deadlines.js';
