export * from './decide.js';
export * from './honesty.js';
