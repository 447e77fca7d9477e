export * from './decide.js';
export * from './messages.js';
export { runToolCallId, classify } from './model-client.js';
export * from './paragraphs.js';
