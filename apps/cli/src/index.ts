export * from './commands.js';
export * from './render.js';
export { program } from './program.js';
