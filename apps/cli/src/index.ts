export * from './commands.js';
export * from './render.js';
export * from './read-commands.js';
export { devAuthDir, devToken, MAX_TOKEN_TTL_SECONDS, mintLocalToken } from './local-stack.js';
export { program } from './program.js';
