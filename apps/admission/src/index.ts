export * from './decide.js';
export * from './budget.js';
