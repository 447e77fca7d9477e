export * from './decide.js';
export * from './quota.js';
