export * from './decide.js';
export * from './messages.js';
export { classify } from './model-client.js';
export { runToolCallId, TurnAssembler, type StreamChunk } from './turn-assembly.js';
export * from './paragraphs.js';
export * from './context.js';
