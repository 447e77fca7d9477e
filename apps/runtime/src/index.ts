export * from './decide.js';
export * from './messages.js';
export { classify, ModelRateLimiter, retryAfterMs } from './model-client.js';
export * from './ledger.js';
export { runToolCallId, TurnAssembler, type StreamChunk } from './turn-assembly.js';
export * from './paragraphs.js';
export { planCalls, type CallPlan } from './parking.js';
