export * from './subjects.js';
export * from './errors.js';
export * from './event-log.js';
export * from './consumer.js';
export * from './result-store.js';
export * from './leases.js';
export * from './bus.js';
export * from './anomalies.js';
