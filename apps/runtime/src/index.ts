export * from './decide.js';
export * from './messages.js';
export { classify, ModelClient, ModelRateLimiter, retryAfterMs, type ModelClientOptions, type TurnOptions } from './model-client.js';
export * from './ledger.js';
export { runToolCallId, TurnAssembler, type StreamChunk } from './turn-assembly.js';
export * from './paragraphs.js';
export { planCalls, wakeAwaitsRecovery, type CallPlan } from './parking.js';
export * from './context.js';
export * from './sizes.js';
