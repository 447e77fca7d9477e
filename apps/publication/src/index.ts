export * from './decide.js';
export * from './cursor.js';
export * from './observer-admission.js';
