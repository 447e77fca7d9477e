export * from './decide.js';
