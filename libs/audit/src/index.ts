export * from './checks.js';
export * from './read.js';
