export * from './decide.js';
export * from './cursor.js';
