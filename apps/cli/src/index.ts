export * from './commands.js';
export * from './render.js';
