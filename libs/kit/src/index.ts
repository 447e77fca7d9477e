export * from './errors.js';
export * from './retry.js';
export * from './kv-store.js';
export * from './named-error.js';
export * from './periodic.js';
export * from './memory.js';
export * from './renewal-slots.js';
export * from './provisioning.js';
