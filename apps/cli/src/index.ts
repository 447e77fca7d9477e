export * from './commands.js';
export * from './render.js';
export * from './read-commands.js';
export { program } from './program.js';
