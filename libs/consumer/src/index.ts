export * from './stream.js';
export * from './run-consumer.js';
export * from './processed.js';
export { RetryLater, type ConsumerLogger, type DeliveryInfo } from '@runplane/eventlog';
